#!/usr/bin/env bash
# Assemble a CPU libtorch from PyPI wheels into $1 (default .deps/libtorch):
# torch $2 (default 2.13.0; 2.11.0 for builds against an older PyTorch).
# pip verifies the wheels' hashes; the result is reused when already present.
# The wheels stay in $FULMEN_WHEELS (default: wheels/ beside $1) for the
# Python venv of the interop tests (scripts/setup-venv.sh).
set -euo pipefail
dest=${1:-.deps/libtorch}
version=${2:-2.13.0}
[ -f "$dest/build-version" ] && exit 0
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-libtorch.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching libtorch $version (CPU layout) from PyPI wheels into $dest" >&2
wheels=${FULMEN_WHEELS:-$(dirname "$dest")/wheels}
mkdir -p "$wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" \
  "torch==$version" nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
mkdir -p "$work/x"
for w in "$wheels"/torch-"$version"-*.whl "$wheels"/nvidia_cuda_runtime-13.0.96-*.whl "$wheels"/nvidia_cuda_cupti-13.0.85-*.whl; do
  python3 - "$w" "$work/x" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
keep = [n for n in z.namelist()
        if n.startswith("torch/include/") or "/lib/" in n or n.startswith("torch/lib/")]
for n in keep:
    z.extract(n, sys.argv[2])
PY
done
stage="$work/libtorch"
mkdir -p "$stage/lib"
mv "$work/x/torch/include" "$stage/include"
for f in libtorch_cpu.so libc10.so libgomp.so.1; do
  src=$(find "$work/x" -name "$f" | head -n1)
  [ -n "$src" ] || src=$(find "$work/x" -name "${f%%.so*}*.so*" | head -n1)
  [ -n "$src" ] || { echo "missing $f in the torch wheel" >&2; exit 1; }
  cp "$src" "$stage/lib/$f"
done
for f in libcudart.so.13 libcupti.so.13; do
  src=$(find "$work/x" -name "$f" | head -n1)
  [ -n "$src" ] || { echo "missing $f in the nvidia wheels" >&2; exit 1; }
  cp "$src" "$stage/lib/$f"
done
ln -sf libgomp.so.1 "$stage/lib/libgomp.so"
echo 'INPUT(libtorch_cpu.so)' > "$stage/lib/libtorch.so"
echo "$version" > "$stage/build-version"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$stage" "$dest"
echo "libtorch ready in $dest" >&2
