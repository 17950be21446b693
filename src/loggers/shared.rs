//! A logger shared by a C handle and the trainers it was added to: one
//! `Arc<Mutex<_>>` whose [`Logger`] calls lock it (CSV, TensorBoard,
//! MLflow, W&B).
use super::{Logger, Media};
use crate::error::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A logger whose short name ("csv", "mlflow", "wandb") lives as long as
/// the program, so a shared logger answers it without locking.
pub trait NamedLogger: Logger + Send {
    /// The name [`Logger::name`] gives.
    fn kind_name(&self) -> &'static str;
}

/// `T` shared; clones are the same logger.
pub struct SharedLogger<T> {
    name: &'static str,
    inner: Arc<Mutex<T>>,
}

impl<T> Clone for SharedLogger<T> {
    fn clone(&self) -> Self {
        SharedLogger { name: self.name, inner: Arc::clone(&self.inner) }
    }
}

impl<T: NamedLogger> SharedLogger<T> {
    /// Shares `logger`.
    pub fn new(logger: T) -> Self {
        SharedLogger { name: logger.kind_name(), inner: Arc::new(Mutex::new(logger)) }
    }

    /// The logger, locked (a panic while it was held does not lock it
    /// out: the loggers' state is files, rows and a connection).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: NamedLogger> Logger for SharedLogger<T> {
    fn name(&self) -> &str {
        self.name
    }

    /// `None`: a folder is read through [`Logger::resolve_log_dir`].
    fn log_dir(&self) -> Option<&Path> {
        None
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        self.lock().log_metrics(metrics, epoch, step)
    }

    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        self.lock().log_hyperparams(params)
    }

    fn save(&mut self) -> Result<()> {
        self.lock().save()
    }

    fn finalize(&mut self, status: &str) -> Result<()> {
        self.lock().finalize(status)
    }

    fn resolve_log_dir(&mut self) -> Result<Option<PathBuf>> {
        self.lock().resolve_log_dir()
    }

    fn run_dir(&self) -> Option<PathBuf> {
        self.lock().run_dir()
    }

    fn after_save_checkpoint(&mut self, path: &Path) -> Result<()> {
        self.lock().after_save_checkpoint(path)
    }

    fn reads_checkpoints(&self) -> bool {
        self.lock().reads_checkpoints()
    }

    fn accepts_media(&self) -> bool {
        self.lock().accepts_media()
    }

    fn add_media(&mut self, tag: &str, media: &Media, step: i64) -> Result<()> {
        self.lock().add_media(tag, media, step)
    }
}
