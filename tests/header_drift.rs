//! Fails when the committed C headers (`include/fulmen.h` and the area
//! headers under `include/fulmen/`) differ from what cbindgen generates from
//! the sources, split by `tools/headers/split.rs`. Regenerate with
//! `make header` (`FULMEN_WRITE_HEADER=1 cargo test --test header_drift`).
use std::path::{Path, PathBuf};

#[path = "../tools/headers/split.rs"]
mod split;

/// The headers the sources give: `(path under include/, text)`.
fn generated_headers(root: &Path) -> Vec<(String, String)> {
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("reading cbindgen.toml");
    let rename = config.export.rename.clone();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut generated);
    let text = String::from_utf8(generated).expect("cbindgen wrote UTF-8");
    split::split(&text, &root.join("src"), &rename).unwrap_or_else(|e| panic!("splitting the header: {e}"))
}

/// The area headers committed under `include/fulmen/`.
fn committed_area_headers(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root.join("include/fulmen"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".h"))
                .map(|n| format!("fulmen/{n}"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn committed_headers_match_the_sources() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let headers = generated_headers(&root);
    let wanted: Vec<&String> = headers.iter().map(|(p, _)| p).collect();
    let stale: Vec<String> = committed_area_headers(&root).into_iter().filter(|p| !wanted.contains(&p)).collect();
    if std::env::var_os("FULMEN_WRITE_HEADER").is_some() {
        std::fs::create_dir_all(root.join("include/fulmen")).expect("creating include/fulmen");
        for (path, text) in &headers {
            std::fs::write(root.join("include").join(path), text).expect("writing a header");
        }
        for path in &stale {
            std::fs::remove_file(root.join("include").join(path)).expect("removing a stale header");
        }
        return;
    }
    let differ: Vec<&String> = headers
        .iter()
        .filter(|(path, text)| std::fs::read(root.join("include").join(path)).unwrap_or_default() != text.as_bytes())
        .map(|(path, _)| path)
        .collect();
    assert!(
        differ.is_empty() && stale.is_empty(),
        "the C headers are out of date with the Rust sources (differ: {differ:?}, not generated: {stale:?}): \
         run `make header` and commit the result"
    );
}

/// Every area header stays readable: under 1,500 lines, each with its
/// `\file` comment.
#[test]
fn every_header_is_small_and_documented() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for area in split::AREAS {
        let path = root.join(format!("include/fulmen/{}.h", area.name));
        let text = std::fs::read_to_string(&path).expect("reading an area header");
        let lines = text.lines().count();
        assert!(lines < 1500, "{} has {lines} lines: split its area", path.display());
        assert!(text.contains(&format!("\\file fulmen/{}.h", area.name)), "{} has no \\file comment", path.display());
    }
}

/// The C++ shim under `csrc/` is internal: none of its symbols may reach
/// the public header, and every declaration of it lives in `src/shim/`.
#[test]
fn shim_symbols_stay_out_of_the_header() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header = split::committed_api(&root);
    let leaked: Vec<&str> =
        header.split(|c: char| !c.is_alphanumeric() && c != '_').filter(|w| w.starts_with("fulmen_cxx_")).collect();
    assert!(leaked.is_empty(), "the C headers name shim symbols: {leaked:?}");
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
    let header = split::committed_api(&root);
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
