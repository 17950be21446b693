//! Automatic optimization (Lightning's `_AutomaticOptimization`): a
//! training batch's closure (step, zero_grad, backward with their hooks)
//! and the optimizer steps, LBFGS's closure included.
use super::batch_size_of;
use super::context::{Stage, StepContext};
use super::hooks::Hook;
use super::metrics::MetricStore;
use super::optimization::{self, ClosureArgs, OptimizationContext};
use super::run::{HookData, Run};
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::deferred::{defer, deferring, CheckKind};
use crate::tensor::device::Device;
use tch::Tensor;

/// A loss found not finite in a training loop on an accelerator.
const NONFINITE_LOSS: CheckKind = CheckKind {
    code: ErrorCode::NonFinite,
    what: "the loss was not finite (detect_nonfinite_loss; on an accelerator it is checked without waiting for the \
           device, so updates were made)",
};

/// The value of a one-element loss (the host waits for its device).
pub(super) fn loss_value(loss: &Tensor) -> Result<f64> {
    Ok(loss.f_double_value(&vec![0; loss.dim()])?)
}

/// Checks the value a training_step returned before it is used. With
/// `detect_nonfinite` a loss on the CPU is read and refused before any
/// update; on an accelerator reading it would make every step wait for the
/// device, so it is checked there and read with the trainer's other values
/// ([`crate::tensor::deferred`]).
fn check_loss(loss: &Tensor, detect_nonfinite: bool, at: &dyn Fn() -> String) -> Result<()> {
    if loss.numel() != 1 {
        return Err(Error::shape(format!("{}: the loss must have one element, got shape {:?}", at(), loss.size())));
    }
    if !crate::tensor::dtype::is_floating(loss.f_kind()?) {
        return Err(Error::dtype(format!("{}: the loss must be floating, got {:?}", at(), loss.kind())));
    }
    if !loss.requires_grad() {
        return Err(Error::state(format!(
            "{}: the loss does not require grad (was it computed from the model's parameters?)",
            at()
        )));
    }
    if !detect_nonfinite {
        return Ok(());
    }
    if deferring(loss) {
        let _guard = tch::no_grad_guard();
        return defer(NONFINITE_LOSS, &loss.f_isfinite()?.f_logical_not()?);
    }
    refuse_nonfinite(loss_value(loss)?, at)
}

/// Refuses a loss value that is NaN or infinite, before any update.
fn refuse_nonfinite(value: f64, at: &dyn Fn() -> String) -> Result<()> {
    if !value.is_finite() {
        return Err(Error::new(ErrorCode::NonFinite, format!("{}: the loss is {value}; no update was made", at())));
    }
    Ok(())
}

/// The training batch an optimization step works on, and where it is.
pub(super) struct TrainBatch<'a> {
    /// The batch's tensors.
    pub tensors: &'a [Tensor],
    /// Its index in the epoch.
    pub index: usize,
    /// Whether it starts an accumulation window (`zero_grad` runs first).
    pub first_of_window: bool,
    /// Where it is, for error messages.
    pub at: &'a dyn Fn() -> String,
}

/// One training batch under automatic optimization (Lightning's
/// `_AutomaticOptimization`): the closure ([`forward_backward`]) and, when
/// `stepped`, unscale, the hook, clipping and every optimizer's step; an
/// optimizer that re-evaluates the loss (LBFGS) runs the closure itself
/// ([`closure_step`]). Returns the loss and its value (the last
/// evaluation's), `None` when training_step returned no loss (the step
/// still counts); `global_step` is the caller's to count.
pub(super) fn automatic_step(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &TrainBatch,
    stepped: bool,
) -> Result<Option<Tensor>> {
    if stepped {
        run.progress.optimizer.step.increment_ready();
    }
    let out = if stepped && run.optimizers.iter().any(|c| c.optimizer.needs_closure()) {
        Some(closure_step(run, opts, store, batch)?)
    } else if run.opt_hooks.is_some() && run.optimizers.len() == 1 {
        custom_step(run, opts, store, batch, stepped)?
    } else {
        plain_step(run, opts, store, batch, stepped)?
    };
    if stepped {
        run.progress.optimizer.step.increment_completed();
    }
    Ok(out)
}

/// A batch whose optimizers step without re-evaluating the loss: the
/// closure, then (when `stepped`) unscale, the hook, clipping and the steps.
/// As Lightning's precision plugins, a batch whose training_step returned
/// no loss still gets the hook, clipping and the steps (of the gradients
/// earlier batches of the window left; none on a window's first batch),
/// but under `16-mixed` neither unscale nor step nor a scale update. With
/// no optimizer (configure_optimizers added none) nothing steps.
fn plain_step(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &TrainBatch,
    stepped: bool,
) -> Result<Option<Tensor>> {
    let at = batch.at;
    let zero_grad = &mut |run: &mut Run| -> Result<()> { optimization::zero_all(run) };
    let out = forward_backward(run, opts, store, batch, stepped, zero_grad)?;
    if stepped {
        // Lightning's precision.optimizer_step: unscale, the hook and
        // clipping on true gradients, then the steps and the scale.
        let started = run.profile_start();
        let scaled_without_loss = out.is_none() && run.strategy.precision().has_scaler();
        if !scaled_without_loss {
            run.strategy.unscale_gradients(&mut run.optimizers)?;
        }
        let first = (!run.optimizers.is_empty()).then_some(0);
        optimizer_hook(run, Hook::BeforeOptimizerStep, first)?;
        if let Some(v) = opts.gradient_clip_val {
            run.strategy.clip_gradients(&mut run.optimizers, v, opts.gradient_clip_algorithm)?;
        }
        if !scaled_without_loss && !run.optimizers.is_empty() {
            run.strategy.optimizer_step(&mut run.optimizers).map_err(|e| e.context(at()))?;
        }
        run.profile_stop("[Strategy].optimizer_step", started, Default::default());
    }
    Ok(out)
}

/// A batch of a module with optimization hooks (one optimizer): a batch
/// that steps goes to its `optimizer_step`, which must run the closure
/// (Lightning's "the closure hasn't been executed" otherwise); one inside
/// an accumulation window runs the closure alone. In the closure,
/// `optimizer_zero_grad` and `backward` are the module's.
fn custom_step(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &TrainBatch,
    stepped: bool,
) -> Result<Option<Tensor>> {
    let at = batch.at;
    let hooks = run.opt_hooks.clone().ok_or_else(|| Error::state("the module has no optimization hooks"))?;
    let (epoch, i) = (run.state.epoch, batch.index as i64);
    let mut ctx = OptimizationContext::for_closure(run, ClosureArgs { opts, store, batch, stepped });
    let done = if stepped { hooks.optimizer_step(&mut ctx, epoch, i, 0) } else { ctx.run_closure().map(|_| ()) };
    let (out, evaluations) = ctx.finish();
    done?;
    if evaluations == 0 {
        return Err(Error::new(
            ErrorCode::Callback,
            format!(
                "{}: optimizer_step did not run the closure: it must run it (alone, or by stepping with it), as it \
                 holds training_step, zero_grad and backward",
                at()
            ),
        ));
    }
    Ok(out)
}

/// Lightning's closure of a batch of a module with optimization hooks
/// (one optimizer): training_step, the module's `optimizer_zero_grad` at
/// the start of an accumulation window, and its `backward`.
pub(super) fn custom_closure(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &TrainBatch,
    stepped: bool,
) -> Result<Option<Tensor>> {
    let i = batch.index as i64;
    let zero_grad = &mut |run: &mut Run| -> Result<()> { optimization::zero_grad_hook(run, 0, i) };
    forward_backward(run, opts, store, batch, stepped, zero_grad)
}

/// The loss of a batch from what training_step returned for each of its
/// chunks (one, or one per `dp` replica): `None` when it returned none;
/// refused under DDP (Lightning's text) and when only some chunks have one.
fn batch_loss(run: &Run, losses: Vec<Option<Tensor>>, at: &dyn Fn() -> String) -> Result<Option<Tensor>> {
    let given = losses.iter().filter(|l| l.is_some()).count();
    if given == losses.len() && given > 0 {
        return Ok(Some(run.strategy.gather_loss(losses.into_iter().flatten().collect())?));
    }
    if given > 0 {
        return Err(Error::new(
            ErrorCode::Callback,
            format!(
                "{}: training_step returned a loss for {given} of the batch's {} dp chunks: return one for all or \
                 for none",
                at(),
                losses.len()
            ),
        ));
    }
    if run.strategy.world_size() > 1 {
        return Err(Error::unsupported(format!(
            "{}: Skipping the `training_step` by returning None in distributed training is not supported. It is \
             recommended that you rewrite your training logic to avoid having to skip the step in the first place.",
            at()
        )));
    }
    Ok(None)
}

/// Lightning's closure of a training batch: the step (split over DP
/// replicas), `zero_grad` at the start of an accumulation window, and
/// backward of the loss divided by `accumulate_grad_batches`, with their
/// hooks. Returns the loss and its value; `None` when training_step
/// returned no loss (Lightning's `return None`: warned about once per run,
/// `zero_grad` still runs, backward and its hooks do not).
fn forward_backward(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    train: &TrainBatch,
    stepped: bool,
    zero_grad: &mut dyn FnMut(&mut Run) -> Result<()>,
) -> Result<Option<Tensor>> {
    let (batch, i, at) = (train.tensors, train.index, train.at);
    let acc = run.state.accumulate_grad_batches.max(1);
    let (epoch, step_now) = (run.state.epoch, run.state.global_step);
    run.strategy.pre_forward(stepped)?;
    let autocast = run.strategy.forward_context()?;
    let started = run.profile_start();
    let module = &mut *run.module;
    store.begin_split();
    let losses = run.strategy.split(batch, &mut |chunk| {
        let mut ctx = StepContext {
            stage: Stage::Train,
            epoch,
            global_step: step_now,
            batch_idx: i as i64,
            batch_size: batch_size_of(chunk),
            dataloader_idx: None,
            metrics: &mut *store,
            manual: None,
            extra_outputs: Default::default(),
        };
        module.training_step(&mut ctx, chunk).map_err(|e| e.context(at()))
    });
    store.end_split();
    drop(autocast);
    run.profile_stop("[Strategy].training_step", started, Default::default());
    let loss = batch_loss(run, losses?, at)?;
    store.sync_step(&|v, op, g| run.strategy.reduce_in(v, op, g))?;
    let Some(loss) = loss else {
        run.warn_once(
            "no loss",
            "`training_step` returned no loss (`None`): the batch is skipped (no backward). If this was on \
             purpose, ignore this warning...",
        );
        if !run.state.skip_backward && train.first_of_window {
            zero_grad_window(run, i, acc, zero_grad)?;
        }
        return Ok(None);
    };
    check_loss(&loss, opts.detect_nonfinite_loss, at)?;
    if run.state.skip_backward {
        // DDP learns that this forward has no backward to sync.
        run.strategy.post_forward(&loss)?;
        return Ok(Some(loss));
    }
    if train.first_of_window {
        zero_grad_window(run, i, acc, zero_grad)?;
    }
    let scaled = if acc > 1 { loss.f_div_scalar(acc as f64)? } else { loss.shallow_clone() };
    run.hook(Hook::BeforeBackward, HookData { batch_idx: i as i64, output: Some(&loss), ..Default::default() })?;
    run.strategy.post_forward(&loss)?;
    let started = run.profile_start();
    optimization::backward(run, &scaled).map_err(|e| e.context(format!("{}: backward", at())))?;
    run.profile_stop("[Strategy].backward", started, Default::default());
    run.hook(Hook::AfterBackward, HookData { batch_idx: i as i64, output: Some(&loss), ..Default::default() })?;
    Ok(Some(loss))
}

/// A hook about optimizer `optimizer_idx` (on_before_optimizer_step,
/// on_before_zero_grad: Lightning's `optimizer` argument).
pub(super) fn optimizer_hook(run: &mut Run, hook: Hook, optimizer_idx: Option<usize>) -> Result<()> {
    run.hook(hook, HookData { batch_idx: -1, optimizer_idx, ..Default::default() })
}

/// `zero_grad` at the start of an accumulation window (batch `i`), with
/// its hook and progress.
fn zero_grad_window(
    run: &mut Run,
    i: usize,
    acc: i64,
    zero_grad: &mut dyn FnMut(&mut Run) -> Result<()>,
) -> Result<()> {
    // Lightning counts the calls at a window's first batch index (not a
    // resume's first batch inside a window).
    let counted = i % acc as usize == 0;
    if counted {
        run.progress.optimizer.zero_grad.increment_ready();
    }
    let first = (!run.optimizers.is_empty()).then_some(0);
    optimizer_hook(run, Hook::BeforeZeroGrad, first)?;
    if counted {
        run.progress.optimizer.zero_grad.increment_started();
    }
    zero_grad(run)?;
    if counted {
        run.progress.optimizer.zero_grad.increment_completed();
    }
    Ok(())
}

/// The stepping batch of an optimizer that re-evaluates the loss (LBFGS,
/// the run's only optimizer): it calls Lightning's wrapped closure
/// ([`forward_backward`], then the `on_before_optimizer_step` hook and
/// clipping) as often as it needs. Returns the last evaluation, whose
/// loss Lightning reports for the batch.
fn closure_step(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &TrainBatch,
) -> Result<Tensor> {
    let at = batch.at;
    // The optimizer steps outside the run, whose steps and hooks the
    // closure runs; gradients are reset through the same parameters.
    let mut configs = std::mem::take(&mut run.optimizers);
    // The hooks inside the closure see stand-ins with the same param
    // groups (Lightning's `optimizer` argument), which refuse changes.
    run.optimizers = configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let stand_in = super::manual_closure::Stepping::of(i, c.optimizer.as_ref());
            super::module::OptimizerConfig::new(Box::new(stand_in), None)
        })
        .collect();
    let name = configs.first().map_or("the optimizer", |c| c.optimizer.name());
    let params: Vec<Tensor> = configs.iter().flat_map(|c| c.optimizer.param_tensors()).collect();
    let groups = [crate::optim::ParamGroup::new(&params, 0.0, 0.0, 0.0)];
    let mut reset = crate::optim::GradReset::default();
    let mut last = None;
    let started = run.profile_start();
    run.in_closure = true;
    let stepped = match configs.first_mut() {
        Some(cfg) => cfg.optimizer.step_with_closure(&mut || {
            let zero_grad = &mut |_: &mut Run| -> Result<()> {
                reset.run(&groups);
                Ok(())
            };
            // torch's LBFGS needs a number from every evaluation
            // (Lightning fails in `float(None)`).
            let loss = forward_backward(run, opts, store, batch, true, zero_grad)?.ok_or_else(|| {
                Error::new(
                    ErrorCode::Callback,
                    format!(
                        "{}: training_step returned no loss, and {name} re-evaluates the loss during its step: it \
                         needs one at every evaluation",
                        at()
                    ),
                )
            })?;
            // The closure's optimizer is the run's only one.
            optimizer_hook(run, Hook::BeforeOptimizerStep, Some(0))?;
            if let Some(v) = opts.gradient_clip_val {
                run.strategy.clip_params(&params, v, opts.gradient_clip_algorithm)?;
            }
            // Every rank decides from the same loss (the gradients are
            // averaged already), so the ranks evaluate alike and their
            // collectives pair up.
            // The value is read here anyway: a non-finite one is refused
            // before the optimizer uses it, on any device, and on every
            // rank alike (after the ranks' mean, which carries it, so that
            // no rank waits in that collective for one that stopped).
            let value = loss_value(&loss)?;
            let mut decided = [value];
            run.strategy.reduce(&mut decided, super::metrics::ReduceFx::Mean)?;
            let decided = decided[0];
            if opts.detect_nonfinite_loss {
                refuse_nonfinite(value, at)?;
                if !decided.is_finite() {
                    return Err(Error::new(
                        ErrorCode::NonFinite,
                        format!(
                            "{}: another rank's loss was not finite (the ranks' mean is {decided}); no update was made",
                            at()
                        ),
                    ));
                }
            }
            last = Some(loss);
            Ok(decided)
        }),
        None => Err(Error::state("no optimizer to step")),
    };
    run.optimizers = configs;
    // A checkpoint a hook asked for inside the closure is written by the
    // next hook's requests (on_train_batch_end), once the step is counted.
    run.in_closure = false;
    stepped.map_err(|e| e.context(at()))?;
    run.profile_stop("[Strategy].optimizer_step", started, Default::default());
    last.ok_or_else(|| Error::state(format!("{}: the optimizer stepped without evaluating the loss", at())))
}

/// Refuses optimizers holding parameters on another device type than the
/// model's: built before the trainer moved the model to a device whose
/// tensors are new ones (XLA), they would step tensors the model no longer
/// uses. Under FSDP's CPU offload the parameters the optimizers step are
/// in the host's memory.
pub(super) fn check_optimizer_devices(run: &Run) -> Result<()> {
    let device = run.strategy.placement().device;
    if device == Device::Cpu {
        return Ok(());
    }
    let offloaded = run.strategy.offloads_parameters();
    for (i, cfg) in run.optimizers.iter().enumerate() {
        for group in cfg.optimizer.param_groups() {
            for p in &group.params {
                let on = Device::of(p)?;
                if on.kind() != device.kind() && !(offloaded && on == Device::Cpu) {
                    return Err(Error::invalid(format!(
                        "optimizer {i} ({}) holds a parameter on {} while the model is on {}: create optimizers in \
                         configure_optimizers, after the trainer has moved the model",
                        cfg.optimizer.name(),
                        on.name(),
                        device.name()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Refuses what an optimizer that re-evaluates the loss (LBFGS) cannot do
/// under automatic optimization: step beside other optimizers (each
/// evaluation re-runs training_step), scale the loss (Lightning: "AMP and
/// the LBFGS optimizer are not compatible"), or split batches over `dp`
/// replicas.
pub(super) fn check_closure_optimizers(run: &Run) -> Result<()> {
    let Some(cfg) = run.optimizers.iter().find(|c| c.optimizer.needs_closure()) else { return Ok(()) };
    let name = cfg.optimizer.name();
    if run.state.manual_optimization {
        // The step cannot run its closure: stepping it fails, naming why.
        return Ok(());
    }
    if run.optimizers.len() > 1 {
        return Err(Error::invalid(format!(
            "{name} re-evaluates the loss during its step, so under automatic optimization it must be the only \
             optimizer (configure_optimizers returned {})",
            run.optimizers.len()
        )));
    }
    if run.strategy.precision().has_scaler() {
        return Err(Error::invalid(format!(
            "precision \"16-mixed\" scales the loss, and {name} re-evaluates it during its step: they are not \
             compatible (use \"bf16-mixed\" or \"32-true\")"
        )));
    }
    if run.strategy.is_data_parallel() {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!("{name} does not run under strategy \"dp\": use ddp or one device"),
        ));
    }
    if let Some(why) = run.strategy.closure_refusal() {
        return Err(Error::new(ErrorCode::Unsupported, format!("{name}: {why}")));
    }
    Ok(())
}
