//! The logger interface: where logged metrics and hyperparameters go.
use crate::error::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// An experiment logger, as Lightning's `Logger`. Only rank 0 logs.
pub trait Logger {
    /// Short name ("csv", "tensorboard", "host").
    fn name(&self) -> &str;
    /// The folder this logger writes to, if any.
    fn log_dir(&self) -> Option<&Path>;
    /// Records metrics at an optimizer step (`epoch` is recorded too).
    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: i64, step: i64) -> Result<()>;
    /// Records the run's hyperparameters (text values, as given).
    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()>;
    /// Makes everything logged so far durable (called at epoch ends).
    fn save(&mut self) -> Result<()>;
    /// Ends the run ("success" or "failed").
    fn finalize(&mut self, status: &str) -> Result<()>;
}

/// The next free `version_N` folder under `<root>/lightning_logs`,
/// created; shared by the file loggers of one run.
pub fn next_version_dir(root: &Path) -> Result<std::path::PathBuf> {
    use crate::error::ResultExt;
    let base = root.join("lightning_logs");
    std::fs::create_dir_all(&base).ctx(format!("creating {}", base.display()))?;
    crate::fs_safe::create_next_numbered_dir(&base, "version_")
}
