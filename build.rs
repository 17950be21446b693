//! Build script: gives every binary linked against fulmen (the cdylib, tests,
//! examples) an rpath to the libtorch it was built with, so programs run
//! without `LD_LIBRARY_PATH`, and compiles the C++ shims of `csrc/`.
use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The shared library's SONAME carries its ABI series (src/abi.rs).
    let soname = soname();
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    link_soname(&soname);
    // torch-sys (links = "tch") exports the libtorch library folder it used.
    if let Ok(lib) = env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-env=FULMEN_LIBTORCH_LIB={lib}");
        if under_clippy() {
            // Clippy only checks: nothing links, so the shims' objects are
            // not needed, and its build-script run has its own OUT_DIR.
            return;
        }
        build_cxx_shims(Path::new(&lib));
    }
}

/// Whether this build-script run belongs to `cargo clippy`, which runs
/// workspace members through `clippy-driver` (RUSTC_WORKSPACE_WRAPPER).
fn under_clippy() -> bool {
    env::var_os("RUSTC_WORKSPACE_WRAPPER")
        .is_some_and(|wrapper| Path::new(&wrapper).file_stem().is_some_and(|stem| stem == "clippy-driver"))
}

/// The C++ debug level: line tables (`-g1`) when the profile has debug
/// info, which is what stack traces under valgrind and ASan read. Full
/// `-g` (what cargo's `DEBUG=true` would give) doubles the compile time of
/// the libtorch headers.
fn cxx_debug_flag() -> Option<&'static str> {
    match env::var("DEBUG").as_deref() {
        Ok("false" | "0" | "none" | "") | Err(_) => None,
        Ok(_) => Some("-g1"),
    }
}

/// Links `<profile dir>/<soname>` to `libfulmen.so` (dangling until the
/// cdylib is linked), so programs linked against a plain `cargo build` find
/// the name they record. OUT_DIR is `<profile dir>/build/<package>/out`.
fn link_soname(soname: &str) {
    let Some(out) = env::var_os("OUT_DIR") else { return };
    let Some(profile) = Path::new(&out).ancestors().nth(3) else { return };
    let link = profile.join(soname);
    if std::fs::read_link(&link).is_err() {
        let _ = std::fs::remove_file(&link);
        let _ = std::os::unix::fs::symlink("libfulmen.so", &link);
    }
}

/// `libfulmen.so.MAJOR`, or `libfulmen.so.0.MINOR` before 1.0: the rule of
/// `fulmen::abi::soname`, which the unit tests hold to the header's
/// FULMEN_SONAME.
fn soname() -> String {
    let major = env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    let minor = env::var("CARGO_PKG_VERSION_MINOR").expect("cargo sets the version");
    if major == "0" {
        format!("libfulmen.so.0.{minor}")
    } else {
        format!("libfulmen.so.{major}")
    }
}

/// The C++ shims of `csrc/`, in two groups compiled side by side, each as
/// one unity source that `#include`s its files: the libtorch headers a file
/// pulls in take most of its compile time, and a group reads them once
/// instead of once per file (about a quarter of the CPU time of compiling
/// the files one by one). The first group is the shims over TorchScript,
/// autograd and devices; the second those over c10d and the optimizers'
/// kernels.
const CXX_GROUPS: [&[&str]; 2] = [
    &[
        "script.cpp",
        "compiled_step.cpp",
        "exported.cpp",
        "checkpoint.cpp",
        "trace.cpp",
        "rank_function.cpp",
        "fake_device.cpp",
        "autocast.cpp",
        "profiler.cpp",
        "flops.cpp",
        "runtime.cpp",
        "devices.cpp",
        "accelerators.cpp",
        "xla_runtime.cpp",
    ],
    &[
        "distributed.cpp",
        "collectives.cpp",
        "xla_collectives.cpp",
        "fsdp.cpp",
        "ops.cpp",
        "fused.cpp",
        "foreach.cpp",
        "foreach_adam_variants.cpp",
        "pinned.cpp",
        "streams.cpp",
        "graphs.cpp",
    ],
];

/// Writes the unity source of each of [`CXX_GROUPS`] into OUT_DIR (only
/// when its text changed) and returns their paths. A file is included by
/// its name, found in `csrc` (on the include path), so its own
/// `#include "..."` lines resolve beside it and compiler messages name it.
fn unity_sources(csrc: &Path) -> Vec<PathBuf> {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // A shim in no group would only show as undefined symbols at link time.
    let listed = |name: &str| CXX_GROUPS.iter().any(|g| g.contains(&name));
    for entry in std::fs::read_dir(csrc).expect("csrc/ is readable").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".cpp") || listed(&name), "csrc/{name} is in none of build.rs's CXX_GROUPS");
    }
    CXX_GROUPS
        .iter()
        .enumerate()
        .map(|(i, files)| {
            let text: String = files.iter().map(|f| format!("#include \"{f}\"\n")).collect();
            let path = out.join(format!("fulmen_cxx_unity_{i}.cpp"));
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&path, text).expect("OUT_DIR is writable");
            }
            path
        })
        .collect()
}

/// Compiles the shims of `csrc/` against the libtorch headers torch-sys
/// used, with the same C++ standard and `_GLIBCXX_USE_CXX11_ABI`.
fn build_cxx_shims(lib: &Path) {
    // Any file of csrc/ (cargo scans the folder): a shim or a shared header.
    println!("cargo:rerun-if-changed=csrc");
    let csrc = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets the manifest folder")).join("csrc");
    println!("cargo:rerun-if-env-changed=LIBTORCH_INCLUDE");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo:rerun-if-env-changed=CUDA_PATH");
    println!("cargo:rerun-if-env-changed=FULMEN_CUDA_INCLUDE");
    println!("cargo:rerun-if-env-changed=FULMEN_GLOO_INCLUDE");
    println!("cargo:rerun-if-env-changed=FULMEN_NCCL_INCLUDE");
    // torch-sys takes the headers from $LIBTORCH_INCLUDE when set, else from
    // the libtorch folder that holds lib/.
    let root = env::var("LIBTORCH_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| lib.parent().map(Path::to_path_buf).unwrap_or_else(|| lib.to_path_buf()));
    let abi = env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    let mut build = cc::Build::new();
    build.debug(false);
    if let Some(flag) = cxx_debug_flag() {
        build.flag(flag);
    }
    build
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .include(&csrc)
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        // As libtorch's release builds: its headers' debug-only checks read
        // state only its debug builds keep (RecordFunction::inputs).
        .define("NDEBUG", None)
        .files(unity_sources(&csrc));
    match gloo_include_dir(&root) {
        Some(gloo) => {
            build
                .include(gloo)
                .define("FULMEN_WITH_GLOO", None)
                .define("USE_DISTRIBUTED", None)
                .define("USE_C10D_GLOO", None);
        }
        None => println!(
            "cargo:warning=gloo headers not found (run scripts/fetch-gloo-headers.sh or set FULMEN_GLOO_INCLUDE): \
             this build has no distributed strategies"
        ),
    }
    // An XLA libtorch (scripts/fetch-xla.sh) keeps an abort-if-called
    // stand-in for libtorch_cuda.so, which its libtorch.so needs: no CUDA.
    if lib.join("libtorch_cuda.so").exists() && !lib.join("CUDA-STAND-INS").exists() {
        match cuda_include_dir() {
            Some(cuda) => {
                build.include(&cuda).define("FULMEN_WITH_CUDA", None);
                println!("cargo:rustc-link-lib=c10_cuda");
                if let Some(nccl) = nccl_include_dir(&cuda) {
                    build.include(nccl).define("FULMEN_WITH_NCCL", None).define("USE_C10D_NCCL", None);
                }
            }
            None => println!(
                "cargo:warning=libtorch has CUDA but the CUDA runtime headers were not found \
                 (set FULMEN_CUDA_INCLUDE or CUDA_HOME): CUDA memory stats and set_device are disabled"
            ),
        }
    }
    build.compile("fulmen_cxx");
}

/// The folder holding `gloo/config.h`: `FULMEN_GLOO_INCLUDE`, the libtorch
/// headers themselves (source builds ship them), or `.deps/gloo/include`
/// where `scripts/fetch-gloo-headers.sh` puts Debian's copy.
fn gloo_include_dir(root: &Path) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(dir) = env::var("FULMEN_GLOO_INCLUDE") {
        candidates.push(PathBuf::from(dir));
    }
    candidates.push(root.join("include"));
    if let Ok(dir) = env::var("CARGO_MANIFEST_DIR") {
        candidates.push(PathBuf::from(dir).join(".deps/gloo/include"));
    }
    candidates.into_iter().find(|dir| dir.join("gloo/config.h").exists())
}

/// The folder holding `nccl.h`: `FULMEN_NCCL_INCLUDE`, else the CUDA
/// include folder.
fn nccl_include_dir(cuda: &Path) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(dir) = env::var("FULMEN_NCCL_INCLUDE") {
        candidates.push(PathBuf::from(dir));
    }
    candidates.push(cuda.to_path_buf());
    candidates.into_iter().find(|dir| dir.join("nccl.h").exists())
}

/// The folder holding `cuda_runtime_api.h`, from `FULMEN_CUDA_INCLUDE`,
/// `CUDA_HOME`, `CUDA_PATH` or `/usr/local/cuda`.
fn cuda_include_dir() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(dir) = env::var("FULMEN_CUDA_INCLUDE") {
        candidates.push(PathBuf::from(dir));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(dir) = env::var(var) {
            candidates.push(PathBuf::from(dir).join("include"));
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates.into_iter().find(|dir| dir.join("cuda_runtime_api.h").exists())
}
