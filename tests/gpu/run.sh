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
# FULMEN_KIT_ONLY lists the programs to run (default: all: gpu_check and
# gpu_graph_check (graphed steps: cuda_graphs), then
# with a GPU mnist-cuda (the example), lightning-cuda (its Lightning round
# trip), conformance-cuda (the custom-accelerator conformance program on
# the cuda accelerator), bench (against PyTorch and Lightning) and
# flops-cuda (FLOP counts beside PyTorch's FlopCounterMode), then the
# C tests (optim-bench, the optimizer step's bench on cuda beside PyTorch,
# and bench-exported, one training step of exported models on cuda four
# ways, and bench-workloads, the training steps of real workloads (MLP,
# CNN, char GPT, GPT-2 small, ResNet-18) beside PyTorch, torch.compile and
# Lightning, run only when named),
# cpp_tests (the C++ binding's), go_tests (the Go package's) and mnist-cpu);
# FULMEN_KIT_TIMEOUT bounds each program (default 300 s); FULMEN_KIT_DEADLINE
# (seconds, default none) leaves the programs not yet started once passed;
# FULMEN_KIT_BENCH_REPEATS / _EPOCHS / _CONTENDERS / _TIMEOUT (default 900 s)
# size the benchmark (the torch.compile contenders pytorch-compile and
# pytorch-compile-ro run only when _CONTENDERS names them);
# FULMEN_KIT_WORKLOADS (default all five), _WORKLOADS_CONTENDERS (default
# all six), _WORKLOADS_REPEATS (1) and _WORKLOADS_TIMEOUT (default 1500 s)
# size bench-workloads (graphs and the torch.compile contenders are
# optional there: a failure is written in its table, not fatal).
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
export FULMEN_EXPECT_LIBTORCH=${FULMEN_EXPECT_LIBTORCH:-$(cat "$here/torch-version")}
# cuBLAS is deterministic only with a fixed workspace (deterministic=true).
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}

# Runs one program under `timeout`, unless the deadline has passed; logs to
# RESULTS_DIR/<name>.log and adds a line to summary.txt.
failed=0
started=$(date +%s)
deadline=${FULMEN_KIT_DEADLINE:-0}
: > "$results/summary.txt"
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-kit.XXXXXX")
run_program() {
    local name=$1
    shift
    if [ "$deadline" -gt 0 ] && [ $(($(date +%s) - started)) -ge "$deadline" ]; then
        printf '%-20s not run (the kit deadline of %s s passed)\n' "$name" "$deadline" | tee -a "$results/summary.txt"
        return
    fi
    local start rc ms
    start=$(date +%s%N)
    (cd "$work" && timeout "${limit:-${FULMEN_KIT_TIMEOUT:-300}}" "$@") > "$results/$name.log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    printf '%-20s rc=%-3s %8d ms\n' "$name" "$rc" "$ms" | tee -a "$results/summary.txt"
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        failed=$((failed + 1))
        tail -n 20 "$results/$name.log"
    fi
}

gpu=false
grep -q "available True" "$results/machine.txt" && gpu=true
if [ -n "${FULMEN_KIT_ONLY:-}" ]; then
    programs=$FULMEN_KIT_ONLY
else
    # The GPU's own checks first (with a GPU and the data: the example on
    # cuda, its Lightning round trip and the benchmark), then the C tests,
    # cpp_tests and go_tests, and the example on the CPU.
    programs="gpu_check gpu_graph_check"
    if $gpu && [ -f "$FULMEN_MNIST" ]; then programs="$programs mnist-cuda lightning-cuda conformance-cuda bench"; fi
    if $gpu; then programs="$programs flops-cuda"; fi
    programs="$programs $(cd "$here/bin" && ls | grep -v -e '^mnist$' -e '^gpu_check$' -e '^gpu_graph_check$' | tr '\n' ' ')"
    [ -f "$FULMEN_MNIST" ] && programs="$programs mnist-cpu"
fi
# Weights PyTorch saves from cuda:0, for gpu_check to read.
if $gpu && [ -f "$here/interop/torch_cuda_weights.py" ]; then
    "$py" "$here/interop/torch_cuda_weights.py" "$work/torch-cuda.pt" > "$results/torch_cuda_weights.log" 2>&1 \
        && export FULMEN_GPU_TORCH_WEIGHTS=$work/torch-cuda.pt
fi
# PyTorch's foreach optimizer steps on cuda:0, for gpu_optim_check to match.
if $gpu && [ -f "$here/interop/torch_cuda_optim.py" ]; then
    "$py" "$here/interop/torch_cuda_optim.py" "$work/torch-optim" > "$results/torch_cuda_optim.log" 2>&1 \
        && export FULMEN_GPU_TORCH_OPTIM=$work/torch-optim
fi
for p in $programs; do
    case $p in
        gpu_check) run_program gpu_check "$here/bin/gpu_check" "$work" ;;
        gpu_graph_check) run_program gpu_graph_check "$here/bin/gpu_graph_check" "$work" ;;
        go_tests) run_program go_tests "$here/bin/go_tests" -test.count=1 -test.v ;;
        mnist-cuda | mnist-cpu)
            run_program "$p" "$here/bin/mnist" --data "$FULMEN_MNIST" --epochs 2 --accelerator "${p#mnist-}" \
                --out "$work/$p" ;;
        # The example's Lightning-format checkpoints written on the GPU,
        # resumed by Lightning's Trainer on cuda, and Lightning's resumed by
        # the example.
        # The custom-accelerator conformance program on the cuda accelerator.
        conformance-cuda)
            run_program conformance-cuda "$here/conformance/fulmen_conformance" --accelerator cuda ;;
        # FLOP counts on cuda:0 (CUDA's fused attention) beside PyTorch's.
        flops-cuda)
            run_program flops-cuda "$py" "$here/tests/interop/flops_parity.py" --device cuda \
                --binary "$here/build/interop/flops_parity" --work "$work/flops" ;;
        lightning-cuda)
            run_program lightning-cuda "$py" "$here/interop/mnist_lightning_check.py" --binary "$here/bin/mnist" \
                --data "$FULMEN_MNIST" --accelerator cuda --work "$work/mnist-lightning" ;;
        bench)
            limit=${FULMEN_KIT_BENCH_TIMEOUT:-900} run_program bench "$py" "$here/bench/run.py" --accelerator cuda \
                --python "$py" --data "$FULMEN_MNIST" \
                --contenders "${FULMEN_KIT_BENCH_CONTENDERS:-fulmen-c,fulmen-c-graphs,pytorch,lightning,lightning-full}" \
                --repeats "${FULMEN_KIT_BENCH_REPEATS:-1}" --epochs "${FULMEN_KIT_BENCH_EPOCHS:-3}" --timeout 120 \
                --out "$results/bench.md" --jsonl "$results/bench.jsonl" ;;
        bench-workloads)
            limit=${FULMEN_KIT_WORKLOADS_TIMEOUT:-1500} run_program bench-workloads "$py" "$here/bench/workloads.py" \
                --accelerator cuda --python "$py" --binary "$here/build/bench/workload_bench" \
                --workloads "${FULMEN_KIT_WORKLOADS:-mlp,cnn,chargpt,gpt2,resnet18}" \
                --contenders "${FULMEN_KIT_WORKLOADS_CONTENDERS:-fulmen-c,fulmen-c-graphs,pytorch,pytorch-compile,pytorch-compile-ro,lightning}" \
                --optional fulmen-c-graphs,pytorch-compile,pytorch-compile-ro \
                --repeats "${FULMEN_KIT_WORKLOADS_REPEATS:-1}" --timeout 300 \
                --out "$results/bench-workloads.md" --jsonl "$results/bench-workloads.jsonl" ;;
        optim-bench)
            run_program optim-bench "$py" "$here/bench/optim_step.py" --binary "$here/build/bench/optim_bench" \
                --device cuda --out "$results/optim-bench.md" ;;
        # bench/exported.py on cuda:0: models exported here by this machine's
        # PyTorch, run by fulmen and beside PyTorch eager and torch.compile.
        # The compiled steps need a CUDA AOTInductor package built here (a
        # C++ compiler and CUDA toolchain beside PyTorch), torch.compile on
        # cuda needs Triton: where either fails, the table says why rather
        # than leaving the row out.
        bench-exported)
            limit=${FULMEN_KIT_BENCH_TIMEOUT:-900} run_program bench-exported "$py" "$here/bench/exported.py" \
                --device cuda --threads 1 --python "$py" --binary "$here/build/bench/exported_step" \
                --repeats "${FULMEN_KIT_BENCH_REPEATS:-1}" --epochs "${FULMEN_KIT_BENCH_EPOCHS:-3}" \
                --optional fulmen-compiled,torch-compile --timeout 300 --out "$results/bench-exported.md" ;;
        *) run_program "$p" "$here/bin/$p" ;;
    esac
done
rm -rf "$work"
echo "run.sh: $failed program(s) failed; results in $results"
[ "$failed" -eq 0 ]
