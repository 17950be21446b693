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

/// The C++ shim under `csrc/` is internal: none of its symbols may reach
/// the public header, and every declaration of it lives in `src/shim/`.
#[test]
fn shim_symbols_stay_out_of_the_header() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(root.join("include/fulmen.h")).expect("reading include/fulmen.h");
    let leaked: Vec<&str> =
        header.split(|c: char| !c.is_alphanumeric() && c != '_').filter(|w| w.starts_with("fulmen_cxx_")).collect();
    assert!(leaked.is_empty(), "fulmen.h names shim symbols: {leaked:?}");
    let mut outside = Vec::new();
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("reading src") {
            let path = entry.expect("reading src").path();
            if path.is_dir() {
                if path != root.join("src/shim") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("reading a source file");
                if text
                    .lines()
                    .any(|l| l.trim_start().starts_with("fn fulmen_cxx_") || l.contains("pub(crate) fn fulmen_cxx_"))
                {
                    outside.push(path.display().to_string());
                }
            }
        }
    }
    assert!(outside.is_empty(), "shim functions declared outside src/shim: {outside:?}");
}

/// Every fallible function of the header says which error codes it returns
/// beyond the common ones of the preamble: its comment has an `Errors:`
/// sentence, and every `FULMEN_CODE_*` it names exists.
#[test]
fn every_fallible_function_names_its_errors() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(root.join("include/fulmen.h")).expect("reading include/fulmen.h");
    let known: Vec<&str> = header
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FULMEN_CODE_"))
        .filter_map(|rest| rest.split(' ').next())
        .collect();
    let mut missing = Vec::new();
    let mut unknown = Vec::new();
    let mut comment = String::new();
    let mut in_comment = false;
    for line in header.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("/**") {
            in_comment = true;
            comment.clear();
            continue;
        }
        if in_comment {
            if trimmed.starts_with("*/") {
                in_comment = false;
            } else {
                comment.push_str(trimmed.trim_start_matches('*'));
                comment.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("struct fulmen_error *fulmen_") {
            let name = format!("fulmen_{}", rest.split('(').next().unwrap_or(rest));
            if !comment.contains("Errors:") {
                missing.push(name.clone());
            }
            for word in comment.split(|c: char| !c.is_alphanumeric() && c != '_') {
                if let Some(code) = word.strip_prefix("FULMEN_CODE_") {
                    if !known.contains(&code) {
                        unknown.push(format!("{name}: FULMEN_CODE_{code}"));
                    }
                }
            }
        }
        if !trimmed.is_empty() {
            comment.clear();
        }
    }
    assert!(unknown.is_empty(), "comments name error codes that do not exist: {unknown:?}");
    assert!(
        missing.is_empty(),
        "{} fallible functions have no `Errors:` sentence in their comment: {missing:?}",
        missing.len()
    );
}
