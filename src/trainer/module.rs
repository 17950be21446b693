//! The LightningModule: the user's step functions and optimizer set-up.
use super::context::StepContext;
use super::hooks::HookContext;
use crate::error::Result;
use crate::nn::Module;
use crate::optim::{LrScheduler, Optimizer};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tch::Tensor;

/// A model shared between the host and the trainer.
pub type SharedModel = Arc<Mutex<Module>>;

/// When a scheduler steps (Lightning's `interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// After every optimizer step.
    Step,
    /// After every training epoch.
    Epoch,
}

/// A scheduler with its stepping rule.
pub struct SchedulerConfig {
    /// The scheduler.
    pub scheduler: Box<dyn LrScheduler>,
    /// Step or epoch.
    pub interval: Interval,
    /// Step every `frequency` intervals.
    pub frequency: i64,
    /// Metric fed to ReduceLROnPlateau (a logged name such as "val_loss").
    pub monitor: Option<String>,
}

/// What `configure_optimizers` may want to know about the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptimizerSetup {
    /// Lightning's `trainer.estimated_stepping_batches`: the optimizer
    /// steps this fit will take (`None` when unbounded: no max_steps and a
    /// source of unknown length or no epoch limit).
    pub estimated_stepping_batches: Option<i64>,
}

/// One optimizer and its optional scheduler.
pub struct OptimizerConfig {
    /// The optimizer.
    pub optimizer: Box<dyn Optimizer>,
    /// Its LR scheduler, if any.
    pub scheduler: Option<SchedulerConfig>,
}

/// The user's model logic, as Lightning's `LightningModule`. Every method
/// runs on the thread that called `fit` / `validate` / `test` / `predict`.
pub trait LightningModule {
    /// The model whose parameters are trained (used for train / eval mode).
    fn model(&self) -> Option<SharedModel> {
        None
    }
    /// Computes the loss of one training batch. With automatic
    /// optimization the loss is required (the trainer runs backward and the
    /// optimizer steps on it); with it off the step does both through `ctx`
    /// and may return `None`.
    fn training_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>>;
    /// Lightning's `automatic_optimization`: true (the default) lets the
    /// trainer zero, backward, clip and step; false leaves that to
    /// `training_step` (manual optimization).
    fn automatic_optimization(&self) -> bool {
        true
    }
    /// Whether `validation_step` is implemented.
    fn has_validation_step(&self) -> bool {
        false
    }
    /// Evaluates one validation batch (log metrics through `ctx`).
    fn validation_step(&mut self, _ctx: &mut StepContext, _batch: &[Tensor]) -> Result<()> {
        Ok(())
    }
    /// Whether `test_step` is implemented.
    fn has_test_step(&self) -> bool {
        false
    }
    /// Evaluates one test batch.
    fn test_step(&mut self, _ctx: &mut StepContext, _batch: &[Tensor]) -> Result<()> {
        Ok(())
    }
    /// Predicts one batch; `None` when the step produced nothing.
    fn predict_step(&mut self, _ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>>;
    /// Creates the optimizers (and schedulers) for `fit`; `setup` says how
    /// long the run will be (for OneCycleLR's `total_steps`).
    fn configure_optimizers(&mut self, setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>>;
    /// The module's own hooks, called after every callback's.
    fn on_hook(&mut self, _ctx: &mut HookContext) -> Result<()> {
        Ok(())
    }
    /// Hyperparameters saved in checkpoints and given to the loggers
    /// (Lightning's `save_hyperparameters`).
    fn hparams(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
}
