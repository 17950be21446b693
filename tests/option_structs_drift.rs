//! Fails when the code generated from the option-struct table
//! (`tools/codegen/option_structs.rs`: the `#[repr(C)]` option structs of
//! `src/ffi/<area>/gen_options.rs` with their defaults and conversions,
//! and the Go structs of `bindings/go/options_gen.go`) differs from the
//! committed copy, or when an option struct is written by hand instead of
//! in the table. Regenerate with `make header`
//! (`FULMEN_WRITE_HEADER=1 cargo test --test option_structs_drift`).
mod drift;
#[path = "../tools/codegen/option_structs.rs"]
mod option_structs;
use std::path::{Path, PathBuf};

#[test]
fn generated_option_structs_match_the_table() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let stale: Vec<String> =
        option_structs::generated_files().iter().filter_map(|(rel, wanted)| drift::check(&root, rel, wanted)).collect();
    assert!(
        stale.is_empty(),
        "out of date with {}: {stale:?}; run `make header` and commit the result",
        option_structs::SOURCE
    );
}

#[test]
fn the_table_is_consistent_and_every_area_lists_its_module() {
    let problems = option_structs::problems();
    assert!(problems.is_empty(), "{}: {problems:?}", option_structs::SOURCE);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for (path, line) in option_structs::module_lines() {
        let module = std::fs::read_to_string(root.join(&path)).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        assert!(module.contains(&line), "{path} lacks `{line}`");
    }
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())).path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `#[repr(C)]` structs named `fulmen_*_options` that `text` declares.
fn option_structs_in(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("pub struct fulmen_") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.ends_with("_options") {
            continue;
        }
        // The attributes and doc comment just above the declaration.
        let mut above = lines[..i].iter().rev().take_while(|l| {
            let l = l.trim_start();
            l.starts_with("#[") || l.starts_with("///")
        });
        if above.any(|l| l.trim() == "#[repr(C)]") {
            out.push(format!("fulmen_{name}"));
        }
    }
    out
}

#[test]
fn no_option_struct_is_written_by_hand() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/ffi"), &mut files);
    let mut by_hand = Vec::new();
    for path in files {
        if path.file_name().is_some_and(|n| n == "gen_options.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        by_hand.extend(option_structs_in(&text).into_iter().map(|name| (name, path.clone())));
    }
    let listed: Vec<String> = by_hand.iter().map(|(name, path)| format!("{name} ({})", path.display())).collect();
    assert!(
        listed.is_empty(),
        "option structs written by hand: {listed:?}; declare each in {} and run `make header`",
        option_structs::SOURCE
    );
}

#[test]
fn the_hand_written_check_sees_a_repr_c_options_struct() {
    let text = "/// Some options.\n#[repr(C)]\n#[derive(Debug, Clone, Copy)]\npub struct fulmen_new_options {\n    pub x: f64,\n}\n\
                /// A handle.\npub struct fulmen_handle_options {\n    inner: u8,\n}\n";
    assert_eq!(option_structs_in(text), vec!["fulmen_new_options".to_owned()]);
}
