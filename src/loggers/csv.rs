//! CSV logger in Lightning's layout: `<root>/lightning_logs/version_N/`
//! holding `metrics.csv` (one row per logging call, a column per metric)
//! and `hparams.yaml`.
use super::logger::Logger;
use super::yaml;
use crate::error::{Result, ResultExt};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Rows kept in memory before they are written (Lightning's
/// `flush_logs_every_n_steps` default).
const FLUSH_EVERY: usize = 100;

/// Writes metrics as Lightning's `CSVLogger` does. Memory stays bounded in
/// long runs: rows are appended to the file at every save (and every 100
/// rows); only a new metric name rewrites the file with the wider header.
pub struct CsvLogger {
    dir: PathBuf,
    /// Rows logged since the last save.
    pending: Vec<BTreeMap<String, f64>>,
    /// The columns of `metrics.csv` as written, `None` before the first save.
    written: Option<Vec<String>>,
}

impl CsvLogger {
    /// Writes into the version folder `dir` (created if missing).
    pub fn create(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).ctx(format!("creating {}", dir.display()))?;
        let logger = CsvLogger { dir: dir.to_path_buf(), pending: Vec::new(), written: None };
        write_atomic(&dir.join("hparams.yaml"), "{}\n")?;
        Ok(logger)
    }

    /// "epoch", the metric names in order, "step".
    fn columns(&self) -> Vec<String> {
        let mut names: BTreeSet<&str> = self.written.iter().flatten().map(String::as_str).collect();
        names.extend(self.pending.iter().flat_map(|r| r.keys().map(String::as_str)));
        let mut cols = vec!["epoch".to_string()];
        cols.extend(names.into_iter().filter(|c| *c != "epoch" && *c != "step").map(str::to_string));
        cols.push("step".to_string());
        cols
    }

    fn row_text(cols: &[String], row: &BTreeMap<String, f64>) -> String {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| match row.get(c) {
                Some(v) if c == "epoch" || c == "step" => format!("{}", *v as i64),
                Some(v) => format!("{v}"),
                None => String::new(),
            })
            .collect();
        let mut line = cells.join(",");
        line.push('\n');
        line
    }

    fn header_text(cols: &[String]) -> String {
        let names: Vec<String> =
            cols.iter()
                .map(|c| {
                    if c.contains([',', '"', '\n', '\r']) {
                        format!("\"{}\"", c.replace('"', "\"\""))
                    } else {
                        c.clone()
                    }
                })
                .collect();
        let mut line = names.join(",");
        line.push('\n');
        line
    }

    /// The rows already in the file, re-read to be written under `cols`.
    fn rows_on_disk(&self, path: &Path, old: &[String], cols: &[String]) -> Result<String> {
        let bytes = crate::fs_safe::read_regular(path)?;
        let text = String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            .ctx(format!("reading {}", path.display()))?;
        let mut out = String::new();
        for line in text.lines().skip(1).filter(|l| !l.is_empty()) {
            let cells: Vec<&str> = line.split(',').collect();
            let row: BTreeMap<String, f64> =
                old.iter().zip(cells).filter_map(|(c, v)| v.parse::<f64>().ok().map(|v| (c.clone(), v))).collect();
            out.push_str(&Self::row_text(cols, &row));
        }
        Ok(out)
    }
}

/// Writes `text` to `path` atomically (see `fs_safe::write_atomic`).
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    crate::fs_safe::write_atomic(path, text.as_bytes())
}

impl Logger for CsvLogger {
    fn name(&self) -> &str {
        "csv"
    }

    fn log_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: i64, step: i64) -> Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        let mut row = metrics.clone();
        row.insert("epoch".into(), epoch as f64);
        row.insert("step".into(), step as f64);
        self.pending.push(row);
        if self.pending.len() >= FLUSH_EVERY {
            self.save()?;
        }
        Ok(())
    }

    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        let text = if params.is_empty() {
            "{}\n".to_string()
        } else {
            params.iter().map(|(k, v)| format!("{}: {}\n", yaml::quoted(k), yaml::value(v))).collect()
        };
        write_atomic(&self.dir.join("hparams.yaml"), &text)
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
                write_atomic(&path, &text)?;
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

    #[test]
    fn rows_share_columns_with_epoch_first_and_step_last() {
        let dir = TempDir::new("csv-logger");
        let mut l = CsvLogger::create(&dir).unwrap();
        l.log_metrics(&BTreeMap::from([("loss".to_string(), 0.5)]), 0, 9).unwrap();
        l.log_metrics(&BTreeMap::from([("val_acc".to_string(), 0.9)]), 0, 9).unwrap();
        l.log_hyperparams(&BTreeMap::from([
            ("lr".to_string(), "0.1".to_string()),
            ("name".to_string(), "mlp".to_string()),
        ]))
        .unwrap();
        l.finalize("success").unwrap();
        let text = fs::read_to_string(dir.join("metrics.csv")).unwrap();
        assert_eq!(text, "epoch,loss,val_acc,step\n0,0.5,,9\n0,,0.9,9\n");
        let yaml = fs::read_to_string(dir.join("hparams.yaml")).unwrap();
        assert_eq!(yaml, "lr: 0.1\nname: \"mlp\"\n");
    }

    #[test]
    fn rows_are_appended_and_a_new_metric_widens_the_file() {
        let dir = TempDir::new("csv-logger-append");
        let mut l = CsvLogger::create(&dir).unwrap();
        for step in 0..250 {
            l.log_metrics(&BTreeMap::from([("loss".to_string(), 1.0 / (1 + step) as f64)]), 0, step).unwrap();
            assert!(l.pending.len() < FLUSH_EVERY);
        }
        l.log_metrics(&BTreeMap::from([("a,b".to_string(), 2.0)]), 1, 250).unwrap();
        l.finalize("success").unwrap();
        let text = fs::read_to_string(dir.join("metrics.csv")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 252);
        assert_eq!(lines[0], "epoch,\"a,b\",loss,step");
        assert_eq!(lines[1], "0,,1,0");
        assert_eq!(lines[250], "0,,0.004,249");
        assert_eq!(lines[251], "1,2,,250");
    }
}
