#!/usr/bin/env bash
# Create the Python venv of the interop tests and the benchmarks in $1 (default
# .deps/venv): torch 2.13.0 (the libtorch fulmen links), Lightning 2.6.6 and
# safetensors, CPU only. The torch wheel comes from $FULMEN_WHEELS (default
# .deps/wheels, shared with scripts/fetch-libtorch.sh). torch is installed without its CUDA dependency tree (GBs): only the two small NVIDIA wheels that
# libtorch_cpu.so links against (libcudart.so.13, libcupti.so.13) are added, and
# scripts/cuda_stubs.py builds abort-if-called stand-ins for the other CUDA
# libraries torch/_C links. Needs python3 (3.11+, for transformers), gcc, ldd,
# nm, readelf.
# A second layer adds timm and transformers (models built from their configs
# in tests/interop/export_parity.py) with the few packages they import, each
# pinned and without its declared dependencies; it is added to a venv made
# before it existed, and reinstalled when its list changes.
# A third layer adds wandb 0.31 (W&B's SDK, whose wandb-core writes offline
# runs) and what it imports, pinned and without declared dependencies: the
# W&B logger's check (tests/interop/wandb_logger.py) runs Lightning's
# WandbLogger offline and reads both sides' `.wandb` files with W&B's own
# reader, `wandb leet inspect`.
# A fourth layer adds comet_ml 3.58 likewise: the Comet logger's check
# (tests/interop/comet_logger.py) runs Lightning's CometLogger offline and
# reads both sides' archives with comet_ml's own upload code.
# A complete venv whose model, W&B and Comet layers are the current lists is
# left untouched (the last stamp, .fulmen-venv-comet-ready, is touched for
# make).
set -euo pipefail
dest=${1:-.deps/venv}
stamp="$dest/.fulmen-venv-ready"
# Holds the model layer's list; the Makefile's VENV_STAMP.
models_stamp="$dest/.fulmen-venv-models-ready"
wheels=${FULMEN_WHEELS:-$(dirname "$dest")/wheels}
# What timm 1.0 and transformers 5 import to build resnet18, vit_tiny and
# GPT-2 offline: torchvision (timm's layers; matches torch 2.13.0) and pillow
# (torchvision's import), huggingface_hub and the HTTP client it imports
# (httpx2, httpcore2, h11, idna, truststore), regex (transformers), and
# tokenizers: with transformers present, importing Lightning imports
# torchmetrics' BERTScore, hence transformers' AutoTokenizer, which fails
# without it. tensorboard with protobuf and absl-py (what its
# EventAccumulator and torch's SummaryWriter import): Lightning's
# TensorBoardLogger and the reader of tests/interop/logger_parity.py.
# tabulate 0.9 (0.10 ignores the PRESERVE_WHITESPACE torch sets): the
# tables of FlopCounterMode.get_table that tests/interop/flops_parity.py
# compares.
models=(timm==1.0.31 transformers==5.23.0 torchvision==0.28.0 pillow==13.0.0 huggingface-hub==2.4.0
  httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 idna==3.20 truststore==0.10.5 regex==2026.11.15
  tokenizers==0.23.3 tensorboard==2.21.0 protobuf==7.36.2 absl-py==2.5.1 tabulate==0.9.0)
# Holds the W&B layer's list.
wandb_stamp="$dest/.fulmen-venv-wandb-ready"
wandb_layer_list=(wandb==0.31.0 annotated-types==0.8.0 anyio==4.16.0 certifi==2026.10.19.post1
  charset-normalizer==3.5.3 click==8.5.1 cwevals==0.0.1b1 distro==1.9.0 googleapis-common-protos==1.76.0
  httpcore==1.0.9 httpx==0.29.0 opentelemetry-api==1.45.2 opentelemetry-exporter-http-transport==0.66b2
  opentelemetry-exporter-otlp-common==0.66b2 opentelemetry-exporter-otlp-proto-common==1.45.2
  opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2
  opentelemetry-semantic-conventions==0.66b2 platformdirs==4.14.9 pydantic==2.14.4 pydantic-core==2.50.5
  requests==2.34.2 sniffio==1.3.1 typing-inspection==0.4.5 urllib3==2.8.0 xxhash==4.1.0)
# Holds the Comet layer's list; the Makefile's VENV_STAMP.
comet_stamp="$dest/.fulmen-venv-comet-ready"
comet_layer_list=(comet-ml==3.58.8 attrs==26.1.0 configobj==5.0.9 dulwich==1.2.21 everett==3.1.0
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 markdown-it-py==4.3.0 mdurl==0.1.2 psutil==7.2.2
  pygments==2.21.0 python-box==6.1.0 referencing==0.37.0 requests-toolbelt==1.0.0 rich==15.0.0
  rpds-py==2026.9.1 semantic-version==2.10.0 sentry-sdk==2.76.0 simplejson==4.3.0 wrapt==2.5.2
  wurlitzer==3.1.1)
pip=("$dest/bin/python" -m pip --disable-pip-version-check --quiet)
if [ -f "$stamp" ] && [ "$(cat "$models_stamp" 2>/dev/null)" = "${models[*]}" ] \
  && [ "$(cat "$wandb_stamp" 2>/dev/null)" = "${wandb_layer_list[*]}" ] \
  && [ "$(cat "$comet_stamp" 2>/dev/null)" = "${comet_layer_list[*]}" ]; then
  touch "$comet_stamp"
  exit 0
fi

# torch, Lightning and safetensors in a new venv; $stamp once done.
base_layer() {
  py=${PYTHON:-python3}
  echo "creating the Python venv in $dest" >&2
  rm -rf "$dest"
  "$py" -m venv "$dest"
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
}

# timm, transformers and what they import, into the venv; $models_stamp
# (holding the list) once they build their models.
models_layer() {
  echo "adding timm and transformers to the Python venv in $dest" >&2
  if ! "$dest/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup-venv: $dest runs Python $("$dest/bin/python" -V 2>&1); transformers 5 needs 3.11 or newer:" \
      "remove $dest and rerun with PYTHON set to a Python 3.11+" >&2
    exit 1
  fi
  rm -f "$models_stamp"
  "${pip[@]}" install --no-deps --only-binary=:all: "${models[@]}"
  HF_HUB_OFFLINE=1 "$dest/bin/python" - <<'PY'
import lightning, timm, transformers, torch
timm.create_model("resnet18", pretrained=False, num_classes=2)
timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=2, img_size=32)
config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=16, n_positions=8,
                                 bos_token_id=0, eos_token_id=0)
transformers.GPT2LMHeadModel(config)(torch.zeros(1, 4, dtype=torch.long))
print("timm", timm.__version__, "transformers", transformers.__version__)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter
PY
  printf '%s\n' "${models[*]}" > "$models_stamp"
}

# wandb and what it imports, into the venv; $wandb_stamp (holding the
# list) once Lightning's WandbLogger imports.
wandb_layer() {
  echo "adding wandb to the Python venv in $dest" >&2
  rm -f "$wandb_stamp"
  "${pip[@]}" install --no-deps --only-binary=:all: "${wandb_layer_list[@]}"
  WANDB_MODE=offline "$dest/bin/python" - <<'PY'
import wandb
from wandb.proto import wandb_internal_pb2
from lightning.pytorch.loggers import WandbLogger
print("wandb", wandb.__version__)
PY
  printf '%s\n' "${wandb_layer_list[*]}" > "$wandb_stamp"
}

# comet_ml and what it imports, into the venv; $comet_stamp (holding the
# list) once Lightning's CometLogger and comet_ml's upload code import.
comet_layer() {
  echo "adding comet_ml to the Python venv in $dest" >&2
  rm -f "$comet_stamp"
  "${pip[@]}" install --no-deps --only-binary=:all: "${comet_layer_list[@]}"
  COMET_DISABLE_AUTO_LOGGING=1 "$dest/bin/python" - <<'PY'
import comet_ml
from comet_ml.offline import OfflineSender
from lightning.pytorch.loggers import CometLogger
print("comet_ml", comet_ml.__version__)
PY
  printf '%s\n' "${comet_layer_list[*]}" > "$comet_stamp"
}

if [ ! -f "$stamp" ]; then
  base_layer
fi
if [ "$(cat "$models_stamp" 2>/dev/null)" != "${models[*]}" ]; then
  models_layer
fi
if [ "$(cat "$wandb_stamp" 2>/dev/null)" != "${wandb_layer_list[*]}" ]; then
  wandb_layer
fi
comet_layer
echo "Python venv ready in $dest" >&2
