#!/usr/bin/env bash
# Fetch the Lee background corpus (300 Australian news stories, 360 kB of
# English prose) from the PyPI package gensim (pip verifies its hash) into $1.
set -euo pipefail
dest=${1:-.deps/data/lee_background.txt}
[ -s "$dest" ] && exit 0
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-lee.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching the Lee corpus from the gensim wheel into $dest" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "gensim==4.4.0"
python3 - "$work"/gensim-*.whl "$work/lee_background.txt" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    with open(sys.argv[2], "wb") as f:
        f.write(z.read("gensim/test/test_data/lee_background.cor"))
PY
mkdir -p "$(dirname "$dest")"
mv "$work/lee_background.txt" "$dest"
