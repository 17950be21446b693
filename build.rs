//! Build script: gives every binary linked against fulmen (the cdylib, tests,
//! examples) an rpath to the libtorch it was built with, so programs run
//! without `LD_LIBRARY_PATH`.
use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // torch-sys (links = "tch") exports the libtorch library folder it used.
    if let Ok(lib) = env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-env=FULMEN_LIBTORCH_LIB={lib}");
    }
}
