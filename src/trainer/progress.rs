//! Plain progress lines on stderr for validate / test runs.
use std::collections::BTreeMap;
use std::io::Write;

/// Formats metrics as `name=value` pairs.
pub fn format_metrics(m: &BTreeMap<String, f64>) -> String {
    m.iter().map(|(k, v)| format!("{k}={v:.4}")).collect::<Vec<_>>().join(" ")
}

/// Prints the line that closes a validate / test run.
pub fn eval_line(stage: &str, metrics: &BTreeMap<String, f64>) {
    let _ = writeln!(std::io::stderr(), "{stage}: {}", format_metrics(metrics));
}
