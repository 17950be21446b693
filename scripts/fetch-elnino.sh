#!/usr/bin/env bash
# Fetch the El Nino series (monthly sea surface temperatures of the Pacific,
# 1950-2010: a year per row, twelve months per column) from the PyPI
# package statsmodels (pip verifies its hash) into $1.
set -euo pipefail
dest=${1:-.deps/data/elnino.csv}
[ -s "$dest" ] && exit 0
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-elnino.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching the El Nino series from the statsmodels wheel into $dest" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "statsmodels==0.15.0"
python3 - "$work"/statsmodels-*.whl "$work/elnino.csv" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    with open(sys.argv[2], "wb") as f:
        f.write(z.read("statsmodels/datasets/elnino/elnino.csv"))
PY
mkdir -p "$(dirname "$dest")"
mv "$work/elnino.csv" "$dest"
