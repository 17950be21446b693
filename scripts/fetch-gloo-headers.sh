#!/usr/bin/env bash
# Install gloo's C++ headers into $1/include (default .deps/gloo): the torch
# wheel ships libtorch's gloo code but not these headers, which c10d's
# ProcessGroupGloo.hpp includes. They come from Debian's libgloo-dev package
# (headers only; nothing of it is linked), checked against a pinned hash.
set -euo pipefail
dest=${1:-.deps/gloo}
[ -f "$dest/include/gloo/config.h" ] && exit 0
deb=libgloo-dev_0.0~git20220518.5b14351-3_amd64.deb
sha=80529c9fd8af452faf489e686b94bf87075965c40673803810c4f41634b1e299
url=http://deb.debian.org/debian/pool/main/g/gloo/$deb
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-gloo.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching gloo headers (Debian libgloo-dev) into $dest" >&2
(cd "$work" && apt-get download libgloo-dev=0.0~git20220518.5b14351-3 >/dev/null 2>&1) ||
  python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$work/$deb"
echo "$sha  $work/$deb" | sha256sum -c --quiet - || { echo "libgloo-dev: hash mismatch" >&2; exit 1; }
dpkg-deb -x "$work/$deb" "$work/x"
mkdir -p "$dest/include"
rm -rf "$dest/include/gloo"
cp -r "$work/x/usr/include/gloo" "$dest/include/gloo"
echo "gloo headers ready in $dest/include" >&2
