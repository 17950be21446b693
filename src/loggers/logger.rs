//! The logger interface: where logged metrics and hyperparameters go.
use super::tensorboard::Media;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An experiment logger, as Lightning's `Logger`. Only rank 0 logs.
pub trait Logger {
    /// Short name ("csv", "tensorboard", "host").
    fn name(&self) -> &str;
    /// The folder this logger writes to, if any.
    fn log_dir(&self) -> Option<&Path>;
    /// Records metrics at `step`, with `epoch` as one more metric when
    /// given (Lightning adds it unless the trainer names the step: an
    /// evaluation batch's values go without it).
    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()>;
    /// Records the run's hyperparameters (text values, as given).
    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()>;
    /// Makes everything logged so far durable (called at epoch ends).
    fn save(&mut self) -> Result<()>;
    /// Ends the run ("success" or "failed").
    fn finalize(&mut self, status: &str) -> Result<()>;
    /// The folder this logger writes to, made now if the logger makes it
    /// on first use (Lightning's `logger.log_dir`); the trainer's log
    /// folder when no file logger of its own runs.
    fn resolve_log_dir(&mut self) -> Result<Option<PathBuf>> {
        Ok(self.log_dir().map(Path::to_path_buf))
    }
    /// After [`Logger::resolve_log_dir`]: the run folder
    /// (`save_dir/name/version`, where ModelCheckpoint writes) when it is
    /// not the log folder; `None` when it is.
    fn run_dir(&self) -> Option<PathBuf> {
        None
    }
    /// Whether [`Logger::add_media`] records anything (a TensorBoard
    /// logger).
    fn accepts_media(&self) -> bool {
        false
    }
    /// Records an image, a histogram or a text under `tag` at `step`
    /// (`SummaryWriter.add_image` / `add_histogram` / `add_text`); other
    /// loggers ignore it.
    fn add_media(&mut self, _tag: &str, _media: &Media, _step: i64) -> Result<()> {
        Ok(())
    }
    /// Called after ModelCheckpoint saved `path` (Lightning's
    /// `after_save_checkpoint`); the file loggers do nothing.
    fn after_save_checkpoint(&mut self, _path: &Path) -> Result<()> {
        Ok(())
    }
    /// Whether [`Logger::after_save_checkpoint`] reads the file, so a save
    /// on a background thread must be complete before it is called.
    fn reads_checkpoints(&self) -> bool {
        false
    }
}

/// The next free `version_N` folder under `<root>/lightning_logs` (as
/// Lightning numbers them), created; shared by the file loggers of one run.
pub fn next_version_dir(root: &Path) -> Result<PathBuf> {
    super::layout::Layout::new(root).create().map(|(dir, _)| dir)
}

/// How a run ended, from the status Lightning hands `finalize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    /// "success" or "finished".
    Finished,
    /// "failed".
    Failed,
    /// "killed".
    Killed,
}

impl RunStatus {
    /// Reads "success", "finished", "failed" or "killed".
    pub fn parse(status: &str) -> Result<Self> {
        match status {
            "success" | "finished" => Ok(RunStatus::Finished),
            "failed" => Ok(RunStatus::Failed),
            "killed" => Ok(RunStatus::Killed),
            other => Err(Error::invalid(format!(
                "status {other:?}: expected \"success\", \"finished\", \"failed\" or \"killed\""
            ))),
        }
    }
}

/// Milliseconds since the Unix epoch (the loggers' timestamps).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
