//! Fails when `include/fulmen.h` differs from what cbindgen generates from
//! the sources. Regenerate with `make header`
//! (`FULMEN_WRITE_HEADER=1 cargo test --test header_drift`).
use std::path::PathBuf;

#[test]
fn committed_header_matches_the_sources() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("reading cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&root)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut generated);
    let path = root.join("include/fulmen.h");
    if std::env::var_os("FULMEN_WRITE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("writing include/fulmen.h");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/fulmen.h is out of date with the Rust sources: run `make header` and commit the result"
    );
}
