#!/usr/bin/env bash
# Builds the "fulmen-go" benchmark contenders: bench/PROTOCOL.md's to
# build/bench/fulmen_bench_go and examples/go/charlm (bench/charlm.py) to
# build/bench/charlm_go, as bindings/go/run-tests.sh builds
# examples/go/mnist: offline (no module proxy, no toolchain download), cgo
# on, against the library in <repo>/target/release and the header in
# <repo>/include, found through a fulmen.pc written here (the binding's
# default cgo flags, with an rpath to the library).
#
#   bench/go/build.sh
#
# Environment:
#   FULMEN_LIBDIR  link the library in this folder (with the header of
#                  FULMEN_INCLUDEDIR, default <repo>/include) instead of
#                  target/release.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT="$ROOT/build/bench/fulmen_bench_go"

# Offline, standard library only: no module proxy, no toolchain download.
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
export CGO_ENABLED=1

LIBDIR=${FULMEN_LIBDIR:-$ROOT/target/release}
LIB="$LIBDIR/libfulmen.so"
PC=$(mktemp -d)
trap 'rm -rf "$PC"' EXIT
sed -e "s|@PREFIX@|$ROOT|; s|@LIBDIR@|$LIBDIR|; s|@INCLUDEDIR@|${FULMEN_INCLUDEDIR:-$ROOT/include}|" \
    "$ROOT/fulmen.pc.in" > "$PC/fulmen.pc"
export PKG_CONFIG_PATH="$PC${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
if [[ ! -e "$LIB" ]]; then
    echo "bench/go/build.sh: $LIB is missing: build it with" >&2
    echo "  cd $ROOT && make lib" >&2
    exit 1
fi

mkdir -p "$(dirname "$OUT")"
cd "$HERE"
go build -o "$OUT" .
echo "built $OUT"
cd "$ROOT/examples/go"
go build -o "$ROOT/build/bench/charlm_go" ./charlm
echo "built $ROOT/build/bench/charlm_go"
