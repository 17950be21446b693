//! Fails when the code generated from the tensor-op table
//! (`tools/codegen/ops.rs`: C functions, C++ and Go wrappers) differs from
//! the committed copy. Regenerate with `make header`
//! (`FULMEN_WRITE_HEADER=1 cargo test --test ops_drift`).
mod drift;
#[path = "../tools/codegen/ops.rs"]
mod ops;
use std::path::PathBuf;

#[test]
fn generated_op_code_matches_the_table() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let stale: Vec<String> =
        ops::generated_files().iter().filter_map(|(rel, wanted)| drift::check(&root, rel, wanted)).collect();
    assert!(stale.is_empty(), "out of date with {}: {stale:?}; run `make header` and commit the result", ops::SOURCE);
}

#[test]
fn methods_and_in_place_ops_start_with_a_tensor() {
    let malformed = ops::malformed_ops();
    assert!(malformed.is_empty(), "ops in {} whose first parameter must be a tensor: {malformed:?}", ops::SOURCE);
}

#[test]
fn op_names_are_unique_and_modules_listed() {
    let twice = ops::duplicate_names();
    assert!(twice.is_empty(), "op names that appear twice in {}: {twice:?}", ops::SOURCE);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for (path, line) in ops::module_lines() {
        let module = std::fs::read_to_string(root.join(&path)).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        assert!(module.contains(&line), "{path} lacks `{line}`");
    }
}
