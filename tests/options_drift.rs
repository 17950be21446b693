//! Fails when the code generated from the trainer-option table
//! (`tools/codegen/options.rs`: the key list in the C header's comment, the
//! C++ and Go setters and their tests) differs from the committed copy.
//! Regenerate with `make header`
//! (`FULMEN_WRITE_HEADER=1 cargo test --test options_drift`).
mod drift;
#[path = "../tools/codegen/options.rs"]
mod options;
#[path = "../tools/headers/split.rs"]
#[allow(dead_code)]
mod split;
use std::path::PathBuf;

#[test]
fn generated_option_code_matches_the_table() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let stale: Vec<String> =
        options::generated_files(&root).iter().filter_map(|(rel, wanted)| drift::check(&root, rel, wanted)).collect();
    assert!(
        stale.is_empty(),
        "out of date with {}: {stale:?}; run `make header` and commit the result",
        options::SOURCE
    );
}

#[test]
fn every_key_is_documented_in_the_header() {
    if std::env::var_os("FULMEN_WRITE_HEADER").is_some() {
        return; // `make header` regenerates the headers after this test
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header = split::committed_api(&root);
    for key in options::keys() {
        assert!(header.contains(&format!("`{key}` (")), "the C headers do not document {key}");
    }
}
