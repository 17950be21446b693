//! The TensorBoard logger, as Lightning's `TensorBoardLogger` over
//! torch's `SummaryWriter`: event files in the run's version folder, and
//! `hparams.yaml` there when the logger saves.
use super::media::Media;
use super::summary::{hparams, scalars};
use super::writer::EventWriter;
use crate::error::{Result, ResultExt};
use crate::loggers::csv::{prefixed, write_hparams};
use crate::loggers::logger::Logger;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The metric Lightning logs (as -1, at step 0) with the hyperparameters so
/// that TensorBoard's hparams table has a metric column.
pub const HP_METRIC: &str = "hp_metric";

/// Writes metrics, hyperparameters, images, histograms and texts to a
/// TensorBoard event file.
pub struct TensorBoardLogger {
    dir: PathBuf,
    writer: EventWriter,
    default_hp_metric: bool,
    /// Put before every metric name (Lightning's `prefix`).
    prefix: String,
    /// Every hyperparameter logged so far (for `hparams.yaml`).
    hparams: BTreeMap<String, String>,
}

impl TensorBoardLogger {
    /// Opens a new event file in `version_dir` (created if missing), e.g.
    /// the folder [`crate::loggers::logger::next_version_dir`] returns.
    pub fn create(version_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(version_dir).ctx(format!("creating {}", version_dir.display()))?;
        let writer = EventWriter::create(version_dir)?;
        Ok(TensorBoardLogger {
            dir: version_dir.to_path_buf(),
            writer,
            default_hp_metric: true,
            prefix: String::new(),
            hparams: BTreeMap::new(),
        })
    }

    /// Whether [`Logger::log_hyperparams`] also logs `hp_metric = -1` and
    /// names it as the hparams table's metric (Lightning's
    /// `default_hp_metric`, on by default).
    pub fn with_default_hp_metric(mut self, on: bool) -> Self {
        self.default_hp_metric = on;
        self
    }

    /// Puts `prefix-` before every metric name.
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    /// The event file's path (the newest, when writing reopened one).
    pub fn event_file(&self) -> &Path {
        self.writer.path()
    }

    /// The writer, a new event file when the last one was closed (torch's
    /// `SummaryWriter` opens one when written to after `close`).
    fn open_writer(&mut self) -> Result<&mut EventWriter> {
        if !self.writer.is_open() {
            self.writer = EventWriter::create(&self.dir)?;
        }
        Ok(&mut self.writer)
    }

    /// Lightning's `TensorBoardLogger.log_metrics(metrics, step)`: one
    /// scalar per metric (prefixed) at `step`, in one event; nothing when
    /// `metrics` is empty.
    pub fn log_scalars(&mut self, metrics: &BTreeMap<String, f64>, step: i64) -> Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        let names: Vec<(String, f64)> = metrics.iter().map(|(k, v)| (prefixed(&self.prefix, k), *v)).collect();
        let summary = scalars(names.iter().map(|(k, v)| (k.as_str(), *v)));
        self.open_writer()?.write_summary(summary, step)
    }

    /// `SummaryWriter.add_image` / `add_histogram` / `add_text`: `media`
    /// under `tag` (not prefixed) at `step`.
    pub fn write_media(&mut self, tag: &str, media: &Media, step: i64) -> Result<()> {
        self.open_writer()?.write_summary(media.summary(tag), step)
    }
}

impl Logger for TensorBoardLogger {
    fn name(&self) -> &str {
        "tensorboard"
    }

    fn log_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    /// The trainer's call: the metrics plus `epoch` (unless a metric has
    /// that name) at `step`, in one event.
    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        let mut all = metrics.clone();
        if let Some(epoch) = epoch {
            all.entry("epoch".into()).or_insert(epoch as f64);
        }
        self.log_scalars(&all, step)
    }

    /// With the default hp metric on, `hp_metric = -1` (prefixed, as
    /// Lightning logs it) at step 0, then the hparams plugin's experiment,
    /// session-start and session-end summaries (also for no parameters, as
    /// Lightning); with it off nothing goes to the event file (Lightning
    /// writes the summaries only with a metric). The values are kept for
    /// `hparams.yaml`.
    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        self.hparams.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        if !self.default_hp_metric {
            return Ok(());
        }
        self.log_scalars(&BTreeMap::from([(HP_METRIC.to_string(), -1.0)]), 0)?;
        for summary in hparams(params, &[HP_METRIC]) {
            self.open_writer()?.write_summary(summary, 0)?;
        }
        Ok(())
    }

    /// Flushes the event file, and writes `hparams.yaml` (the
    /// hyperparameters logged so far) when the folder has none.
    fn save(&mut self) -> Result<()> {
        self.writer.flush()?;
        let yaml = self.dir.join("hparams.yaml");
        if self.dir.is_dir() && std::fs::symlink_metadata(&yaml).is_err() {
            write_hparams(&self.dir, &self.hparams)?;
        }
        Ok(())
    }

    /// Flushes, syncs and closes the event file (logging afterwards opens
    /// a new one); on "success" also saves (`hparams.yaml`).
    fn finalize(&mut self, status: &str) -> Result<()> {
        self.writer.close()?;
        if status == "success" {
            self.save()?;
        }
        Ok(())
    }

    fn accepts_media(&self) -> bool {
        true
    }

    fn add_media(&mut self, tag: &str, media: &Media, step: i64) -> Result<()> {
        self.write_media(tag, media, step)
    }
}
