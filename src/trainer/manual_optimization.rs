//! Manual optimization (Lightning's `_ManualOptimization`): the training
//! step runs once per batch with the run's optimizers in its context.
use super::batch_size_of;
use super::context::{Stage, StepContext};
use super::manual::ManualOptimization;
use super::metrics::MetricStore;
use super::run::Run;
use crate::error::{Error, ErrorCode, Result};
use tch::Tensor;

/// Checks what a manual training step returned (shown as the running
/// loss): one floating element.
pub(super) fn check_returned(loss: &Tensor, at: &dyn Fn() -> String) -> Result<()> {
    if loss.numel() != 1 || !crate::tensor::dtype::is_floating(loss.f_kind()?) {
        return Err(Error::shape(format!(
            "{}: a returned loss must be a one-element floating tensor, got {:?} of shape {:?}",
            at(),
            loss.kind(),
            loss.size()
        )));
    }
    Ok(())
}

/// One training batch under manual optimization: the step runs once (no
/// DP split, no accumulation) with the run's optimizers in its context.
/// Returns what it returned; `global_step` counts its optimizer steps.
pub(super) fn manual_training_step(
    run: &mut Run,
    store: &mut MetricStore,
    batch: &[Tensor],
    batch_idx: i64,
    toggled: &mut Vec<(Tensor, bool)>,
    at: &dyn Fn() -> String,
) -> Result<Option<Tensor>> {
    run.strategy.pre_forward(true)?;
    let autocast = run.strategy.forward_context()?;
    let (epoch, global_step) = (run.state.epoch, run.state.global_step);
    let mut manual = ManualOptimization {
        callbacks: &mut run.callbacks,
        state: &mut *run.state,
        optimizers: &mut run.optimizers,
        strategy: &mut run.strategy,
        stage: run.stage,
        batch_idx,
        toggled,
        lr_changed: false,
        stepping: None,
    };
    store.begin_split();
    let mut ctx = StepContext {
        stage: Stage::Train,
        epoch,
        global_step,
        batch_idx,
        batch_size: batch_size_of(batch),
        dataloader_idx: None,
        metrics: &mut *store,
        manual: Some(&mut manual),
        extra_outputs: Default::default(),
    };
    let out = run.module.training_step(&mut ctx, batch).map_err(|e| e.context(at()));
    let lr_changed = manual.lr_changed;
    store.end_split();
    drop(autocast);
    if lr_changed {
        run.refresh_learning_rates();
    }
    let out = out?;
    store.sync_step(&|v, op, g| run.strategy.reduce_in(v, op, g))?;
    Ok(out)
}

/// Refuses what Lightning refuses with manual optimization.
pub(super) fn check_manual(opts: &super::TrainerOptions, run: &Run) -> Result<()> {
    if opts.accumulate_grad_batches > 1 {
        return Err(Error::invalid(
            "automatic gradient accumulation is not supported with manual optimization: accumulate in \
             training_step (step the optimizer every N batches) and set accumulate_grad_batches to 1",
        ));
    }
    if opts.gradient_clip_val.is_some() {
        return Err(Error::invalid(
            "automatic gradient clipping is not supported with manual optimization: clip in training_step \
             and leave gradient_clip_val unset",
        ));
    }
    if run.strategy.is_data_parallel() {
        return Err(Error::new(
            ErrorCode::Unsupported,
            "manual optimization does not run under strategy \"dp\": use ddp or one device",
        ));
    }
    Ok(())
}
