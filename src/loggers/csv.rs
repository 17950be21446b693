//! CSV logger in Lightning's layout: `<root>/lightning_logs/version_N/`
//! holding `metrics.csv` (one row per logging call, a column per metric)
//! and `hparams.yaml`.
use super::logger::Logger;
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
    dirty: bool,
}

impl CsvLogger {
    /// Writes into the version folder `dir` (created if missing).
    pub fn create(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).ctx(format!("creating {}", dir.display()))?;
        let logger = CsvLogger { dir: dir.to_path_buf(), rows: Vec::new(), columns: BTreeSet::new(), dirty: false };
        write_atomic(&dir.join("hparams.yaml"), "{}\n")?;
        Ok(logger)
    }

    fn render(&self) -> String {
        let mut cols: Vec<&str> = vec!["epoch"];
        cols.extend(self.columns.iter().map(String::as_str).filter(|c| *c != "epoch" && *c != "step"));
        cols.push("step");
        let mut text = cols.join(",");
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
        text
    }
}

/// Writes `text` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).ctx(format!("creating {}", tmp.display()))?;
    f.write_all(text.as_bytes()).ctx(format!("writing {}", tmp.display()))?;
    f.sync_all().ctx(format!("syncing {}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| Error::io(format!("renaming to {}: {e}", path.display())))
}

/// YAML scalar for a text value: numbers and booleans as they are,
/// everything else quoted.
fn yaml_value(v: &str) -> String {
    let plain = v.parse::<f64>().is_ok() || matches!(v, "true" | "false" | "null");
    if plain {
        v.to_string()
    } else {
        format!("{:?}", v)
    }
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
        self.columns.extend(row.keys().cloned());
        self.rows.push(row);
        self.dirty = true;
        Ok(())
    }

    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        let text = if params.is_empty() {
            "{}\n".to_string()
        } else {
            params.iter().map(|(k, v)| format!("{k}: {}\n", yaml_value(v))).collect()
        };
        write_atomic(&self.dir.join("hparams.yaml"), &text)
    }

    fn save(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        write_atomic(&self.dir.join("metrics.csv"), &self.render())?;
        self.dirty = false;
        Ok(())
    }

    fn finalize(&mut self, _status: &str) -> Result<()> {
        self.save()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_share_columns_with_epoch_first_and_step_last() {
        let dir = std::env::temp_dir().join(format!("fulmen-csv-{}", std::process::id()));
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
        fs::remove_dir_all(dir).unwrap();
    }
}
