#!/usr/bin/env bash
# Builds and runs the C++ binding's GoogleTest suite (under ASan/UBSan), and
# builds the C++ MNIST example and the README snippet (running the snippet)
# and custom_device.cpp (a custom accelerator on the fake device).
#
#   bindings/cpp/run-tests.sh [BUILD_DIR]      (default: build/cpp)
#
# Environment: FULMEN_LIBDIR (default <repo>/target/release), FULMEN_INCLUDE
# (default <repo>/include), CXX (default g++), GTEST_FLAGS (extra arguments
# for the test binary, e.g. --gtest_filter=Tensor*).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BUILD="${1:-build/cpp}"
case "$BUILD" in /*) ;; *) BUILD="$REPO/$BUILD" ;; esac
LIBDIR="${FULMEN_LIBDIR:-$REPO/target/release}"
C_INCLUDE="${FULMEN_INCLUDE:-$REPO/include}"
CXX="${CXX:-g++}"

if [[ ! -f "$LIBDIR/libfulmen.so" ]]; then
    echo "run-tests.sh: $LIBDIR/libfulmen.so not found (build it with 'make lib' or set FULMEN_LIBDIR)" >&2
    exit 1
fi

INCLUDES=(-I"$C_INCLUDE" -I"$HERE/include")
LINK=(-L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lfulmen)
STRICT=(-std=c++17 -Wall -Wextra -Werror -pedantic)
SAN=(-g -fsanitize=address,undefined -fno-omit-frame-pointer)

mkdir -p "$BUILD/obj"

echo "== compiling the tests ($CXX, ASan + UBSan)"
# With GCC, tests/common.hpp (the binding's headers and GoogleTest, about
# 40% of each test's compile time) is precompiled once and included
# first in every test; -Winvalid-pch makes a precompiled header GCC
# cannot use an error instead of a silent slow path.
PCH=()
if [[ $("$CXX" -dM -E -x c++ /dev/null) != *__clang__* ]]; then
    mkdir -p "$BUILD/pch"
    echo "#include \"$HERE/tests/common.hpp\"" > "$BUILD/pch/tests_common.hpp"
    "$CXX" "${STRICT[@]}" "${SAN[@]}" "${INCLUDES[@]}" -x c++-header "$BUILD/pch/tests_common.hpp" \
        -o "$BUILD/pch/tests_common.hpp.gch"
    PCH=(-Winvalid-pch -include "$BUILD/pch/tests_common.hpp")
fi
pids=()
objs=()
for src in "$HERE"/tests/*.cpp; do
    obj="$BUILD/obj/$(basename "${src%.cpp}").o"
    objs+=("$obj")
    "$CXX" "${STRICT[@]}" "${SAN[@]}" "${INCLUDES[@]}" "${PCH[@]}" -c "$src" -o "$obj" &
    pids+=($!)
done
# Beside them: the MNIST example, the README snippet and custom_device.cpp.
echo "== compiling examples/cpp/mnist.cpp, bindings/cpp/snippet.cpp and bindings/cpp/custom_device.cpp"
for src in "$REPO/examples/cpp/mnist.cpp" "$HERE/snippet.cpp" "$HERE/custom_device.cpp"; do
    "$CXX" "${STRICT[@]}" -O2 "${INCLUDES[@]}" "$src" -o "$BUILD/$(basename "${src%.cpp}")" "${LINK[@]}" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || { echo "a program failed to compile" >&2; exit 1; }; done
"$CXX" "${SAN[@]}" "${objs[@]}" -o "$BUILD/fulmen_cpp_tests" "${LINK[@]}" -lgtest -lgtest_main -pthread

echo "== running the snippet"
(cd "$BUILD" && ./snippet)

# A vendor's device type (the fake PrivateUse1 device) in a process of its
# own: registering it changes libtorch for the whole process.
echo "== a custom accelerator on the fake device (bindings/cpp/custom_device.cpp)"
"$BUILD/custom_device"

# A program compiled with a header of another ABI series stops at start-up
# with the library's message, before main.
echo "== the start-up ABI check refuses a header of another series"
cat > "$BUILD/abi_mismatch.cpp" <<'CPP'
#include <fulmen.h>
#undef FULMEN_ABI_VERSION
#define FULMEN_ABI_VERSION 99000000u
#include <fulmen/fulmen.hpp>
#include <cstdio>
int main() { std::puts("main ran"); }
CPP
"$CXX" "${STRICT[@]}" "${INCLUDES[@]}" "$BUILD/abi_mismatch.cpp" -o "$BUILD/abi_mismatch" "${LINK[@]}"
if "$BUILD/abi_mismatch" > "$BUILD/abi_mismatch.out" 2>&1; then
    echo "abi_mismatch ran to the end" >&2; exit 1
fi
grep -q "^fulmen: .*99.0.0.*the ABIs differ" "$BUILD/abi_mismatch.out" || { cat "$BUILD/abi_mismatch.out" >&2; exit 1; }
if grep -q "main ran" "$BUILD/abi_mismatch.out"; then echo "main ran despite the mismatch" >&2; exit 1; fi

# The CMake package (find_package(fulmen)) is tested on the release layout
# by scripts/test-dist.sh (make test-dist).

echo "== running the tests"
# libtorch keeps some allocations until exit on purpose; fulmen's own
# handles are leak-checked by the tests through fulmen_live_handles().
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export FULMEN_FIXTURES="${FULMEN_FIXTURES:-$REPO/tests/fixtures}"
# shellcheck disable=SC2086
(cd "$BUILD" && ./fulmen_cpp_tests ${GTEST_FLAGS:-})
echo "C++ binding: all tests passed"
