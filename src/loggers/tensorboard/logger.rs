//! The TensorBoard logger, as Lightning's `TensorBoardLogger`: one event
//! file directly in the run's `lightning_logs/version_N` folder.
use super::summary::{hparams, scalars};
use super::writer::EventWriter;
use crate::error::{Result, ResultExt};
use crate::loggers::logger::Logger;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The metric Lightning logs (as -1, at step 0) with the hyperparameters so
/// that TensorBoard's hparams table has a metric column.
pub const HP_METRIC: &str = "hp_metric";

/// Writes metrics and hyperparameters to a TensorBoard event file.
pub struct TensorBoardLogger {
    dir: PathBuf,
    writer: EventWriter,
    default_hp_metric: bool,
}

impl TensorBoardLogger {
    /// Opens a new event file in `version_dir` (created if missing), e.g.
    /// the folder [`crate::loggers::logger::next_version_dir`] returns.
    pub fn create(version_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(version_dir).ctx(format!("creating {}", version_dir.display()))?;
        let writer = EventWriter::create(version_dir)?;
        Ok(TensorBoardLogger { dir: version_dir.to_path_buf(), writer, default_hp_metric: true })
    }

    /// Whether [`Logger::log_hyperparams`] also logs `hp_metric = -1` and
    /// names it as the hparams table's metric (Lightning's
    /// `default_hp_metric`, on by default).
    pub fn with_default_hp_metric(mut self, on: bool) -> Self {
        self.default_hp_metric = on;
        self
    }

    /// The event file's path.
    pub fn event_file(&self) -> &Path {
        self.writer.path()
    }
}

impl Logger for TensorBoardLogger {
    fn name(&self) -> &str {
        "tensorboard"
    }

    fn log_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    /// One event at `step` holding a scalar per metric plus `epoch` (unless
    /// the metrics name their own); nothing when `metrics` is empty.
    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: i64, step: i64) -> Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        let extra = (!metrics.contains_key("epoch")).then_some(("epoch", epoch as f64));
        let summary = scalars(metrics.iter().map(|(k, v)| (k.as_str(), *v)).chain(extra));
        self.writer.write_summary(summary, step)
    }

    /// The hparams plugin's experiment, session-start and session-end
    /// summaries, after `hp_metric = -1` at step 0 when the default hp
    /// metric is on; nothing when `params` is empty.
    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        if params.is_empty() {
            return Ok(());
        }
        let metrics: &[&str] = if self.default_hp_metric { &[HP_METRIC] } else { &[] };
        if self.default_hp_metric {
            self.writer.write_summary(scalars([(HP_METRIC, -1.0)]), 0)?;
        }
        for summary in hparams(params, metrics) {
            self.writer.write_summary(summary, 0)?;
        }
        Ok(())
    }

    fn save(&mut self) -> Result<()> {
        self.writer.flush()
    }

    /// Flushes, syncs and closes the event file, whatever `status` is;
    /// logging afterwards is an `InvalidState` error.
    fn finalize(&mut self, _status: &str) -> Result<()> {
        self.writer.close()
    }
}
