#!/usr/bin/env bash
# Assembles into $1 (default .deps/libtorch-2.9-xla) a libtorch 2.9.0 that
# runs torch_xla's XLA backend in a program without Python code: the
# libraries of the torch 2.9.0 wheel that torch_xla's `_XLAC` extension
# loads (libtorch_cpu, libc10, libtorch, libtorch_python, libshm, libgomp),
# `_XLAC` itself from the torch-xla 2.9.0 wheel, CUDA 12.8's runtime and
# CUPTI (libtorch_cpu links them), and abort-if-called stand-ins for the
# CUDA libraries the wheel's libtorch and libtorch_python link (libtorch_cuda,
# cuDNN, ...; scripts/cuda_stubs.py), marked by a CUDA-STAND-INS file so
# that build.rs compiles no CUDA against them. fulmen built against this
# directory (`make lib-xla`) finds `_XLAC` beside libtorch_cpu and starts
# it when PJRT_DEVICE is set (src/accelerators/xla_runtime.rs).
#
# `_XLAC` links CPython 3.11's shared library: the system's libpython3.11
# (Debian: `apt-get install libpython3.11`), or the one FULMEN_XLA_LIBPYTHON
# names, is checked for first, not fetched.
# The wheels stay in $FULMEN_XLA_WHEELS (default: xla-wheels/ beside $1);
# pip verifies their hashes. Nothing is done when $1 is complete.
set -euo pipefail
dest=${1:-.deps/libtorch-2.9-xla}
[ -f "$dest/build-version" ] && exit 0
root=$(cd "$(dirname "$0")/.." && pwd)
libpython=${FULMEN_XLA_LIBPYTHON:-libpython3.11.so.1.0}
if ! python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$libpython" 2>/dev/null; then
  echo "fetch-xla.sh: $libpython cannot be loaded; torch_xla's _XLAC links CPython 3.11's library" \
       "(Debian: apt-get install libpython3.11; or set FULMEN_XLA_LIBPYTHON to its path)" >&2
  exit 1
fi
# The linker's checks below find a libpython named by path in its directory.
case "$libpython" in
  */*) export LD_LIBRARY_PATH="$(dirname "$libpython")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
esac
wheels=${FULMEN_XLA_WHEELS:-$(dirname "$dest")/xla-wheels}
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-xla.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching torch 2.9.0 and torch-xla 2.9.0 from PyPI into $wheels" >&2
mkdir -p "$wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 -d "$wheels" \
  torch==2.9.0 torch_xla==2.9.0 nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-cupti-cu12==12.8.90
stage="$work/libtorch"
mkdir -p "$stage/lib"
python3 - "$wheels" "$stage" <<'PY'
import glob, os, shutil, sys, zipfile
wheels, stage = sys.argv[1], sys.argv[2]
def one(pattern):
    found = sorted(glob.glob(os.path.join(wheels, pattern)))
    if not found:
        sys.exit(f"fetch-xla.sh: no wheel {pattern} in {wheels}")
    return zipfile.ZipFile(found[-1])
def copy(z, name, to):
    with z.open(name) as src, open(to, "wb") as dst:
        shutil.copyfileobj(src, dst)
torch = one("torch-2.9.0-cp311-*.whl")
for n in torch.namelist():
    if n.startswith("torch/include/") and not n.endswith("/"):
        out = os.path.join(stage, "include", n[len("torch/include/"):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        copy(torch, n, out)
for lib in ["libtorch_cpu.so", "libc10.so", "libtorch.so", "libtorch_python.so", "libshm.so", "libgomp.so.1"]:
    copy(torch, "torch/lib/" + lib, os.path.join(stage, "lib", lib))
xla = one("torch_xla-2.9.0-cp311-*.whl")
xlac = [n for n in xla.namelist() if n.startswith("_XLAC.") and n.endswith(".so")]
if len(xlac) != 1:
    sys.exit(f"fetch-xla.sh: the torch-xla wheel holds {xlac}, not one _XLAC library")
copy(xla, xlac[0], os.path.join(stage, "lib", xlac[0]))
for pattern, lib in [("nvidia_cuda_runtime_cu12-12.8.90-*.whl", "nvidia/cuda_runtime/lib/libcudart.so.12"),
                     ("nvidia_cuda_cupti_cu12-12.8.90-*.whl", "nvidia/cuda_cupti/lib/libcupti.so.12")]:
    copy(one(pattern), lib, os.path.join(stage, "lib", os.path.basename(lib)))
for f in glob.glob(os.path.join(stage, "lib", "*")):
    os.chmod(f, 0o755)
PY
ln -sf libgomp.so.1 "$stage/lib/libgomp.so"
python3 "$root/scripts/cuda_stubs.py" --libdir "$stage/lib"
missing=$(LD_LIBRARY_PATH="$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$stage"/lib/*.so* | grep "not found" | sort -u || true)
if [ -n "$missing" ]; then
  echo "fetch-xla.sh: libraries still missing after the stand-ins:" >&2
  echo "$missing" >&2
  exit 1
fi
(cd "$stage/lib" && grep -l "CUDA stand-in" ./*.so* | sed 's|^\./||' > CUDA-STAND-INS)
echo "2.9.0" > "$stage/build-version"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$stage" "$dest"
echo "XLA libtorch ready in $dest" >&2
