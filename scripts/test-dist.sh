#!/usr/bin/env bash
# Checks a release tarball of `make dist` as an outside user would: unpacks
# it into a fresh folder outside the repository, then builds and runs
#   - a C program with pkg-config (tests/c/outside/train_xor.c),
#   - a C++ program with CMake's find_package(fulmen) (bindings/cpp/snippet.cpp),
#   - a Go program with the release's Go package through pkg-config
#     (tests/go/outside/main.go),
#   - the release's conformance program on the CPU, and through the plugin
#     example built with pkg-config,
# with no LD_LIBRARY_PATH, and checks with ldd that each loads libfulmen and
# libtorch from the unpacked release and nothing from the repository. Also
# checks the release's rpaths ($ORIGIN only) and SONAME.
#
#   scripts/test-dist.sh TARBALL
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tarball=$(cd "$(dirname "${1:?usage: test-dist.sh TARBALL}")" && pwd)/$(basename "$1")
work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-dist-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH
step() { printf '\n== %s\n' "$*"; }
fail() { echo "test-dist: $*" >&2; exit 1; }

step "unpacking $(basename "$tarball") into $work"
tar -C "$work" -xzf "$tarball"
dist=$(echo "$work"/fulmen-*)
[ -d "$dist" ] || fail "no fulmen-* folder in the tarball"
case "$dist" in "$ROOT"/*) fail "the test folder $dist is inside the repository" ;; esac

step "rpaths and SONAME"
soname=$(sed -n 's/^#define FULMEN_SONAME "\(.*\)"$/\1/p' "$dist/include/fulmen/base.h")
[ -n "$soname" ] || fail "fulmen/base.h names no FULMEN_SONAME"
[ -L "$dist/lib/$soname" ] && [ -L "$dist/lib/libfulmen.so" ] || fail "lib/$soname or lib/libfulmen.so is not a link"
readelf -d "$dist/lib/libfulmen.so" > "$work/dynamic.txt"
grep -q "(SONAME).*\[$soname\]" "$work/dynamic.txt" || fail "libfulmen's SONAME is not $soname"
for f in "$dist"/lib/libfulmen.so.*.*.* "$dist"/lib/fulmen/* "$dist"/bin/*; do
    readelf -d "$f" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p' | tr ':' '\n' > "$work/paths.txt"
    while read -r p; do
        case "$p" in '$ORIGIN' | '$ORIGIN/'*) ;; *) fail "$f has the rpath '$p'" ;; esac
    done < "$work/paths.txt"
    echo "$(basename "$f"): $(tr '\n' ' ' < "$work/paths.txt")"
done

# ldd BINARY: every library resolves; libfulmen and libtorch_cpu from the
# release; nothing from the repository.
check_ldd() {
    ldd "$1" > "$work/ldd.txt"
    if grep -q "not found" "$work/ldd.txt"; then cat "$work/ldd.txt" >&2; fail "$1: unresolved libraries"; fi
    local real_dist found=0 name path real
    real_dist=$(readlink -f "$dist")
    while read -r name _ path _; do
        real=$(readlink -f "$path")
        case "$real" in "$ROOT"/*) cat "$work/ldd.txt" >&2; fail "$1 loads $name from the repository: $real" ;; esac
        case "$name" in
            "$soname" | libtorch_cpu.so | libc10.so)
                case "$real" in "$real_dist"/lib/*) found=$((found + 1)) ;;
                    *) cat "$work/ldd.txt" >&2; fail "$1 loads $name from $real, not from the release" ;; esac ;;
        esac
    done < <(grep "=> /" "$work/ldd.txt")
    [ "$found" = 3 ] || { cat "$work/ldd.txt" >&2; fail "$1 does not load $soname, libtorch_cpu.so and libc10.so"; }
    echo "ldd $(basename "$1"): every library resolved; libfulmen and libtorch from the release"
}

export PKG_CONFIG_PATH=$dist/lib/pkgconfig
step "C with pkg-config"
mkdir -p "$work/c"
cp "$ROOT/tests/c/outside/train_xor.c" "$work/c/"
(cd "$work/c" && cc -std=c11 -Wall -Wextra -Werror -pedantic train_xor.c -o train_xor $(pkg-config --cflags --libs fulmen) -lm)
check_ldd "$work/c/train_xor"
(cd "$work/c" && ./train_xor)

step "the conformance program (bin/fulmen_conformance)"
check_ldd "$dist/bin/fulmen_conformance"
"$dist/bin/fulmen_conformance" --accelerator cpu > "$work/conformance-cpu.log" 2>&1 \
    || { cat "$work/conformance-cpu.log" >&2; fail "the conformance program failed on the CPU"; }
tail -n 1 "$work/conformance-cpu.log"
cc -std=c11 -Wall -Wextra -Werror -pedantic -fPIC -shared "$dist/share/fulmen/conformance/fake_plugin.c" \
    -o "$work/libfake_plugin.so" $(pkg-config --cflags --libs fulmen)
"$dist/bin/fulmen_conformance" --plugin "$work/libfake_plugin.so" --accelerator vendor_npu > "$work/conformance-npu.log" 2>&1 \
    || { cat "$work/conformance-npu.log" >&2; fail "the conformance program failed through the plugin"; }
tail -n 1 "$work/conformance-npu.log"

step "C++ with CMake find_package(fulmen 0.1)"
if command -v cmake > /dev/null; then
    mkdir -p "$work/cpp"
    cp "$ROOT/bindings/cpp/snippet.cpp" "$work/cpp/"
    cat > "$work/cpp/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.13)
project(fulmen_outside LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(fulmen 0.1 REQUIRED)
add_executable(snippet snippet.cpp)
target_link_libraries(snippet PRIVATE fulmen::fulmen)
CMAKE
    cmake -S "$work/cpp" -B "$work/cpp/build" -DCMAKE_PREFIX_PATH="$dist" > "$work/cmake.log" ||
        { cat "$work/cmake.log" >&2; fail "cmake configure"; }
    cmake --build "$work/cpp/build" > "$work/cmake-build.log" || { cat "$work/cmake-build.log" >&2; fail "cmake build"; }
    check_ldd "$work/cpp/build/snippet"
    (cd "$work/cpp/build" && ./snippet)
    # A request for another ABI series is refused by the version file.
    sed -i 's/find_package(fulmen 0.1 REQUIRED)/find_package(fulmen 9.0 REQUIRED)/' "$work/cpp/CMakeLists.txt"
    if cmake -S "$work/cpp" -B "$work/cpp/build9" -DCMAKE_PREFIX_PATH="$dist" > "$work/cmake9.log" 2>&1; then
        fail "find_package(fulmen 9.0) accepted release $(basename "$dist")"
    fi
    grep -q "fulmenConfig.cmake, version: " "$work/cmake9.log" || { cat "$work/cmake9.log" >&2; fail "no version refusal"; }
else
    echo "(cmake not found: skipped)"
fi

step "Go with the release's package through pkg-config"
if command -v go > /dev/null; then
    mkdir -p "$work/go"
    cat > "$work/go/go.mod" <<MOD
module example.com/outside

go 1.22

require github.com/fulmen-ml/fulmen/bindings/go v0.0.0

replace github.com/fulmen-ml/fulmen/bindings/go => $dist/share/fulmen/go
MOD
    cp "$ROOT/tests/go/outside/main.go" "$work/go/"
    (cd "$work/go" && GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1 go build -o outside .)
    check_ldd "$work/go/outside"
    (cd "$work/go" && ./outside)
else
    echo "(go not found: skipped)"
fi

printf '\nrelease %s: all checks passed\n' "$(basename "$dist")"
