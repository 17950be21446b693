#!/usr/bin/env bash
# Prepares a Cargo package in $2 that builds fulmen's sources against another
# libtorch version $1 (for example 2.11): the same sources (symlinks), with
# the tch / torch-sys release that targets that libtorch. Cargo cannot hold
# two torch-sys versions in one manifest (both link the native "tch"), so
# the other version gets its own manifest and lock file.
#
#   scripts/torch-variant.sh 2.11 build/torch-2.11
#   LIBTORCH=.deps/libtorch-2.11 cargo build --release --lib \
#       --manifest-path build/torch-2.11/Cargo.toml
set -euo pipefail
version=${1:?usage: torch-variant.sh LIBTORCH_VERSION DIR}
dest=${2:?usage: torch-variant.sh LIBTORCH_VERSION DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
case "$version" in
    2.9 | 2.9.*) tch=0.22 ;;
    2.11 | 2.11.*) tch=0.24 ;;
    2.13 | 2.13.*) tch=0.26 ;;
    *) echo "torch-variant.sh: no tch release known for libtorch $version (known: 2.11, 2.13)" >&2; exit 1 ;;
esac
mkdir -p "$dest"
for entry in src csrc build.rs bench include cbindgen.toml rustfmt.toml tests tools examples; do
    ln -sfn "$root/$entry" "$dest/$entry"
done
sed -e "s/^tch = \".*\"/tch = \"$tch\"/" -e "s/^torch-sys = \".*\"/torch-sys = \"$tch\"/" \
    "$root/Cargo.toml" > "$dest/Cargo.toml.new"
grep -q "^tch = \"$tch\"" "$dest/Cargo.toml.new" || { echo "torch-variant.sh: no tch line in Cargo.toml" >&2; exit 1; }
# Rewrite only on change, so cargo does not rebuild for nothing.
if cmp -s "$dest/Cargo.toml.new" "$dest/Cargo.toml"; then rm "$dest/Cargo.toml.new"; else mv "$dest/Cargo.toml.new" "$dest/Cargo.toml"; fi
[ -f "$dest/Cargo.lock" ] || cp "$root/Cargo.lock" "$dest/Cargo.lock"
