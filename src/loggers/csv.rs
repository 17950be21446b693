//! CSV logger in Lightning's layout: `<root>/lightning_logs/version_N/`
//! holding `metrics.csv` (one row per logging call, a column per metric)
//! and `hparams.yaml`.
use crate::error::{Error, Result, ResultExt};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes metrics as Lightning's `CSVLogger` does.
pub struct CsvLogger {
    dir: PathBuf,
    rows: Vec<BTreeMap<String, f64>>,
    columns: BTreeSet<String>,
}

impl CsvLogger {
    /// Creates the next free `version_N` folder under `<root>/lightning_logs`.
    pub fn create(root: &Path) -> Result<Self> {
        let base = root.join("lightning_logs");
        fs::create_dir_all(&base).ctx(format!("creating {}", base.display()))?;
        let next = fs::read_dir(&base)
            .ctx(format!("listing {}", base.display()))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("version_")?.parse::<u64>().ok())
            .max()
            .map_or(0, |v| v + 1);
        let dir = base.join(format!("version_{next}"));
        fs::create_dir(&dir).ctx(format!("creating {}", dir.display()))?;
        fs::write(dir.join("hparams.yaml"), "{}\n").ctx("writing hparams.yaml")?;
        Ok(CsvLogger { dir, rows: Vec::new(), columns: BTreeSet::new() })
    }

    /// The version folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records one row of metrics at `step` (written on [`Self::flush`]).
    pub fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: i64, step: i64) {
        if metrics.is_empty() {
            return;
        }
        let mut row = metrics.clone();
        row.insert("epoch".into(), epoch as f64);
        row.insert("step".into(), step as f64);
        self.columns.extend(row.keys().cloned());
        self.rows.push(row);
    }

    /// Rewrites `metrics.csv` with every row so far (atomically).
    pub fn flush(&self) -> Result<()> {
        let mut cols: Vec<&String> = self.columns.iter().filter(|c| *c != "epoch" && *c != "step").collect();
        let (epoch, step) = ("epoch".to_string(), "step".to_string());
        cols.insert(0, &epoch);
        cols.push(&step);
        let mut text = cols.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(",");
        text.push('\n');
        for row in &self.rows {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| match row.get(*c) {
                    Some(v) if *c == "epoch" || *c == "step" => format!("{}", *v as i64),
                    Some(v) => format!("{v}"),
                    None => String::new(),
                })
                .collect();
            text.push_str(&cells.join(","));
            text.push('\n');
        }
        let path = self.dir.join("metrics.csv");
        let tmp = self.dir.join("metrics.csv.tmp");
        let mut f = fs::File::create(&tmp).ctx(format!("creating {}", tmp.display()))?;
        f.write_all(text.as_bytes()).ctx("writing metrics.csv")?;
        f.sync_all().ctx("syncing metrics.csv")?;
        fs::rename(&tmp, &path).map_err(|e| Error::io(format!("renaming to {}: {e}", path.display())))
    }
}
