#!/usr/bin/env bash
# Fetch one data set that ships inside the PyPI package statsmodels (pip
# verifies the wheel's hash) into DEST:
#
#   scripts/fetch-statsmodels-data.sh NAME DEST
#
# NAME is the CSV's path under statsmodels/datasets/, e.g.
#   elnino/elnino.csv  monthly Pacific sea surface temperatures, 1950-2010
#                      (a year per row, twelve months per column)
#   fair/fair.csv      Fair's 1978 survey of 6366 married women: marriage
#                      rating, age, years married, children, religiousness,
#                      education, occupation, husband's occupation, affairs
set -euo pipefail
name=$1
dest=$2
[ -s "$dest" ] && exit 0
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-statsmodels.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching $name from the statsmodels wheel into $dest" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "statsmodels==0.15.0"
python3 - "$work"/statsmodels-*.whl "statsmodels/datasets/$name" "$work/data.csv" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    with open(sys.argv[3], "wb") as f:
        f.write(z.read(sys.argv[2]))
PY
mkdir -p "$(dirname "$dest")"
mv "$work/data.csv" "$dest"
