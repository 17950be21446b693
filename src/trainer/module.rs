//! The LightningModule: the user's step functions and optimizer set-up.
use super::context::StepContext;
use super::hooks::HookContext;
use super::optimization::OptimizationHooks;
use super::source::BatchSource;
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::optim::{LrScheduler, Optimizer};
use std::collections::BTreeMap;
use std::rc::Rc;
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
    /// Lightning's `name`: LearningRateMonitor logs `<name>` instead of
    /// `lr-<Optimizer>`.
    pub name: Option<String>,
    /// Lightning's `strict`: a ReduceLROnPlateau whose monitored metric was
    /// not logged fails the run when true, warns and skips its step when false.
    pub strict: bool,
}

/// What `configure_optimizers` may want to know about the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptimizerSetup {
    /// Lightning's `trainer.estimated_stepping_batches`: the optimizer
    /// steps this fit will take (`None` when unbounded: no max_steps and a
    /// source of unknown length or no epoch limit).
    pub estimated_stepping_batches: Option<i64>,
}

/// One optimizer and its schedulers (none, one, or several as Lightning's
/// `lr_scheduler` configs naming the same optimizer).
pub struct OptimizerConfig {
    /// The optimizer.
    pub optimizer: Box<dyn Optimizer>,
    /// Its LR schedulers, in the order they step.
    pub schedulers: Vec<SchedulerConfig>,
}

impl OptimizerConfig {
    /// An optimizer with `scheduler`, if any.
    pub fn new(optimizer: Box<dyn Optimizer>, scheduler: Option<SchedulerConfig>) -> Self {
        OptimizerConfig { optimizer, schedulers: scheduler.into_iter().collect() }
    }

    /// Whether several schedulers share the optimizer: they then step in
    /// torch's chainable forms ([`LrScheduler::chained_step`]), as in torch,
    /// so their factors compose.
    pub fn chained(&self) -> bool {
        self.schedulers.len() > 1
    }

    /// Whether `new` may join this optimizer's schedulers (see
    /// [`OptimizerConfig::add_scheduler`]): made for its param groups, and
    /// neither it nor one already there a SequentialLR or stepped.
    pub fn check_added(&self, new: &dyn LrScheduler) -> Result<()> {
        let all = self.schedulers.iter().map(|c| c.scheduler.as_ref()).chain(std::iter::once(new));
        let groups = self.optimizer.param_groups().len();
        for (i, s) in all.enumerate() {
            let name = s.name();
            if name == "sequential_lr" {
                return Err(Error::invalid(format!(
                    "scheduler {i} is a SequentialLR, which cannot share its optimizer with another scheduler"
                )));
            }
            if s.last_lr().len() != groups {
                return Err(Error::state(format!(
                    "scheduler {i} ({name}) was made for {} param groups; the optimizer has {groups}",
                    s.last_lr().len()
                )));
            }
            if !s.fresh() {
                return Err(Error::state(format!(
                    "scheduler {i} ({name}) has stepped; schedulers sharing an optimizer start fresh"
                )));
            }
        }
        Ok(())
    }

    /// Attaches another scheduler (made for this optimizer, not stepped).
    /// torch builds schedulers on one optimizer one after another, each
    /// from the lr the one before left; fulmen's constructors wrote their
    /// closed forms, so the groups go back to their `initial_lr` and every
    /// scheduler's first step is replayed in order in its chainable form.
    /// A SequentialLR cannot share an optimizer (its parts step in closed
    /// forms); on an error nothing changes.
    pub fn add_scheduler(&mut self, config: SchedulerConfig) -> Result<()> {
        self.check_added(config.scheduler.as_ref())?;
        let lrs: Vec<f64> = self.optimizer.param_groups().iter().map(|g| g.lr).collect();
        let states: Vec<_> = self.schedulers.iter().map(|s| s.scheduler.state_dict()).collect();
        self.schedulers.push(config);
        let parts = self.schedulers.iter_mut().map(|c| &mut c.scheduler);
        if let Err(e) = crate::optim::scheduler::replay_constructors(self.optimizer.as_mut(), parts) {
            // Put everything back as it was.
            self.schedulers.pop();
            for (s, state) in self.schedulers.iter_mut().zip(&states) {
                let _ = s.scheduler.load_state_dict(state);
            }
            for (g, lr) in self.optimizer.param_groups_mut().iter_mut().zip(lrs) {
                g.lr = lr;
            }
            return Err(e);
        }
        Ok(())
    }
}

/// The user's model logic, as Lightning's `LightningModule`. Every method
/// runs on the thread that called `fit` / `validate` / `test` / `predict`.
pub trait LightningModule {
    /// The model whose parameters are trained (used for train / eval mode).
    fn model(&self) -> Option<SharedModel> {
        None
    }
    /// Computes the loss of one training batch. With automatic
    /// optimization the trainer runs backward and the optimizer steps on
    /// it; `None` is Lightning's `return None` (no backward for the batch,
    /// the step still counts). With it off the step does both through `ctx`
    /// and may return `None`.
    fn training_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>>;
    /// Lightning's `automatic_optimization`: true (the default) lets the
    /// trainer zero, backward, clip and step; false leaves that to
    /// `training_step` (manual optimization).
    fn automatic_optimization(&self) -> bool {
        true
    }
    /// Lightning's optimization hooks the module overrides
    /// (`optimizer_step`, `optimizer_zero_grad`, `lr_scheduler_step`,
    /// `backward`, `configure_gradient_clipping`), used under automatic
    /// optimization; `None` (the default) runs Lightning's defaults. The
    /// hooks are an object of their own because `optimizer_step`'s
    /// closure calls `training_step` while the hook runs.
    fn optimization_hooks(&self) -> Option<Rc<dyn OptimizationHooks>> {
        None
    }
    /// Whether `validation_step` is implemented.
    fn has_validation_step(&self) -> bool {
        false
    }
    /// Evaluates one validation batch (log metrics through `ctx`).
    fn validation_step(&mut self, _ctx: &mut StepContext, _batch: &[Tensor]) -> Result<()> {
        Ok(())
    }
    /// [`LightningModule::validation_step`] with what it returns (the
    /// `outputs` of `on_validation_batch_end`); the default returns none.
    fn validation_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.validation_step(ctx, batch).map(|()| None)
    }
    /// Whether `test_step` is implemented.
    fn has_test_step(&self) -> bool {
        false
    }
    /// Evaluates one test batch.
    fn test_step(&mut self, _ctx: &mut StepContext, _batch: &[Tensor]) -> Result<()> {
        Ok(())
    }
    /// [`LightningModule::test_step`] with what it returns (the `outputs`
    /// of `on_test_batch_end`); the default returns none.
    fn test_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.test_step(ctx, batch).map(|()| None)
    }
    /// Predicts one batch; `None` when the step produced nothing.
    fn predict_step(&mut self, _ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>>;
    /// Creates the optimizers (and schedulers) for `fit`; `setup` says how
    /// long the run will be (for OneCycleLR's `total_steps`). None is
    /// Lightning's `return None`: the fit runs with no optimizer.
    fn configure_optimizers(&mut self, setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>>;
    /// The module's own hooks, called after every callback's
    /// ([`HookContext::skip_rest_of_epoch`] in on_train_batch_start is
    /// Lightning's `return -1`).
    fn on_hook(&mut self, _ctx: &mut HookContext) -> Result<()> {
        Ok(())
    }
    /// Whether the module overrides a LightningModule-only hook
    /// ([`super::Hook::module_only`]): `on_hook` then receives it in place
    /// of fulmen's default (Lightning's `is_overridden`).
    fn overrides(&self, _hook: super::Hook) -> bool {
        false
    }
    /// Whether `configure_model` is implemented.
    fn has_configure_model(&self) -> bool {
        false
    }
    /// Lightning's `configure_model`: builds or changes the model for the
    /// run on `device`, after the setup hook and before
    /// configure_optimizers, in every run.
    fn configure_model(&mut self, _device: crate::tensor::device::Device) -> Result<()> {
        Ok(())
    }
    /// Lightning's `configure_callbacks`: callbacks the module adds to
    /// every run, called when it starts; a trainer callback of the same
    /// name is replaced.
    fn configure_callbacks(&mut self) -> Result<Vec<Box<dyn super::Callback>>> {
        Ok(Vec::new())
    }
    /// Lightning's `prepare_data_per_node`: true (the default) runs the
    /// module's `prepare_data` ([`super::Hook::PrepareData`]) on local
    /// rank 0 of every node, false on global rank 0 only.
    fn prepare_data_per_node(&self) -> bool {
        true
    }
    /// Hyperparameters saved in checkpoints and given to the loggers
    /// (Lightning's `save_hyperparameters`).
    fn hparams(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// Whether `train_dataloader` is implemented.
    fn has_train_dataloader(&self) -> bool {
        false
    }
    /// Lightning's `train_dataloader()`: the training data of a fit given
    /// none, for `epoch` (called at its start, and again every
    /// `reload_dataloaders_every_n_epochs` epochs).
    fn train_dataloader(&mut self, _epoch: i64) -> Result<Box<dyn BatchSource + Send>> {
        Err(Error::state("the module has no train_dataloader"))
    }
    /// Whether `val_dataloader` is implemented.
    fn has_val_dataloader(&self) -> bool {
        false
    }
    /// Lightning's `val_dataloader()`: the validation loaders of a fit
    /// given none, for `epoch` (none: no validation).
    fn val_dataloader(&mut self, _epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
        Err(Error::state("the module has no val_dataloader"))
    }
    /// Whether `test_dataloader` is implemented.
    fn has_test_dataloader(&self) -> bool {
        false
    }
    /// Lightning's `test_dataloader()`: the loaders of a test given none
    /// (`epoch`: the trainer's current epoch).
    fn test_dataloader(&mut self, _epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
        Err(Error::state("the module has no test_dataloader"))
    }
    /// Whether `predict_dataloader` is implemented.
    fn has_predict_dataloader(&self) -> bool {
        false
    }
    /// Lightning's `predict_dataloader()`: the loaders of a predict given
    /// none.
    fn predict_dataloader(&mut self, _epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
        Err(Error::state("the module has no predict_dataloader"))
    }
    /// The datamodule the run was given (Lightning's `trainer.datamodule`),
    /// whose state goes into the run's checkpoints.
    fn datamodule(&mut self) -> Option<&mut dyn super::datamodule::DataModule> {
        None
    }
}
