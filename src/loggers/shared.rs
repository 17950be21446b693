//! A logger shared by a C handle and the trainers it was added to: one
//! `Arc<Mutex<_>>` whose [`Logger`] calls lock it, for the loggers that
//! keep no folder of the trainer's (MLflow, W&B).
use super::Logger;
use crate::error::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A logger kind's fixed short name ("mlflow", "wandb").
pub trait NamedLogger: Logger + Send {
    /// The name [`Logger::name`] gives.
    const NAME: &'static str;
}

/// `T` shared; clones are the same logger.
pub struct SharedLogger<T>(Arc<Mutex<T>>);

impl<T> Clone for SharedLogger<T> {
    fn clone(&self) -> Self {
        SharedLogger(Arc::clone(&self.0))
    }
}

impl<T: NamedLogger> SharedLogger<T> {
    /// Shares `logger`.
    pub fn new(logger: T) -> Self {
        SharedLogger(Arc::new(Mutex::new(logger)))
    }

    /// The logger, locked (a panic while it was held does not lock it
    /// out).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: NamedLogger> Logger for SharedLogger<T> {
    fn name(&self) -> &str {
        T::NAME
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
}
