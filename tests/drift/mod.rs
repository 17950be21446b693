//! Shared by the drift tests that generate code from a table: write the
//! generated text under `make header`, else compare it with the committed
//! copy.
use std::path::Path;

/// Writes `wanted` to `rel` under FULMEN_WRITE_HEADER, else returns the
/// path when the committed file differs.
pub fn check(root: &Path, rel: &str, wanted: &str) -> Option<String> {
    let path = root.join(rel);
    if std::env::var_os("FULMEN_WRITE_HEADER").is_some() {
        std::fs::write(&path, wanted).unwrap_or_else(|e| panic!("writing {rel}: {e}"));
        return None;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    (committed != wanted).then(|| rel.to_string())
}
