//! The Trainer: Lightning's fit / validate / test / predict loops.
pub mod context;
mod eval;
mod fit;
pub mod metrics;
pub mod module;
pub mod options;
pub mod progress;
pub mod source;

pub use context::{Stage, StepContext};
pub use metrics::{LogFlags, MetricStore};
pub use module::{Interval, LightningModule, OptimizerConfig, SchedulerConfig, SharedModel};
pub use options::{BatchLimit, TrainerOptions};
pub use source::{BatchIter, BatchSource};

use crate::error::Result;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Runs a [`LightningModule`] through training and evaluation loops.
pub struct Trainer {
    opts: TrainerOptions,
    /// Optimizer steps taken in the last `fit`.
    pub global_step: i64,
    /// Epochs completed in the last `fit`.
    pub current_epoch: i64,
    /// Latest value of every logged metric (Lightning's `callback_metrics`).
    pub callback_metrics: BTreeMap<String, f64>,
    /// The log folder of the last run, when a logger was active.
    pub log_dir: Option<PathBuf>,
}

impl Trainer {
    /// Creates a trainer; the options are checked here.
    pub fn new(opts: TrainerOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Trainer { opts, global_step: 0, current_epoch: 0, callback_metrics: BTreeMap::new(), log_dir: None })
    }

    /// The options.
    pub fn options(&self) -> &TrainerOptions {
        &self.opts
    }
}

/// Switches the module's model to training or evaluation mode.
fn set_mode(module: &dyn LightningModule, training: bool) -> Result<()> {
    if let Some(m) = module.model() {
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        g.set_training(training)?;
    }
    Ok(())
}

/// Number of samples in a batch: the first dimension of its first tensor.
fn batch_size_of(batch: &[tch::Tensor]) -> i64 {
    batch.first().and_then(|t| t.size().first().copied()).unwrap_or(1)
}
