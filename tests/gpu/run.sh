#!/usr/bin/env bash
# Runs the GPU kit (built by scripts/gpu-kit.sh) on a machine whose PyTorch
# is torch 2.11 with CUDA: it needs only that PyTorch (its torch/lib goes on
# LD_LIBRARY_PATH; libtorch_cuda finds the NVIDIA libraries itself).
#
#   bundle/run.sh [RESULTS_DIR]     (default: $OUT, else bundle/results)
#
# Environment: PYTHON (default python3); FULMEN_KIT_LIBDIR runs the
# programs on another libfulmen.so (the kit's CPU subset uses the 2.11 CPU
# build); FULMEN_KIT_TORCH_LIB gives torch's lib folder without Python;
# FULMEN_KIT_ONLY lists the programs to run (default: all).
# Writes RESULTS_DIR/summary.txt (one line per program: name, exit code,
# milliseconds) and RESULTS_DIR/<program>.log; exits non-zero when one failed
# (77 = skipped is not a failure).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${1:-${OUT:-$here/results}}
mkdir -p "$results"
py=${PYTHON:-python3}

{
    echo "== machine"
    uname -a
    nproc
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    echo "== kit: fulmen commit $(cat "$here/commit"), built against torch $(cat "$here/torch-version")"
    if [ -z "${FULMEN_KIT_TORCH_LIB:-}" ]; then
        "$py" - <<'PY'
import os, sys
import torch
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count())
print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "n/a")
print("torch_lib", os.path.join(os.path.dirname(torch.__file__), "lib"))
PY
    fi
} > "$results/machine.txt" 2>&1
cat "$results/machine.txt"

torch_lib=${FULMEN_KIT_TORCH_LIB:-$(sed -n 's/^torch_lib //p' "$results/machine.txt")}
if [ ! -f "$torch_lib/libtorch_cpu.so" ]; then
    echo "run.sh: no libtorch_cpu.so in '$torch_lib' (is PyTorch installed for $py?)" >&2
    exit 2
fi
libdir=${FULMEN_KIT_LIBDIR:-$here/lib}
export LD_LIBRARY_PATH=$libdir:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FULMEN_MNIST=$here/data/mnist_5k.csv.gz FULMEN_FIXTURES=$here/fixtures
# cuBLAS is deterministic only with a fixed workspace (deterministic=true).
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}

programs=${FULMEN_KIT_ONLY:-$(cd "$here/bin" && ls | grep -v '^mnist$' | tr '\n' ' ')}
failed=0
: > "$results/summary.txt"
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-kit.XXXXXX")
for p in $programs; do
    start=$(date +%s%N)
    case $p in
        gpu_check) (cd "$work" && "$here/bin/gpu_check" "$work") > "$results/$p.log" 2>&1 ;;
        *) (cd "$work" && "$here/bin/$p") > "$results/$p.log" 2>&1 ;;
    esac
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    printf '%-20s rc=%-3s %8d ms\n' "$p" "$rc" "$ms" | tee -a "$results/summary.txt"
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        failed=$((failed + 1))
        tail -n 20 "$results/$p.log"
    fi
done
if [ -z "${FULMEN_KIT_ONLY:-}" ] && [ -f "$FULMEN_MNIST" ]; then
    accels=cpu
    grep -q "available True" "$results/machine.txt" && accels="cpu cuda"
    for accel in $accels; do
        start=$(date +%s%N)
        (cd "$work" && "$here/bin/mnist" --data "$FULMEN_MNIST" --epochs 2 --accelerator "$accel" --out "$work/mnist-$accel") \
            > "$results/mnist-$accel.log" 2>&1
        rc=$?
        ms=$((($(date +%s%N) - start) / 1000000))
        printf '%-20s rc=%-3s %8d ms\n' "mnist-$accel" "$rc" "$ms" | tee -a "$results/summary.txt"
        [ "$rc" -eq 0 ] || { failed=$((failed + 1)); tail -n 20 "$results/mnist-$accel.log"; }
    done
fi
rm -rf "$work"
echo "run.sh: $failed program(s) failed; results in $results"
[ "$failed" -eq 0 ]
