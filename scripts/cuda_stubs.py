"""Make the PyPI (CUDA) torch wheel importable on a CPU-only machine without
the GBs of NVIDIA wheels its Python extension links against.

torch/_C links libtorch_cuda.so, which needs cuBLAS, cuDNN, NCCL, ... even
when no GPU is used. For each such library that the dynamic loader cannot
find, this compiles a small stand-in with the same SONAME that defines every
symbol torch takes from it; a stand-in prints the symbol's name and aborts if
ever called, so a CPU run that touched CUDA fails loudly instead of silently.
libcudart and libcupti are the real ones (nvidia-cuda-runtime/-cupti wheels);
the driver libcuda.so.1 is never stood in for (only the lazily loaded NVRTC
helper needs it).

Usage: python cuda_stubs.py SITE_PACKAGES   (needs gcc, ldd, nm)
       python cuda_stubs.py --libdir DIR     (stand-ins for what the
         libraries in DIR need and lack, written into DIR; for the XLA
         libtorch of scripts/fetch-xla.sh, whose libtorch_cuda.so itself
         is stood in for)
"""
import glob
import os
import re
import subprocess
import sys
import tempfile


def ldd(path):
    """Map each needed soname to its resolved path, or None if not found."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    deps = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (not found|\S+)", line)
        if m:
            deps[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return deps


def dynsyms(path, undefined):
    """(name, version) of the dynamic symbols a library defines or needs."""
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", "-D", flag, path], capture_output=True, text=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if undefined and (len(parts) != 2 or parts[0] != "U"):
            continue  # weak undefined symbols may stay unresolved
        name, _, version = parts[-1].partition("@")
        syms.append((name, version.lstrip("@")))
    return syms


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.+)\]", out)


# Stand-ins that cannot abort because libtorch_python calls them while it
# loads: c10d's GIL checker slot is a reference to a function pointer.
SPECIAL = {
    "_ZN4c10d15get_gil_checkerEv":
        "static void *gil_checker;\n"
        'void **fulmen_gil_checker(void) __asm__("_ZN4c10d15get_gil_checkerEv");\n'
        "void **fulmen_gil_checker(void) { return &gil_checker; }\n",
}


def main(site):
    torch_dir = os.path.join(site, "torch")
    libs = sorted(glob.glob(os.path.join(torch_dir, "lib", "*.so*"))
                  + glob.glob(os.path.join(torch_dir, "_C*.so")))
    write_stubs(libs, os.path.join(site, "nvidia", "cu13", "lib"))


# What --libdir stands in for: CUDA's and NVIDIA's libraries, and torch's
# own CUDA parts. Any other missing library (libpython) is an error there.
CUDA_SONAME = re.compile(r"lib(cu|nv|torch_cuda|c10_cuda|caffe2_nvrtc)")


def write_stubs(libs, out_dir, only_cuda=False):
    """Writes into out_dir a stand-in for each library `libs` need and the
    loader cannot find, defining the symbols they take from it; with
    `only_cuda`, for CUDA's libraries only, and any other missing library
    is an error."""
    missing, present = set(), set(libs)
    for lib in libs:
        for soname, path in ldd(lib).items():
            if path is None and soname != "libcuda.so.1":  # the driver: never shadow it
                if only_cuda and not CUDA_SONAME.match(soname):
                    sys.exit(f"cuda_stubs.py: {os.path.basename(lib)} needs {soname}, which is not installed "
                             "(and is not a CUDA library to stand in for)")
                missing.add(soname)
            elif path is not None:
                present.add(path)
    if not missing:
        return
    defined_syms = [sym for path in present for sym in dynsyms(path, False)]
    defined = {name for name, _ in defined_syms}
    # Version tags of libraries that are there (and glibc's, whose loader
    # ldd does not list): their symbols are never stood in for.
    present_versions = {version for _, version in defined_syms if version}
    stubs = {soname: set() for soname in missing}
    for lib in libs:
        direct = [n for n in needed(lib) if n in missing]
        for name, version in dynsyms(lib, True):
            if name in defined:
                continue
            if version and version not in missing and (version in present_versions or version.startswith("GLIBC_")):
                continue
            targets = [version] if version in missing else direct
            for soname in targets:
                stubs[soname].add(name)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for soname, names in sorted(stubs.items()):
            src = os.path.join(tmp, soname + ".c")
            with open(src, "w") as f:
                f.write("#include <stdio.h>\n#include <stdlib.h>\n"
                        "static void die(const char *s) {\n"
                        f'  fprintf(stderr, "CUDA stand-in {soname}: %s called on a CPU-only torch\\n", s);\n'
                        "  abort();\n}\n")
                for i, name in enumerate(sorted(names)):
                    if name in SPECIAL:
                        f.write(SPECIAL[name])
                        continue
                    f.write(f'void s{i}(void) __asm__("{name}");\n'
                            f'void s{i}(void) {{ die("{name}"); }}\n')
            subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-w", f"-Wl,-soname,{soname}",
                            "-o", os.path.join(out_dir, soname), src], check=True)
            print(f"stand-in {soname}: {len(names)} symbols", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--libdir"]:
        lib_dir = sys.argv[2]
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [lib_dir, os.environ.get("LD_LIBRARY_PATH")] if p)
        write_stubs(sorted(glob.glob(os.path.join(lib_dir, "*.so*"))), lib_dir, only_cuda=True)
    else:
        main(sys.argv[1])
