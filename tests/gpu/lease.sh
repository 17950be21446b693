#!/usr/bin/env bash
# The GPU kit's runs in two parts that fit a short loan of a GPU machine
# (about 10 minutes a command, 15 in all), each part's results packed into
# $OUT/res-PART.tgz after every step, so what ran comes back even when the
# part is stopped:
#
#   bundle/lease.sh 1 560    graphed steps, gpu_check, gpu_optim_check,
#                            flops-cuda, then the host-bound workloads (MLP,
#                            CNN, char GPT) beside PyTorch, torch.compile
#                            (reduce-overhead) and Lightning
#   bundle/lease.sh 2 SECS   GPT-2 small and ResNet-18 beside PyTorch,
#                            Lightning and torch.compile, then the MNIST
#                            benchmark (bench/run.py) if time is left
#   bundle/lease.sh all SECS every program run.sh runs by default
#
# SECS: the seconds the part may take; each step's limit is what is left.
set -u
b=$(cd "$(dirname "$0")" && pwd)
part=${1:?part: 1, 2 or all} budget=${2:?seconds}
out=${OUT:-$b/results}
mkdir -p "$out"
t0=$(date +%s)
res=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-lease.XXXXXX")
export PYTHONUNBUFFERED=1
left() { echo $((budget - ($(date +%s) - t0) - 15)); }
pack() { tar czf "$out/res-$part.tgz" -C "$res" . && echo "lease.sh: packed at $(($(date +%s) - t0)) s"; }
workloads() { # results-name workloads contenders
    local l; l=$(left)
    if [ "$l" -lt 40 ]; then echo "lease.sh: no time left for $1"; return; fi
    FULMEN_KIT_ONLY=bench-workloads FULMEN_KIT_WORKLOADS=$2 FULMEN_KIT_WORKLOADS_CONTENDERS=$3 \
        FULMEN_KIT_WORKLOADS_TIMEOUT=$l "$b/run.sh" "$res/$1"
    pack
}
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
case $part in
1)
    FULMEN_KIT_ONLY="gpu_graph_check gpu_check gpu_optim_check flops-cuda" FULMEN_KIT_TIMEOUT=120 \
        FULMEN_KIT_DEADLINE=$((budget / 3)) "$b/run.sh" "$res/checks"
    pack
    workloads host mlp,cnn,chargpt fulmen-c,fulmen-c-graphs,pytorch,pytorch-compile-ro,lightning
    ;;
2)
    workloads compute gpt2,resnet18 fulmen-c,fulmen-c-graphs,pytorch,lightning,pytorch-compile
    l=$(left)
    if [ "$l" -gt 60 ]; then
        FULMEN_KIT_ONLY=bench FULMEN_KIT_BENCH_CONTENDERS=fulmen-c,fulmen-c-graphs,pytorch,lightning \
            FULMEN_KIT_BENCH_TIMEOUT=$l "$b/run.sh" "$res/mnist"
    fi
    ;;
all)
    FULMEN_KIT_DEADLINE=$(left) "$b/run.sh" "$res/all"
    ;;
*)
    echo "lease.sh: unknown part '$part' (1, 2 or all)" >&2
    exit 2
    ;;
esac
pack
rm -rf "$res"
