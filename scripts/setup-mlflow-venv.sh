#!/usr/bin/env bash
# Create the venv of MLflow's tracking server and client in $1 (default
# .deps/mlflow-venv), for tests/interop/mlflow_logger.py: the pinned list
# of scripts/mlflow-requirements.txt, without their declared dependencies
# (mlflow 3.18.0's wheel holds mlflow-skinny and mlflow-tracing whole; the
# list is what `mlflow server` and MlflowClient import). A separate venv
# keeps the server's ~60 packages out of the interop venv. Needs python3
# (3.10+). A venv made from the current list is left untouched (its
# stamp holds the list's checksum).
set -euo pipefail
dest=${1:-.deps/mlflow-venv}
list="$(dirname "$0")/mlflow-requirements.txt"
stamp="$dest/.fulmen-mlflow-ready"
sum=$(sha256sum "$list" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
  touch "$stamp"
  exit 0
fi
echo "creating the MLflow venv in $dest" >&2
rm -rf "$dest"
"${PYTHON:-python3}" -m venv "$dest"
"$dest/bin/python" -m pip --disable-pip-version-check --quiet install --no-deps --only-binary=:all: -r "$list"
"$dest/bin/python" -c 'import mlflow, mlflow.server; from mlflow import MlflowClient; print("mlflow", mlflow.__version__)'
echo "$sum" > "$stamp"
