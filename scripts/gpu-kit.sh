#!/usr/bin/env bash
# Builds the GPU kit on a machine without a GPU: a CUDA + NCCL libfulmen for
# a GPU machine whose PyTorch is torch 2.11.0 with CUDA 13 (the PyPI wheel's
# layout), stripped, with every C test program, the C MNIST example and its
# data, tests/gpu/gpu_check, the benchmark harness (bench/) with its fulmen-c
# contender, bench/exported.py with its exported_step contender, and run.sh,
# which needs nothing on that machine but its installed PyTorch (and
# Lightning, for the benchmarks).
#
#   scripts/gpu-kit.sh [KIT_DIR]        (default build/gpu-kit)
#
# Writes KIT_DIR/bundle (kept under 64 MiB) and KIT_DIR/bundle.tar.gz.
# Downloads (once, into .deps/wheels): the torch 2.11.0 wheel and the CUDA
# 13.0 wheels whose headers the shim's CUDA and NCCL parts compile against
# (cuda-runtime, crt, cccl, nccl, cublas, cusparse, cusolver), about 1.5 GB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kit=${1:-$root/build/gpu-kit}
case "$kit" in /*) ;; *) kit=$root/$kit ;; esac
deps=$root/.deps
wheels=${FULMEN_WHEELS:-$deps/wheels}
version=2.11.0
libtorch=$deps/libtorch-$version-cuda
cuda=$deps/cuda-13.0
limit=$((64 * 1024 * 1024))

say() { echo "gpu-kit: $*" >&2; }

# The versions torch 2.11.0's cuda-toolkit 13.0.2 pins.
cuda_wheels=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85
    nvidia-nccl-cu13==2.28.9 nvidia-cublas==13.1.0.3 nvidia-cusparse==12.6.3.3 nvidia-cusolver==12.0.4.66)
mkdir -p "$wheels"
say "fetching torch $version and the CUDA 13.0 header wheels into $wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" "torch==$version" "${cuda_wheels[@]}"

# libtorch with CUDA: headers and the libraries fulmen links, from the wheel.
if [ ! -f "$libtorch/build-version" ]; then
    say "assembling $libtorch"
    rm -rf "$libtorch.tmp" && mkdir -p "$libtorch.tmp/lib"
    python3 - "$wheels"/torch-"$version"-*.whl "$libtorch.tmp" <<'PY'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
libs = {"libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libc10.so", "libc10_cuda.so", "libgomp.so.1"}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("torch/include/") and not name.endswith("/"):
            target = os.path.join(dest, "include", name[len("torch/include/"):])
        elif name.startswith("torch/lib/") and os.path.basename(name) in libs:
            target = os.path.join(dest, "lib", os.path.basename(name))
        else:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
missing = libs - set(os.listdir(os.path.join(dest, "lib")))
if missing:
    sys.exit(f"the torch wheel lacks {sorted(missing)}")
PY
    ln -sf libgomp.so.1 "$libtorch.tmp/lib/libgomp.so"
    echo "$version" > "$libtorch.tmp/build-version"
    rm -rf "$libtorch" && mv "$libtorch.tmp" "$libtorch"
fi

# CUDA and NCCL headers only (no CUDA library is needed to build).
if [ ! -f "$cuda/include/cuda_runtime_api.h" ] || [ ! -f "$cuda/include/nccl.h" ]; then
    say "extracting the CUDA 13.0 headers into $cuda"
    rm -rf "$cuda.tmp" && mkdir -p "$cuda.tmp/include"
    for spec in "${cuda_wheels[@]}"; do
        name=${spec%%==*}
        ver=${spec#*==}
        whl=$(ls "$wheels"/"${name//-/_}"-"$ver"-*.whl | head -n1)
        python3 - "$whl" "$cuda.tmp/include" <<'PY'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        marker = "/include/"
        if marker not in name or name.endswith("/") or not name.startswith("nvidia/"):
            continue
        target = os.path.join(dest, name.split(marker, 1)[1])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
PY
    done
    rm -rf "$cuda" && mv "$cuda.tmp" "$cuda"
fi

# gloo's headers (ProcessGroupGloo), as for the CPU build.
[ -f "$deps/gloo/include/gloo/config.h" ] || bash "$root/scripts/fetch-gloo-headers.sh" "$deps/gloo"

say "building libfulmen against $libtorch (CUDA + NCCL)"
bash "$root/scripts/torch-variant.sh" "$version" "$kit/pkg"
cccl=()
[ -d "$cuda/include/cccl" ] && cccl=(-I"$cuda/include/cccl")
env LIBTORCH="$libtorch" FULMEN_CUDA_INCLUDE="$cuda/include" FULMEN_NCCL_INCLUDE="$cuda/include" \
    FULMEN_GLOO_INCLUDE="${FULMEN_GLOO_INCLUDE:-$deps/gloo/include}" CXXFLAGS="${cccl[*]:-}" \
    CARGO_TARGET_DIR="$kit/target" cargo build --release --lib --manifest-path "$kit/pkg/Cargo.toml"
lib=$kit/target/release/libfulmen.so
# (Read into files first: `grep -q` on a pipe would stop the writer early.)
readelf -d "$lib" > "$kit/dynamic.txt"
nm -DC "$lib" > "$kit/symbols.txt"
for needed in libtorch_cuda.so libc10_cuda.so; do
    grep -q "NEEDED.*\[$needed\]" "$kit/dynamic.txt" || { say "$lib does not link $needed"; exit 1; }
done
grep -q "ProcessGroupNCCL::ProcessGroupNCCL" "$kit/symbols.txt" || { say "$lib has no NCCL process group"; exit 1; }
grep -q "CUDACachingAllocator" "$kit/symbols.txt" || { say "$lib has no CUDA allocator statistics"; exit 1; }

say "bundling into $kit/bundle"
bundle=$kit/bundle
rm -rf "$bundle" && mkdir -p "$bundle/lib" "$bundle/bin" "$bundle/data" "$bundle/fixtures"
# The library under its SONAME only (the upload keeps no symlinks); the
# programs link it by that name.
soname=$(sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p' "$kit/dynamic.txt")
[ -n "$soname" ] || { say "$lib has no SONAME"; exit 1; }
strip --strip-unneeded -o "$bundle/lib/$soname" "$lib"
# Programs find libfulmen beside them; the NVIDIA libraries are not here,
# so their symbols are left for the GPU machine's loader.
cflags=(-std=c11 -Wall -Wextra -Werror -pedantic -O1 -I"$root/include")
ldflags=(-L"$bundle/lib" -Wl,-rpath,'$ORIGIN/../lib' -Wl,--allow-shlib-undefined -l:"$soname" -lm)
for src in "$root"/tests/c/test_*.c "$root"/tests/gpu/gpu_check.c "$root"/tests/gpu/gpu_optim_check.c "$root"/tests/gpu/gpu_graph_check.c \
    "$root"/examples/c/mnist.c; do
    exe=$bundle/bin/$(basename "${src%.c}")
    cc "${cflags[@]}" "$src" -o "$exe" "${ldflags[@]}" 2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
    strip "$exe"
done
# The C++ binding's GoogleTest suite (no sanitizers, and the C++ runtime
# linked in: the GPU machine's compiler runtime is not known here) and the
# Go package's tests (a test binary, through a fulmen.pc for the bundle).
cxx_tests=$bundle/bin/cpp_tests
objs=()
for src in "$root"/bindings/cpp/tests/*.cpp; do
    obj=$kit/cpp-obj/$(basename "${src%.cpp}").o
    mkdir -p "$kit/cpp-obj"
    g++ -std=c++17 -Wall -Wextra -Werror -pedantic -O1 -I"$root/include" -I"$root/bindings/cpp/include" -c "$src" -o "$obj"
    objs+=("$obj")
done
g++ "${objs[@]}" -o "$cxx_tests" "${ldflags[@]}" -lgtest -lgtest_main -pthread -static-libstdc++ -static-libgcc \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$cxx_tests"
g++ -std=c++17 -Wall -Wextra -Werror -pedantic -O1 -I"$root/include" -I"$root/bindings/cpp/include" \
    "$root/bindings/cpp/custom_device.cpp" -o "$bundle/bin/cpp_custom_device" "${ldflags[@]}" -static-libstdc++ -static-libgcc \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$bundle/bin/cpp_custom_device"
# The conformance program, run on the cuda accelerator (run.sh).
mkdir -p "$bundle/conformance"
cc "${cflags[@]}" "$root/tests/conformance/conformance.c" -o "$bundle/conformance/fulmen_conformance" \
    "${ldflags[@]}" -ldl 2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$bundle/conformance/fulmen_conformance"
mkdir -p "$kit/pc"
cat > "$kit/pc/fulmen.pc" <<PC
Name: fulmen
Description: fulmen (GPU kit)
Version: 0.1.0
Libs: -L$bundle/lib -l:$soname -Wl,--allow-shlib-undefined
Cflags: -I$root/include
PC
(cd "$root/bindings/go" && env GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1 \
    PKG_CONFIG_PATH="$kit/pc" CGO_LDFLAGS_ALLOW='.*' CGO_LDFLAGS='-Wl,-rpath,$ORIGIN/../lib' \
    go test -c -ldflags='-s -w' -o "$bundle/bin/go_tests" . \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2))
# The Lightning round trip of the example's checkpoints, and PyTorch's side
# of gpu_check's weights saved from cuda:0.
mkdir -p "$bundle/interop"
cp "$root/tests/interop/mnist_lightning_check.py" "$root/tests/gpu/torch_cuda_weights.py" \
    "$root/tests/gpu/torch_cuda_optim.py" "$bundle/interop/"
# The benchmark harness with its fulmen-c contender, laid out as in the
# repository (bench/run.py finds build/bench/fulmen_bench and Cargo.toml
# beside it); the Python contenders use the GPU machine's PyTorch and
# Lightning.
mkdir -p "$bundle/bench/python" "$bundle/build/bench"
cp "$root"/bench/run.py "$root"/bench/report.py "$root"/bench/PROTOCOL.md "$root"/bench/optim_step.py "$bundle/bench/"
cp "$root"/bench/python/*.py "$bundle/bench/python/"
cp "$root/Cargo.toml" "$bundle/"
cc "${cflags[@]/-O1/-O2}" "$root/bench/c/fulmen_bench.c" -o "$bundle/build/bench/fulmen_bench" \
    -L"$bundle/lib" -Wl,-rpath,'$ORIGIN/../../lib' -Wl,--allow-shlib-undefined -l:"$soname" -lm \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$bundle/build/bench/fulmen_bench"
# The optimizer step's bench (for-loop, foreach and fused beside PyTorch).
cc "${cflags[@]/-O1/-O2}" "$root/bench/c/optim_bench.c" -o "$bundle/build/bench/optim_bench" \
    -L"$bundle/lib" -Wl,-rpath,'$ORIGIN/../../lib' -Wl,--allow-shlib-undefined -l:"$soname" -lm \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$bundle/build/bench/optim_bench"
# One training step of exported models (bench/exported.py, run.sh's
# bench-exported), its C contender and what it imports: the export helper
# and export_parity.py's models, laid out as in the repository.
cc "${cflags[@]/-O1/-O2}" "$root/bench/c/exported_step.c" -o "$bundle/build/bench/exported_step" \
    -L"$bundle/lib" -Wl,-rpath,'$ORIGIN/../../lib' -Wl,--allow-shlib-undefined -l:"$soname" -lm \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$bundle/build/bench/exported_step"
# Training steps of real workloads (bench/workloads.py, run.sh's
# bench-workloads): its C contender.
cc "${cflags[@]/-O1/-O2}" "$root/bench/c/workload_bench.c" -o "$bundle/build/bench/workload_bench" \
    -L"$bundle/lib" -Wl,-rpath,'$ORIGIN/../../lib' -Wl,--allow-shlib-undefined -l:"$soname" -lm \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$bundle/build/bench/workload_bench"
mkdir -p "$bundle/python" "$bundle/tests/interop" "$bundle/build/interop"
cp "$root/bench/exported.py" "$root/bench/workloads.py" "$bundle/bench/"
cp "$root/python/fulmen_export.py" "$bundle/python/"
# tabulate 0.9 beside it, for the FlopCounterMode tables flops_parity.py
# compares (0.10 drops the indentation torch asks for; the device's Python
# need not have either): the script puts python/ first on its path.
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" tabulate==0.9.0
python3 -m zipfile -e "$wheels"/tabulate-0.9.0-py3-none-any.whl "$bundle/python/"
cp "$root/tests/interop/export_parity.py" "$root/tests/interop/twin.py" "$root/tests/interop/flops_parity.py" \
    "$bundle/tests/interop/"
# FLOP counts on cuda:0 beside PyTorch's FlopCounterMode (run.sh's
# flops-cuda: CUDA's fused attention kernels).
cc "${cflags[@]/-O1/-O2}" "$root/tests/interop/flops_parity.c" -o "$bundle/build/interop/flops_parity" \
    -L"$bundle/lib" -Wl,-rpath,'$ORIGIN/../../lib' -Wl,--allow-shlib-undefined -l:"$soname" -lm \
    2> >(grep -v "not found (try using -rpath or -rpath-link)" >&2)
strip "$bundle/build/interop/flops_parity"
cp "$deps/data/mnist_5k.csv.gz" "$bundle/data/" 2>/dev/null || say "no MNIST data in .deps/data (make deps): the example will be skipped"
cp -r "$root"/tests/fixtures/. "$bundle/fixtures/"
cp "$root/tests/gpu/run.sh" "$root/tests/gpu/lease.sh" "$bundle/"
chmod +x "$bundle/run.sh" "$bundle/lease.sh"
git -C "$root" rev-parse HEAD > "$bundle/commit" 2>/dev/null || echo unknown > "$bundle/commit"
echo "$version" > "$bundle/torch-version"
size=$(du -sb "$bundle" | cut -f1)
say "bundle: $((size / 1024)) KiB in $bundle"
[ "$size" -lt "$limit" ] || { say "the bundle is over 64 MiB"; exit 1; }
tar -C "$kit" -czf "$kit/bundle.tar.gz" bundle
