#!/usr/bin/env bash
# Create the Python venv of the interop tests and the benchmarks in $1 (default
# .deps/venv): torch 2.13.0 (the libtorch fulmen links), Lightning 2.6.6 and
# safetensors, CPU only. The torch wheel comes from $FULMEN_WHEELS (default
# .deps/wheels, shared with scripts/fetch-libtorch.sh). torch is installed without its CUDA dependency tree (GBs): only the two small NVIDIA wheels that
# libtorch_cpu.so links against (libcudart.so.13, libcupti.so.13) are added, and
# scripts/cuda_stubs.py builds abort-if-called stand-ins for the other CUDA
# libraries torch/_C links. Needs python3 (3.10+), gcc, ldd, nm, readelf.
# A complete venv is left untouched.
set -euo pipefail
dest=${1:-.deps/venv}
stamp="$dest/.fulmen-venv-ready"
wheels=${FULMEN_WHEELS:-$(dirname "$dest")/wheels}
[ -f "$stamp" ] && exit 0
py=${PYTHON:-python3}
echo "creating the Python venv in $dest" >&2
rm -rf "$dest"
"$py" -m venv "$dest"
pip=("$dest/bin/python" -m pip --disable-pip-version-check --quiet)
# The pure-Python dependencies of the packages below; none depends on torch.
"${pip[@]}" install --only-binary=:all: \
  filelock 'typing-extensions>=4.10' 'setuptools>=77.0.3' 'sympy>=1.13.3' \
  'networkx>=2.5.1' jinja2 'fsspec>=2022.5' 'PyYAML>5.4' \
  'lightning-utilities>=0.15.3' 'packaging>=23' 'tqdm>=4.57' numpy \
  safetensors==0.8.0
# Packages whose declared dependencies would pull the full CUDA stack: no deps
# (so pip neither fetches those nor warns about their absence).
# The big wheels are downloaded once into $wheels (pip keeps a file it
# already has there) and installed from it.
big=(torch==2.13.0 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85)
mkdir -p "$wheels"
"${pip[@]}" download --no-deps --only-binary=:all: -d "$wheels" "${big[@]}"
"${pip[@]}" install --no-deps --no-index --find-links "$wheels" "${big[@]}"
"${pip[@]}" install --no-deps --only-binary=:all: lightning==2.6.6 torchmetrics==1.9.0
# Stand-ins for the CUDA libraries torch's extension links but a CPU run never calls.
site=$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$dest/bin/python" "$(dirname "$0")/cuda_stubs.py" "$site"
"$dest/bin/python" - <<'PY'
import torch, lightning, safetensors.torch
print("torch", torch.__version__, "lightning", lightning.__version__)
torch.nn.Linear(2, 2)(torch.ones(1, 2)).sum().backward()
PY
touch "$stamp"
echo "Python venv ready in $dest" >&2
