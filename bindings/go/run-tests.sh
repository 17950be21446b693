#!/usr/bin/env bash
# Checks the Go binding: gofmt, go vet, go test -race, go test with the
# fulmen_gcstress tag, the MNIST example, the fulmen_checkout build tag,
# and an "outside user" module that requires the package through a replace
# directive. Exits non-zero on the first failure.
#
#   bindings/go/run-tests.sh
#
# Environment:
#   FULMEN_LIBDIR  use the library in this folder (with the header of
#                  FULMEN_INCLUDEDIR, default <repo>/include) instead of
#                  <repo>/target/release; either is found through a
#                  fulmen.pc written here (the package's default cgo flags).
#   FULMEN_MNIST   MNIST-5k CSV for a one-epoch run of the example
#                  (default <repo>/.deps/data/mnist_5k.csv.gz, skipped if absent).
#   FULMEN_LEE, FULMEN_ELNINO  the Lee corpus and the El Nino CSV for short
#                  runs of the charlm and forecast examples (defaults under
#                  <repo>/.deps/data/, skipped if absent).
#   FULMEN_PYTHON  a Python with torch and safetensors: runs the examples'
#                  PyTorch twins against the Go builds (skipped if unset).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Offline, standard library only: no module proxy, no toolchain download.
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
export CGO_ENABLED=1

step() { printf '\n== %s\n' "$*"; }

# Writes a fulmen.pc for a library folder and include folder.
write_pc() {
    sed -e "s|@PREFIX@|$ROOT|; s|@LIBDIR@|$1|; s|@INCLUDEDIR@|$2|" "$ROOT/fulmen.pc.in" > "$WORK/pc/fulmen.pc"
}
mkdir -p "$WORK/pc"
export PKG_CONFIG_PATH="$WORK/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

TAG=""
if [[ -n "${FULMEN_LIBDIR:-}" ]]; then
    write_pc "$FULMEN_LIBDIR" "${FULMEN_INCLUDEDIR:-$ROOT/include}"
    echo "using $FULMEN_LIBDIR/libfulmen.so through pkg-config"
    LIB="$FULMEN_LIBDIR/libfulmen.so"
else
    write_pc "$ROOT/target/release" "$ROOT/include"
    LIB="$ROOT/target/release/libfulmen.so"
fi
if [[ ! -e "$LIB" ]]; then
    echo "run-tests: $LIB is missing: build it with" >&2
    echo "  cd $ROOT && make lib" >&2
    exit 1
fi
tags() { local t="$TAG${1:+,$1}"; t="${t#,}"; [[ -n "$t" ]] && echo "-tags=$t" || true; }

step "gofmt -l"
out=$(gofmt -l "$HERE" "$ROOT/examples/go" "$ROOT/tests/go")
if [[ -n "$out" ]]; then
    echo "not gofmt-clean:"; echo "$out"; exit 1
fi

cd "$HERE"
step "go vet ./..."
go vet $(tags) ./...
go vet $(tags fulmen_gcstress) ./...

step "go test -race ./..."
go test -count=1 -race $(tags) ./...

step "go test -tags fulmen_gcstress ./..."
go test -count=1 $(tags fulmen_gcstress) ./...

step "fulmen_checkout build tag (target/release, no pkg-config)"
if [[ -e "$ROOT/target/release/libfulmen.so" ]]; then
    PKG_CONFIG_PATH= go vet -tags=fulmen_checkout ./...
    PKG_CONFIG_PATH= go test -count=1 -tags=fulmen_checkout -run 'Example|TestFitValidateTestPredict|TestABICheck' ./...
else
    echo "($ROOT/target/release/libfulmen.so not built: skipped)"
fi

step "examples/go/mnist"
cd "$ROOT/examples/go"
go vet $(tags) ./...
go build $(tags) -o "$WORK/mnist" ./mnist
MNIST="${FULMEN_MNIST:-$ROOT/.deps/data/mnist_5k.csv.gz}"
if [[ -f "$MNIST" ]]; then
    "$WORK/mnist" -data "$MNIST" -epochs 1 -out "$WORK/mnist-run" | tail -5
    test -f "$WORK/mnist-run/model.safetensors"
    test -f "$WORK/mnist-run/checkpoints/last.ckpt"
    # Resume for a second epoch from the last checkpoint.
    "$WORK/mnist" -data "$MNIST" -epochs 2 -out "$WORK/mnist-run" -resume last | tail -5
    # Checkpoints in Lightning's format, resumed by Lightning and back.
    if [[ -n "${FULMEN_PYTHON:-}" ]]; then
        "$FULMEN_PYTHON" "$ROOT/tests/interop/mnist_lightning_check.py" --binary "$WORK/mnist" --data "$MNIST" \
            --work "$WORK/mnist-lightning"
    else
        echo "(FULMEN_PYTHON not set: the Lightning resume not run)"
    fi
else
    echo "($MNIST not found: built, not run)"
fi

step "examples/go/custom_device (a custom accelerator on the fake device)"
cd "$ROOT/examples/go"
go build $(tags) -o "$WORK/custom_device" ./custom_device
if [[ -f "$MNIST" ]]; then
    "$WORK/custom_device" -data "$MNIST" -epochs 2 | tail -2
else
    echo "($MNIST not found: built, not run)"
fi

step "examples/go/charlm and examples/go/forecast"
cd "$ROOT/examples/go"
go build $(tags) -o "$WORK/charlm" ./charlm
go build $(tags) -o "$WORK/forecast" ./forecast
LEE="${FULMEN_LEE:-$ROOT/.deps/data/lee_background.txt}"
ELNINO="${FULMEN_ELNINO:-$ROOT/.deps/data/elnino.csv}"
if [[ -f "$LEE" && -f "$ELNINO" ]]; then
    "$WORK/charlm" -data "$LEE" -epochs 1 -limit-batches 20 -sample 80 -out "$WORK/charlm-run" | tail -3
    "$WORK/forecast" -data "$ELNINO" -out "$WORK/forecast-run" | tail -2 | tee "$WORK/forecast.log"
    grep -q "the LSTM is better" "$WORK/forecast.log"
    # The PyTorch twins replay both from the same weights and batches.
    if [[ -n "${FULMEN_PYTHON:-}" ]]; then
        "$FULMEN_PYTHON" "$ROOT/tests/interop/charlm_twin.py" --binary "$WORK/charlm" --data "$LEE" --work "$WORK/charlm-twin"
        "$FULMEN_PYTHON" "$ROOT/tests/interop/forecast_twin.py" --binary "$WORK/forecast" --data "$ELNINO" --work "$WORK/forecast-twin"
    else
        echo "(FULMEN_PYTHON not set: the PyTorch twins not run)"
    fi
else
    echo "($LEE or $ELNINO not found: built, not run)"
fi

step "outside user module"
mkdir -p "$WORK/user"
cd "$WORK/user"
cat > go.mod <<MOD
module example.com/user

go 1.22

require github.com/fulmen-ml/fulmen/bindings/go v0.0.0

replace github.com/fulmen-ml/fulmen/bindings/go => $HERE
MOD
cp "$ROOT/tests/go/outside/main.go" .
go vet $(tags) .
go build $(tags) -o user .
./user

printf '\nGo binding: all checks passed\n'
