//! Lightning's LightningDataModule: the data of a run apart from the
//! module (`prepare_data`, `setup` / `teardown` per stage, the
//! dataloaders, a state saved in checkpoints), and the trainer's entry
//! points that take one.
use super::context::StepContext;
use super::hooks::HookContext;
use super::module::{LightningModule, OptimizerConfig, OptimizerSetup, SharedModel};
use super::optimization::OptimizationHooks;
use super::run::Run;
use super::source::BatchSource;
use super::Trainer;
use super::{Callback, Hook};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::tensor::device::Device;
use std::collections::BTreeMap;
use std::rc::Rc;
use tch::Tensor;

/// Evaluation loaders a hook gives.
pub type Loaders = Vec<Box<dyn BatchSource + Send>>;

/// The host's data, as Lightning's `LightningDataModule`. Every method
/// runs on the thread that called the run.
pub trait DataModule {
    /// The key of its state in checkpoints (Lightning's
    /// `datamodule.__class__.__qualname__`).
    fn name(&self) -> &str;
    /// Downloads or writes what every process then reads; called on
    /// local rank 0 of each node, or on global rank 0 only when
    /// [`DataModule::prepare_data_per_node`] is false.
    fn prepare_data(&mut self) -> Result<()>;
    /// Lightning's `prepare_data_per_node` (default true).
    fn prepare_data_per_node(&self) -> bool {
        true
    }
    /// Lightning's `setup(stage)`: "fit", "validate", "test" or "predict".
    fn setup(&mut self, stage: &'static str) -> Result<()>;
    /// Lightning's `teardown(stage)`.
    fn teardown(&mut self, stage: &'static str) -> Result<()>;
    /// Whether `train_dataloader` is implemented.
    fn has_train_dataloader(&self) -> bool;
    /// The training data for `epoch`.
    fn train_dataloader(&mut self, epoch: i64) -> Result<Box<dyn BatchSource + Send>>;
    /// Whether `val_dataloader` is implemented.
    fn has_val_dataloader(&self) -> bool;
    /// The validation loaders for `epoch` (none: no validation).
    fn val_dataloader(&mut self, epoch: i64) -> Result<Loaders>;
    /// Whether `test_dataloader` is implemented.
    fn has_test_dataloader(&self) -> bool;
    /// The test loaders.
    fn test_dataloader(&mut self, epoch: i64) -> Result<Loaders>;
    /// Whether `predict_dataloader` is implemented.
    fn has_predict_dataloader(&self) -> bool;
    /// The predict loaders.
    fn predict_dataloader(&mut self, epoch: i64) -> Result<Loaders>;
    /// Lightning's `state_dict()` as bytes; empty: nothing to save.
    fn state_dict(&mut self) -> Result<Vec<u8>>;
    /// Lightning's `load_state_dict`, with the bytes `state_dict` gave.
    fn load_state_dict(&mut self, state: &[u8]) -> Result<()>;
}

/// A datamodule that remembers the stage it was set up for, so that a
/// failed run still tears it down once.
struct Tracked<'m> {
    dm: &'m mut dyn DataModule,
    set_up: Option<&'static str>,
}

impl DataModule for Tracked<'_> {
    fn name(&self) -> &str {
        self.dm.name()
    }
    fn prepare_data(&mut self) -> Result<()> {
        self.dm.prepare_data()
    }
    fn prepare_data_per_node(&self) -> bool {
        self.dm.prepare_data_per_node()
    }
    fn setup(&mut self, stage: &'static str) -> Result<()> {
        self.dm.setup(stage)?;
        self.set_up = Some(stage);
        Ok(())
    }
    fn teardown(&mut self, stage: &'static str) -> Result<()> {
        self.set_up = None;
        self.dm.teardown(stage)
    }
    fn has_train_dataloader(&self) -> bool {
        self.dm.has_train_dataloader()
    }
    fn train_dataloader(&mut self, epoch: i64) -> Result<Box<dyn BatchSource + Send>> {
        self.dm.train_dataloader(epoch)
    }
    fn has_val_dataloader(&self) -> bool {
        self.dm.has_val_dataloader()
    }
    fn val_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        self.dm.val_dataloader(epoch)
    }
    fn has_test_dataloader(&self) -> bool {
        self.dm.has_test_dataloader()
    }
    fn test_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        self.dm.test_dataloader(epoch)
    }
    fn has_predict_dataloader(&self) -> bool {
        self.dm.has_predict_dataloader()
    }
    fn predict_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        self.dm.predict_dataloader(epoch)
    }
    fn state_dict(&mut self) -> Result<Vec<u8>> {
        self.dm.state_dict()
    }
    fn load_state_dict(&mut self, state: &[u8]) -> Result<()> {
        self.dm.load_state_dict(state)
    }
}

/// A module run with a datamodule: the module's steps and hooks, the
/// datamodule's dataloaders where it has them (the module's otherwise, as
/// Lightning takes a datamodule's data first). Every LightningModule method
/// is forwarded.
struct WithDataModule<'m> {
    module: &'m mut dyn LightningModule,
    dm: Tracked<'m>,
}

impl<'m> WithDataModule<'m> {
    fn new(module: &'m mut dyn LightningModule, dm: &'m mut dyn DataModule) -> Self {
        WithDataModule { module, dm: Tracked { dm, set_up: None } }
    }

    /// The run's result, after tearing the datamodule down when the run
    /// set it up and did not get to its teardown (it failed): the run's
    /// error stays the one reported, a failing teardown's attached.
    fn finish<T>(mut self, result: Result<T>) -> Result<T> {
        let Some(stage) = self.dm.set_up else { return result };
        let torn = self.dm.teardown(stage).ctx(format!("LightningDataModule.teardown({stage})"));
        match (result, torn) {
            (Ok(v), Ok(())) => Ok(v),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), Ok(())) => Err(e),
            (Err(e), Err(later)) => Err(e.then_failed("LightningDataModule.teardown", &later)),
        }
    }
}

impl LightningModule for WithDataModule<'_> {
    fn model(&self) -> Option<SharedModel> {
        self.module.model()
    }
    fn training_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.module.training_step(ctx, batch)
    }
    fn automatic_optimization(&self) -> bool {
        self.module.automatic_optimization()
    }
    fn optimization_hooks(&self) -> Option<Rc<dyn OptimizationHooks>> {
        self.module.optimization_hooks()
    }
    fn has_validation_step(&self) -> bool {
        self.module.has_validation_step()
    }
    fn validation_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<()> {
        self.module.validation_step(ctx, batch)
    }
    fn validation_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.module.validation_step_output(ctx, batch)
    }
    fn has_test_step(&self) -> bool {
        self.module.has_test_step()
    }
    fn test_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<()> {
        self.module.test_step(ctx, batch)
    }
    fn test_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.module.test_step_output(ctx, batch)
    }
    fn predict_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.module.predict_step(ctx, batch)
    }
    fn configure_optimizers(&mut self, setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>> {
        self.module.configure_optimizers(setup)
    }
    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        self.module.on_hook(ctx)
    }
    fn overrides(&self, hook: Hook) -> bool {
        self.module.overrides(hook)
    }
    fn has_configure_model(&self) -> bool {
        self.module.has_configure_model()
    }
    fn configure_model(&mut self, device: Device) -> Result<()> {
        self.module.configure_model(device)
    }
    fn configure_callbacks(&mut self) -> Result<Vec<Box<dyn Callback>>> {
        self.module.configure_callbacks()
    }
    fn prepare_data_per_node(&self) -> bool {
        self.module.prepare_data_per_node()
    }
    fn hparams(&self) -> BTreeMap<String, String> {
        self.module.hparams()
    }
    fn has_train_dataloader(&self) -> bool {
        self.dm.has_train_dataloader() || self.module.has_train_dataloader()
    }
    fn train_dataloader(&mut self, epoch: i64) -> Result<Box<dyn BatchSource + Send>> {
        if self.dm.has_train_dataloader() {
            return self.dm.train_dataloader(epoch).ctx("LightningDataModule.train_dataloader");
        }
        self.module.train_dataloader(epoch)
    }
    fn has_val_dataloader(&self) -> bool {
        self.dm.has_val_dataloader() || self.module.has_val_dataloader()
    }
    fn val_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        if self.dm.has_val_dataloader() {
            return self.dm.val_dataloader(epoch).ctx("LightningDataModule.val_dataloader");
        }
        self.module.val_dataloader(epoch)
    }
    fn has_test_dataloader(&self) -> bool {
        self.dm.has_test_dataloader() || self.module.has_test_dataloader()
    }
    fn test_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        if self.dm.has_test_dataloader() {
            return self.dm.test_dataloader(epoch).ctx("LightningDataModule.test_dataloader");
        }
        self.module.test_dataloader(epoch)
    }
    fn has_predict_dataloader(&self) -> bool {
        self.dm.has_predict_dataloader() || self.module.has_predict_dataloader()
    }
    fn predict_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        if self.dm.has_predict_dataloader() {
            return self.dm.predict_dataloader(epoch).ctx("LightningDataModule.predict_dataloader");
        }
        self.module.predict_dataloader(epoch)
    }
    fn datamodule(&mut self) -> Option<&mut dyn DataModule> {
        Some(&mut self.dm)
    }
}

/// Lightning's `prepare_data` (the datamodule's, then the module's where
/// it overrides it: each on local rank 0 of every node, or on global rank
/// 0 where its `prepare_data_per_node` is false; the other ranks wait for
/// them) and the datamodule's `setup(stage)`, before the callbacks' and
/// the module's setup hooks.
pub(super) fn prepare_and_setup(run: &mut Run) -> Result<()> {
    let stage = run.stage;
    let local_zero = run.strategy.local_rank() == 0;
    let global_zero = local_zero && run.strategy.node_rank() == 0;
    // Every rank knows alike whether anything prepares: only then do they
    // meet.
    let anything = run.module.datamodule().is_some() || run.module.overrides(Hook::PrepareData);
    let distributed = run.strategy.world_size() > 1 && anything;
    let prepares = |per_node: bool| if per_node { local_zero } else { global_zero };
    let mut prepared = match run.module.datamodule() {
        Some(dm) if prepares(dm.prepare_data_per_node()) => dm.prepare_data().ctx("LightningDataModule.prepare_data"),
        _ => Ok(()),
    };
    if prepared.is_ok() && run.module.overrides(Hook::PrepareData) && prepares(run.module.prepare_data_per_node()) {
        prepared = run.module_prepare_data();
    }
    if distributed {
        // The other ranks wait for it and learn whether it failed anywhere,
        // so a failure never leaves them waiting until the job's timeout;
        // the failed rank's reason reaches them through the job's store.
        let job = crate::distributed::current();
        if let (Err(e), Some(job)) = (&prepared, &job) {
            job.group.report_failure(&e.message);
        }
        let failed = run.strategy.any(prepared.is_err()).ctx("waiting for prepare_data on another rank")?;
        if prepared.is_ok() && failed {
            let why = job.and_then(|j| j.group.first_failure());
            return Err(Error::new(
                ErrorCode::Callback,
                match why {
                    Some(why) => format!("prepare_data failed on another rank: {why}"),
                    None => "prepare_data failed on another rank (its error is in that rank's output)".into(),
                },
            ));
        }
    }
    prepared?;
    let Some(dm) = run.module.datamodule() else { return Ok(()) };
    dm.setup(stage).ctx(format!("LightningDataModule.setup({stage})"))
}

/// The datamodule's `teardown(stage)`, before the callbacks' and the
/// module's teardown hooks.
pub(super) fn teardown(run: &mut Run) -> Result<()> {
    let stage = run.stage;
    match run.module.datamodule() {
        Some(dm) => dm.teardown(stage).ctx(format!("LightningDataModule.teardown({stage})")),
        None => Ok(()),
    }
}

/// The datamodule's state for a checkpoint: its name and bytes, `None`
/// without a datamodule or when its state is empty (Lightning saves none
/// then). A state over [`crate::checkpoint::MAX_DATAMODULE_STATE`] bytes
/// is refused.
pub(super) fn state_for_checkpoint(module: &mut dyn LightningModule) -> Result<Option<(String, Vec<u8>)>> {
    let Some(dm) = module.datamodule() else { return Ok(None) };
    let state = dm.state_dict().ctx("LightningDataModule.state_dict")?;
    let max = crate::checkpoint::MAX_DATAMODULE_STATE;
    if state.len() > max {
        return Err(Error::invalid(format!(
            "LightningDataModule.state_dict gave {} bytes; a checkpoint holds at most {max}",
            state.len()
        )));
    }
    Ok((!state.is_empty()).then(|| (dm.name().to_string(), state)))
}

/// Gives the datamodule the state `ck` holds under its name, if any
/// (Lightning's `restore_datamodule`).
pub(super) fn restore(module: &mut dyn LightningModule, ck: &Checkpoint) -> Result<()> {
    let Some(dm) = module.datamodule() else { return Ok(()) };
    match ck.datamodule_states.get(dm.name()) {
        Some(state) => dm.load_state_dict(state).ctx("LightningDataModule.load_state_dict"),
        None => Ok(()),
    }
}

impl Trainer {
    /// Lightning's `trainer.fit(model, datamodule=dm)`: `prepare_data`,
    /// `setup("fit")`, the datamodule's train / val dataloaders (the
    /// module's where it has none) as for a fit given no loaders, and
    /// `teardown("fit")`, also when the fit fails.
    pub fn fit_datamodule(
        &mut self,
        module: &mut dyn LightningModule,
        dm: &mut dyn DataModule,
        ckpt_path: Option<&str>,
    ) -> Result<()> {
        let mut both = WithDataModule::new(module, dm);
        let result = self.fit_data(&mut both, None, None, ckpt_path);
        both.finish(result)
    }

    /// Lightning's `trainer.validate(model, datamodule=dm)`.
    pub fn validate_datamodule(
        &mut self,
        module: &mut dyn LightningModule,
        dm: &mut dyn DataModule,
        ckpt_path: Option<&str>,
    ) -> Result<super::eval::EvalResults> {
        let mut both = WithDataModule::new(module, dm);
        let result = self.validate_from_module(&mut both, ckpt_path);
        both.finish(result)
    }

    /// Lightning's `trainer.test(model, datamodule=dm)`.
    pub fn test_datamodule(
        &mut self,
        module: &mut dyn LightningModule,
        dm: &mut dyn DataModule,
        ckpt_path: Option<&str>,
    ) -> Result<super::eval::EvalResults> {
        let mut both = WithDataModule::new(module, dm);
        let result = self.test_from_module(&mut both, ckpt_path);
        both.finish(result)
    }

    /// Lightning's `trainer.predict(model, datamodule=dm)`: one
    /// concatenated output per loader.
    pub fn predict_datamodule(
        &mut self,
        module: &mut dyn LightningModule,
        dm: &mut dyn DataModule,
        ckpt_path: Option<&str>,
    ) -> Result<Vec<Option<Tensor>>> {
        let mut both = WithDataModule::new(module, dm);
        let result = self.predict_from_module(&mut both, ckpt_path);
        both.finish(result)
    }
}
