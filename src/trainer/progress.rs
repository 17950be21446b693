//! Progress output on stderr: one line per epoch and per evaluation run.
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

/// Formats metrics as `name=value` pairs.
pub fn format_metrics(m: &BTreeMap<String, f64>) -> String {
    m.iter().map(|(k, v)| format!("{k}={v:.4}")).collect::<Vec<_>>().join(" ")
}

/// Prints the line that closes a training epoch.
pub fn epoch_line(
    epoch: i64,
    max_epochs: Option<i64>,
    batches: usize,
    elapsed: Duration,
    metrics: &BTreeMap<String, f64>,
) {
    let total = max_epochs.map(|e| e.to_string()).unwrap_or_else(|| "?".into());
    let _ = writeln!(
        std::io::stderr(),
        "Epoch {}/{total}: {batches} batches in {:.2}s  {}",
        epoch + 1,
        elapsed.as_secs_f64(),
        format_metrics(metrics)
    );
}

/// Prints the line that closes a validate / test run.
pub fn eval_line(stage: &str, batches: usize, metrics: &BTreeMap<String, f64>) {
    let _ = writeln!(std::io::stderr(), "{stage}: {batches} batches  {}", format_metrics(metrics));
}
