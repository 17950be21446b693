//! Gathering a checkpoint from a fit's parts and writing it: from a running
//! fit ([`super::run::Run::save_checkpoint`], what ModelCheckpoint and the
//! hooks request) or from what the last fit left on the trainer
//! ([`super::Trainer::save_checkpoint`], Lightning's
//! `trainer.save_checkpoint` after a run).
use super::hooks::{Callback, Hook, HookContext, TrainerState};
use super::loop_progress::{FitProgress, SavedAt};
use super::module::{LightningModule, OptimizerConfig};
use super::run::{unique_name, MODULE_KEY};
use crate::checkpoint::{Checkpoint, LoopInfo};
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use std::collections::BTreeMap;
use tch::Tensor;

/// The strategy's part of a full checkpoint: the root device's generator
/// and the precision plugin's state.
pub(crate) struct DeviceState {
    /// The device the run trained on.
    pub device: Device,
    /// Its generator's state (`None` on the CPU, whose generator the
    /// checkpoint holds anyway).
    pub rng: Option<Tensor>,
    /// The precision plugin's state (the 16-mixed scaler's; empty for
    /// other precisions).
    pub precision: Vec<(String, f64)>,
}

/// An optimizer's state as a checkpoint holds it (the strategy's view).
pub(crate) type OptimizerStateFn<'a> = dyn Fn(&dyn crate::optim::Optimizer) -> Result<Vec<(String, Tensor)>> + 'a;

/// Everything a checkpoint is gathered from.
pub(crate) struct CheckpointParts<'s, 'c> {
    /// The stage the save hooks see ("fit", ...).
    pub stage: &'static str,
    /// The trainer state (epoch, steps; the hooks' context).
    pub state: &'s mut TrainerState,
    /// The callbacks, in the fit's order (their states and save hooks).
    pub callbacks: &'s mut [&'c mut Box<dyn Callback>],
    /// The module (weights, hparams, its save hook).
    pub module: &'s mut dyn LightningModule,
    /// The optimizers with their schedulers (the save hooks reach them,
    /// Lightning's `trainer.optimizers`).
    pub optimizers: &'s mut [OptimizerConfig],
    /// The fit loop's progress.
    pub progress: &'s FitProgress,
    /// How the fit counts batches.
    pub loop_info: LoopInfo,
    /// An optimizer's state as the checkpoint holds it (the strategy's).
    pub optimizer_state: &'s OptimizerStateFn<'s>,
}

/// How the fit described by `state` counts batches.
pub(crate) fn loop_info(state: &TrainerState) -> LoopInfo {
    LoopInfo {
        num_train_batches: state.num_train_batches.map_or(0, |n| n as i64),
        accumulate_grad_batches: state.accumulate_grad_batches,
        manual_optimization: state.manual_optimization,
    }
}

/// Whether `progress` stands between two epochs with `epoch` the next one
/// (a fit that ended, or its `on_train_end` / `on_fit_end` hooks): the
/// batch counts are the finished epoch's, and a resume starts `epoch` from
/// its first batch, as Lightning reads such loops.
pub(crate) fn between_epochs(progress: &FitProgress, epoch: i64) -> bool {
    progress.saved_at() == SavedAt::EpochStart && progress.epoch.current.completed == epoch
}

/// Gathers the training state into a checkpoint (the weights and the loop
/// progress alone when `weights_only`), not written; `device` gives the
/// strategy's part of a full one, read after the callbacks' and the
/// module's `on_save_checkpoint` hooks.
pub(crate) fn build_checkpoint(
    parts: CheckpointParts<'_, '_>,
    device: impl FnOnce() -> Result<DeviceState>,
    weights_only: bool,
) -> Result<Checkpoint> {
    let CheckpointParts { stage, state, callbacks, module, optimizers, progress: p, loop_info, optimizer_state } =
        parts;
    let model = module.model().ok_or_else(|| {
        Error::state(
            "cannot save a checkpoint: the LightningModule has no model (pass one to fulmen_lightning_module_new)",
        )
    })?;
    let state_dict = model.lock().unwrap_or_else(|p| p.into_inner()).state_dict();
    let between = between_epochs(p, state.epoch);
    let mut ck = Checkpoint {
        epoch: state.epoch,
        global_step: state.global_step,
        batches_stepped: state.batches_stepped,
        batches_in_epoch: if between { 0 } else { p.batches_in_epoch() },
        epoch_finished: !between && p.epoch_batches_done(),
        scheduler_steps: (p.scheduler.total.completed, p.scheduler.current.completed),
        extra_zero_grads: p.extra_zero_grads(),
        val_batches: (p.val_batch.progress.total.processed, p.val_batch.progress.current.processed),
        progress: Some(*p),
        state_dict,
        hparams: module.hparams(),
        weights_only,
        loop_info,
        ..Default::default()
    };
    // Lightning's `checkpoint[datamodule.__class__.__qualname__]`, in
    // weights-only checkpoints too.
    if let Some((name, bytes)) = super::datamodule::state_for_checkpoint(&mut *module)? {
        ck.datamodule_states.insert(name, bytes);
    }
    if !weights_only {
        add_training_state(&mut ck, stage, state, callbacks, module, optimizers, optimizer_state)?;
        ck.rng_state = Some(crate::tensor::runtime::cpu_rng_state()?);
        // The device's generator: CUDA's where Lightning keeps it, any
        // other device type's beside it.
        let d = device()?;
        match d.device {
            Device::Cuda(_) => ck.cuda_rng_state = d.rng,
            _ => ck.device_rng_state = d.rng,
        }
        ck.precision_state = d.precision;
    }
    Ok(ck)
}

/// Adds the optimizer and scheduler states, the callbacks' states and the
/// entries of every `on_save_checkpoint` hook (each callback's, then the
/// module's) to `ck`.
fn add_training_state(
    ck: &mut Checkpoint,
    stage: &'static str,
    state: &mut TrainerState,
    callbacks: &mut [&mut Box<dyn Callback>],
    module: &mut dyn LightningModule,
    optimizers: &mut [OptimizerConfig],
    optimizer_state: &OptimizerStateFn<'_>,
) -> Result<()> {
    for (i, cfg) in optimizers.iter().enumerate() {
        ck.optimizer_kinds.push(cfg.optimizer.name().to_string());
        ck.optimizer_states.push(optimizer_state(cfg.optimizer.as_ref())?);
        for s in &cfg.schedulers {
            ck.scheduler_states.push(s.scheduler.state_dict());
            ck.scheduler_owners.push(i);
        }
    }
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for cb in callbacks.iter() {
        let key = unique_name(&mut names, cb.name());
        if let Some(lightning_key) = cb.lightning_state_key() {
            ck.lightning_keys.insert(key.clone(), lightning_key);
        }
        ck.callbacks.insert(key, cb.state_dict());
    }
    // Each callback (and the module) gets its own entries.
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for cb in callbacks.iter_mut() {
        let key = unique_name(&mut names, cb.name());
        let mut entries = BTreeMap::new();
        let mut ctx = HookContext::new(Hook::SaveCheckpoint, stage, &mut *state);
        ctx.checkpoint = Some(&mut entries);
        ctx.optimizers = Some(&mut *optimizers);
        cb.on_hook(&mut ctx).map_err(|e| e.context(format!("callback {key} in on_save_checkpoint")))?;
        if !entries.is_empty() {
            ck.extra.insert(key, entries);
        }
    }
    let mut entries = BTreeMap::new();
    let mut ctx = HookContext::new(Hook::SaveCheckpoint, stage, &mut *state);
    ctx.checkpoint = Some(&mut entries);
    ctx.optimizers = Some(&mut *optimizers);
    module.on_hook(&mut ctx).map_err(|e| e.context("LightningModule.on_save_checkpoint"))?;
    if !entries.is_empty() {
        ck.extra.insert(MODULE_KEY.to_string(), entries);
    }
    for cb in callbacks.iter_mut() {
        cb.on_save_tensors(ck).map_err(|e| e.context(format!("callback {} saving tensors", cb.name())))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "save_tests.rs"]
pub(super) mod tests;
