//! CSV logger, as Lightning 2.6's `CSVLogger`: in its version folder,
//! `metrics.csv` (a row per logging call, a column per key, every key
//! sorted, cells as Python's `csv` module writes them) and `hparams.yaml`.
use super::logger::Logger;
use super::yaml;
use crate::error::{Error, Result, ResultExt};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Lightning's `flush_logs_every_n_steps` default.
pub(crate) const DEFAULT_FLUSH_EVERY: u64 = 100;

/// Rows kept in memory at most: past this the rows are written whatever
/// the steps (the file's content does not depend on when rows are written).
const MAX_PENDING: usize = 10_000;

/// What joins a prefix to a metric name (Lightning's `LOGGER_JOIN_CHAR`).
pub const PREFIX_JOIN: &str = "-";

/// The name a metric is written under: `prefix-name`, or `name` without a
/// prefix (Lightning's `_add_prefix`).
pub fn prefixed(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}{PREFIX_JOIN}{name}")
    }
}

/// A float as Python's `repr` writes it (what `csv` writes for a float):
/// the shortest text that reads back as the same number, in fixed notation
/// for decimal exponents from -4 to 15 (`0.0001`, `1.0`, `123.5`), else in
/// scientific notation with a signed exponent of at least two digits
/// (`1e-05`, `1.5e+16`); `nan`, `inf`, `-inf`.
pub fn python_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's `{:e}` is the shortest round-trip text: `1.2345e3`, `0e0`.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if v.is_sign_negative() { "-" } else { "" };
    // The decimal point sits after `point` digits (Python's `decpt`).
    let point = exp + 1;
    let n = digits.len() as i64;
    let fixed = (-3..=16).contains(&point);
    let body = if !fixed {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let e = point - 1;
        format!("{first}{frac}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
    } else if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{digits}{}.0", "0".repeat((point - n) as usize))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

/// A field as Python's `csv` writes it (`QUOTE_MINIMAL`): quoted when it
/// holds a comma, a quote or a line break, quotes doubled.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// Python's `csv` line terminator.
const CRLF: &str = "\r\n";

/// Writes metrics as Lightning's `CSVLogger` does, byte for byte. Memory
/// stays bounded in long runs: rows are appended at every save (every
/// `flush_logs_every_n_steps` steps, epoch ends, finalize); only a new
/// metric name rewrites the file with the wider header.
pub struct CsvLogger {
    dir: PathBuf,
    /// Put before every metric name (not before `step`).
    prefix: String,
    /// Rows are written when `(step + 1) % flush_every == 0`.
    flush_every: u64,
    /// Rows logged since the last save, cells as text.
    pending: Vec<BTreeMap<String, String>>,
    /// The columns of `metrics.csv` as written, `None` before the first save.
    written: Option<Vec<String>>,
    /// Every hyperparameter logged so far (`hparams.yaml` holds them all).
    hparams: BTreeMap<String, String>,
}

impl CsvLogger {
    /// Writes into the version folder `dir` (created if missing). A
    /// `metrics.csv` already there is removed, as Lightning does when a
    /// logger is given an existing version.
    pub fn create(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).ctx(format!("creating {}", dir.display()))?;
        let old = dir.join("metrics.csv");
        if fs::symlink_metadata(&old).is_ok_and(|m| m.is_file()) {
            fs::remove_file(&old).ctx(format!("removing the old {}", old.display()))?;
        }
        Ok(CsvLogger {
            dir: dir.to_path_buf(),
            prefix: String::new(),
            flush_every: DEFAULT_FLUSH_EVERY,
            pending: Vec::new(),
            written: None,
            hparams: BTreeMap::new(),
        })
    }

    /// Puts `prefix-` before every metric name (Lightning's `prefix`).
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    /// Writes the rows whenever a row's `step + 1` is a multiple of `n`
    /// (Lightning's `flush_logs_every_n_steps`); `n` must be at least 1.
    pub fn with_flush_every(mut self, n: u64) -> Result<Self> {
        if n == 0 {
            return Err(Error::invalid("flush_logs_every_n_steps must be at least 1"));
        }
        self.flush_every = n;
        Ok(self)
    }

    /// Lightning's `CSVLogger.log_metrics(metrics, step)`: one row holding
    /// the metrics (prefixed) and `step` (which replaces a metric of that
    /// name), written at once when `(step + 1) % flush_logs_every_n_steps`
    /// is 0. An empty `metrics` still makes a row with the step.
    pub fn log_row(&mut self, metrics: &BTreeMap<String, f64>, step: i64) -> Result<()> {
        let row = metrics.iter().map(|(k, v)| (prefixed(&self.prefix, k), python_float(*v))).collect();
        self.push(row, step)
    }

    /// Adds a row (cells as text) with its step and saves when due.
    fn push(&mut self, mut row: BTreeMap<String, String>, step: i64) -> Result<()> {
        row.insert("step".into(), step.to_string());
        self.pending.push(row);
        let due = (i128::from(step) + 1).rem_euclid(i128::from(self.flush_every)) == 0;
        if due || self.pending.len() >= MAX_PENDING {
            self.save()?;
        }
        Ok(())
    }

    /// Every key written or pending, sorted (Lightning sorts them all,
    /// `epoch` and `step` included).
    fn columns(&self) -> Vec<String> {
        let mut names: BTreeSet<&str> = self.written.iter().flatten().map(String::as_str).collect();
        names.extend(self.pending.iter().flat_map(|r| r.keys().map(String::as_str)));
        names.into_iter().map(str::to_string).collect()
    }

    fn row_text(cols: &[String], row: &BTreeMap<String, String>) -> String {
        let cells: Vec<String> =
            cols.iter().map(|c| row.get(c).map(|v| csv_field(v.as_str())).unwrap_or_default()).collect();
        cells.join(",") + CRLF
    }

    fn header_text(cols: &[String]) -> String {
        let names: Vec<String> = cols.iter().map(|c| csv_field(c.as_str())).collect();
        names.join(",") + CRLF
    }

    /// The rows already in the file, re-read to be written under `cols`
    /// (cells are numbers, never quoted).
    fn rows_on_disk(&self, path: &Path, old: &[String], cols: &[String]) -> Result<String> {
        let bytes = crate::fs_safe::read_regular(path)?;
        let text = String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            .ctx(format!("reading {}", path.display()))?;
        let mut out = String::new();
        for line in text.lines().skip(1).filter(|l| !l.is_empty()) {
            let row: BTreeMap<String, String> = old
                .iter()
                .zip(line.split(','))
                .filter(|(_, v)| !v.is_empty())
                .map(|(c, v)| (c.clone(), v.to_string()))
                .collect();
            out.push_str(&Self::row_text(cols, &row));
        }
        Ok(out)
    }

    /// Lightning's `ExperimentWriter.log_hparams`: merges `params` into the
    /// hyperparameters logged so far and rewrites `hparams.yaml`.
    pub fn merge_hparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        self.hparams.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        write_hparams(&self.dir, &self.hparams)
    }
}

/// `hparams.yaml` in `dir` holding `params` (`{}` when empty), written
/// atomically.
pub fn write_hparams(dir: &Path, params: &BTreeMap<String, String>) -> Result<()> {
    let text = if params.is_empty() {
        "{}\n".to_string()
    } else {
        params.iter().map(|(k, v)| format!("{}: {}\n", yaml::quoted(k), yaml::value(v))).collect()
    };
    crate::fs_safe::write_atomic(&dir.join("hparams.yaml"), text.as_bytes())
}

impl Logger for CsvLogger {
    fn name(&self) -> &str {
        "csv"
    }

    fn log_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    /// The trainer's call: the metrics plus `epoch` (unless a metric has
    /// that name), prefixed, at `step`; nothing when `metrics` is empty.
    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        let mut cells: BTreeMap<String, String> = metrics.iter().map(|(k, v)| (k.clone(), python_float(*v))).collect();
        if let Some(epoch) = epoch {
            cells.entry("epoch".into()).or_insert_with(|| epoch.to_string());
        }
        let row = cells.into_iter().map(|(k, v)| (prefixed(&self.prefix, &k), v)).collect();
        self.push(row, step)
    }

    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        self.merge_hparams(params)
    }

    fn save(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let path = self.dir.join("metrics.csv");
        let cols = self.columns();
        let rows: String = self.pending.iter().map(|r| Self::row_text(&cols, r)).collect();
        match &self.written {
            Some(old) if *old == cols && path.exists() => {
                let mut f = crate::fs_safe::open_append(&path).ctx(format!("opening {}", path.display()))?;
                f.write_all(rows.as_bytes()).ctx(format!("appending to {}", path.display()))?;
            }
            old => {
                let mut text = Self::header_text(&cols);
                if let Some(old) = old.as_ref().filter(|_| path.exists()) {
                    text.push_str(&self.rows_on_disk(&path, old, &cols)?);
                }
                text.push_str(&rows);
                crate::fs_safe::write_atomic(&path, text.as_bytes())?;
            }
        }
        self.written = Some(cols);
        self.pending.clear();
        Ok(())
    }

    fn finalize(&mut self, _status: &str) -> Result<()> {
        self.save()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dirs::TempDir;

    fn m(items: &[(&str, f64)]) -> BTreeMap<String, f64> {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn floats_as_python_writes_them() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.5, "-2.5"),
            (123.456, "123.456"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1.2345e17, "1.2345e+17"),
            (1234567890123456.0, "1234567890123456.0"),
            (1e15, "1000000000000000.0"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::from(0.1f32), "0.10000000149011612"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (v, want) in cases {
            assert_eq!(python_float(v), want, "{v:e}");
        }
    }

    #[test]
    fn trainer_rows_sort_every_column_as_lightning() {
        let dir = TempDir::new("csv-logger");
        let mut l = CsvLogger::create(&dir).unwrap();
        l.log_metrics(&m(&[("loss", 0.5)]), Some(0), 9).unwrap();
        l.log_metrics(&m(&[("val_acc", 0.9)]), Some(0), 9).unwrap();
        l.log_metrics(&m(&[("epoch", 3.0)]), Some(0), 10).unwrap();
        l.log_hyperparams(&BTreeMap::from([("lr".to_string(), "0.1".to_string())])).unwrap();
        l.log_hyperparams(&BTreeMap::from([("name".to_string(), "mlp".to_string())])).unwrap();
        l.finalize("success").unwrap();
        let text = fs::read_to_string(dir.join("metrics.csv")).unwrap();
        assert_eq!(text, "epoch,loss,step,val_acc\r\n0,0.5,9,\r\n0,,9,0.9\r\n3.0,,10,\r\n");
        let yaml = fs::read_to_string(dir.join("hparams.yaml")).unwrap();
        assert_eq!(yaml, "lr: 0.1\nname: \"mlp\"\n", "hyperparameters merge");
    }

    #[test]
    fn standalone_rows_prefix_and_flush() {
        let dir = TempDir::new("csv-logger-prefix");
        std::fs::write(dir.join("metrics.csv"), "old").unwrap();
        let mut l = CsvLogger::create(&dir).unwrap().with_prefix("p").with_flush_every(2).unwrap();
        assert!(!dir.join("metrics.csv").exists(), "an old metrics.csv is removed");
        l.log_row(&m(&[("loss", 1.0), ("step", 7.0)]), 0).unwrap();
        assert!(!dir.join("metrics.csv").exists());
        l.log_row(&m(&[("a,b", 2.5)]), 1).unwrap();
        let text = fs::read_to_string(dir.join("metrics.csv")).unwrap();
        assert_eq!(text, "\"p-a,b\",p-loss,p-step,step\r\n,1.0,7.0,0\r\n2.5,,,1\r\n");
        l.log_row(&BTreeMap::new(), 2).unwrap();
        l.finalize("success").unwrap();
        let text = fs::read_to_string(dir.join("metrics.csv")).unwrap();
        assert!(text.ends_with("2.5,,,1\r\n,,,2\r\n"), "{text:?}");
        assert!(CsvLogger::create(&dir).unwrap().with_flush_every(0).is_err());
    }

    #[test]
    fn rows_are_appended_and_a_new_metric_widens_the_file() {
        let dir = TempDir::new("csv-logger-append");
        let mut l = CsvLogger::create(&dir).unwrap();
        for step in 0..250 {
            l.log_metrics(&m(&[("loss", 1.0 / (1 + step) as f64)]), Some(0), step).unwrap();
            assert!(l.pending.len() < DEFAULT_FLUSH_EVERY as usize);
        }
        // Steps 99 and 199 wrote the rows so far.
        assert_eq!(l.pending.len(), 50);
        l.log_metrics(&m(&[("a,b", 2.0)]), Some(1), 250).unwrap();
        l.finalize("success").unwrap();
        let text = fs::read_to_string(dir.join("metrics.csv")).unwrap();
        let lines: Vec<&str> = text.split_terminator("\r\n").collect();
        assert_eq!(lines.len(), 252);
        assert_eq!(lines[0], "\"a,b\",epoch,loss,step");
        assert_eq!(lines[1], ",0,1.0,0");
        assert_eq!(lines[250], ",0,0.004,249");
        assert_eq!(lines[251], "2.0,1,,250");
    }
}
