//! Lightning's optimization hooks of the host's LightningModule
//! (`optimizer_step`, `optimizer_zero_grad`, `lr_scheduler_step`,
//! `backward`, `configure_gradient_clipping`), the context they get, and
//! `clip_gradients` for manual optimization.
use crate::error::{Error, Result};
use crate::ffi::base::callback::{host_result, HostCallTimer};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out, Exclusive, Handle, Shared};
use crate::ffi::data::batch::with_temp_handle;
use crate::ffi::module::context::{ctx_mut as step_ctx_mut, fulmen_step_context};
use crate::ffi::tensor::handle::{emit, fulmen_tensor};
use crate::ffi::tensor::TensorScope;
use crate::trainer::{ClipAlgorithm, OptimizationContext, OptimizationHooks};
use std::ffi::c_void;
use tch::Tensor;

/// Clip algorithm: scale the gradients so their joint 2-norm is at most
/// the value (Lightning's "norm").
pub const FULMEN_CLIP_NORM: i32 = 0;
/// Clip algorithm: clamp every gradient element into [-value, value]
/// (Lightning's "value").
pub const FULMEN_CLIP_VALUE: i32 = 1;

/// The context of one call of an optimization hook of the module
/// (`optimizer_step`, `optimizer_zero_grad`, `lr_scheduler_step`,
/// `backward`, `configure_gradient_clipping`). Borrowed: valid only during
/// that call.
pub struct fulmen_optimization_context {
    pub(crate) ctx: *mut OptimizationContext<'static, 'static>,
}

impl Handle for fulmen_optimization_context {
    const C_NAME: &'static str = "fulmen_optimization_context";
}

/// The closure `optimizer_step` gets (Lightning's `optimizer_closure`):
/// training_step, `optimizer_zero_grad` at the start of an accumulation
/// window, and `backward`. Borrowed: valid only during that call.
pub struct fulmen_optimizer_closure {
    ctx: *mut fulmen_optimization_context,
}

impl Handle for fulmen_optimizer_closure {
    const C_NAME: &'static str = "fulmen_optimizer_closure";
}

type OptimizerStepFn = unsafe extern "C" fn(
    *mut c_void,
    *mut fulmen_optimization_context,
    i64,
    i64,
    usize,
    *mut fulmen_optimizer_closure,
) -> *mut fulmen_error;
type OptimizerZeroGradFn =
    unsafe extern "C" fn(*mut c_void, *mut fulmen_optimization_context, i64, i64, usize) -> *mut fulmen_error;
type LrSchedulerStepFn =
    unsafe extern "C" fn(*mut c_void, *mut fulmen_optimization_context, usize, *const f64) -> *mut fulmen_error;
type BackwardFn =
    unsafe extern "C" fn(*mut c_void, *mut fulmen_optimization_context, *mut fulmen_tensor) -> *mut fulmen_error;
type ConfigureGradientClippingFn =
    unsafe extern "C" fn(*mut c_void, *mut fulmen_optimization_context, usize, f64, i32) -> *mut fulmen_error;

/// The optimization slots of a host module's vtable.
#[derive(Clone, Copy, Default)]
pub(crate) struct OptimizationSlots {
    pub optimizer_step: Option<OptimizerStepFn>,
    pub optimizer_zero_grad: Option<OptimizerZeroGradFn>,
    pub lr_scheduler_step: Option<LrSchedulerStepFn>,
    pub backward: Option<BackwardFn>,
    pub configure_gradient_clipping: Option<ConfigureGradientClippingFn>,
}

impl OptimizationSlots {
    /// Whether any slot is set.
    pub fn any(&self) -> bool {
        self.optimizer_step.is_some()
            || self.optimizer_zero_grad.is_some()
            || self.lr_scheduler_step.is_some()
            || self.backward.is_some()
            || self.configure_gradient_clipping.is_some()
    }
}

/// The host's slots with its userdata, as the core's hooks; a NULL slot
/// does what Lightning's default does.
pub(crate) struct HostOptimization {
    pub userdata: *mut c_void,
    pub slots: OptimizationSlots,
}

/// Calls slot `name` with a temporary context handle over `ctx`, inside a
/// tensor scope; `timed` counts it against the trainer's
/// `callback_timeout` (not optimizer_step, whose closure runs the
/// training step).
fn call_slot(
    name: &str,
    ctx: &mut OptimizationContext,
    timed: bool,
    f: impl FnOnce(*mut fulmen_optimization_context) -> *mut fulmen_error,
) -> Result<()> {
    let _scope = TensorScope::enter();
    let ptr = std::ptr::from_mut(ctx).cast::<OptimizationContext<'static, 'static>>();
    let timer = HostCallTimer::start();
    let (_, err) = with_temp_handle(fulmen_optimization_context { ctx: ptr }, f);
    host_result(err, || format!("LightningModule.{name}"))?;
    if timed {
        timer.check(|| format!("LightningModule.{name}"))?;
    }
    Ok(())
}

fn algorithm_code(algorithm: ClipAlgorithm) -> i32 {
    match algorithm {
        ClipAlgorithm::Norm => FULMEN_CLIP_NORM,
        ClipAlgorithm::Value => FULMEN_CLIP_VALUE,
    }
}

fn algorithm_arg(algorithm: i32) -> Result<ClipAlgorithm> {
    match algorithm {
        FULMEN_CLIP_NORM => Ok(ClipAlgorithm::Norm),
        FULMEN_CLIP_VALUE => Ok(ClipAlgorithm::Value),
        a => Err(Error::invalid(format!("{a} is not a clip algorithm (FULMEN_CLIP_NORM 0, FULMEN_CLIP_VALUE 1)"))),
    }
}

impl OptimizationHooks for HostOptimization {
    fn optimizer_step(&self, ctx: &mut OptimizationContext, epoch: i64, batch_idx: i64, idx: usize) -> Result<()> {
        let Some(f) = self.slots.optimizer_step else { return ctx.step().map(|_| ()) };
        call_slot("optimizer_step", ctx, false, |c| {
            // SAFETY: the host's function with its own userdata and handles
            // revoked when it returns, on this thread.
            with_temp_handle(fulmen_optimizer_closure { ctx: c }, |cl| unsafe {
                f(self.userdata, c, epoch, batch_idx, idx, cl)
            })
            .1
        })
    }

    fn optimizer_zero_grad(&self, ctx: &mut OptimizationContext, epoch: i64, batch_idx: i64, idx: usize) -> Result<()> {
        let Some(f) = self.slots.optimizer_zero_grad else { return ctx.zero_grad(true) };
        call_slot("optimizer_zero_grad", ctx, true, |c| unsafe { f(self.userdata, c, epoch, batch_idx, idx) })
    }

    fn lr_scheduler_step(
        &self,
        ctx: &mut OptimizationContext,
        scheduler_idx: usize,
        metric: Option<f64>,
    ) -> Result<()> {
        let Some(f) = self.slots.lr_scheduler_step else { return ctx.scheduler_step(metric) };
        let value = metric.unwrap_or(0.0);
        let m = if metric.is_some() { std::ptr::from_ref(&value) } else { std::ptr::null() };
        call_slot("lr_scheduler_step", ctx, true, |c| unsafe { f(self.userdata, c, scheduler_idx, m) })
    }

    fn backward(&self, ctx: &mut OptimizationContext, loss: &Tensor) -> Result<()> {
        let Some(f) = self.slots.backward else { return Ok(loss.f_backward()?) };
        call_slot("backward", ctx, true, |c| {
            let mut h: *mut fulmen_tensor = std::ptr::null_mut();
            // SAFETY: `h` is a local out pointer; the handle joins the
            // slot's tensor scope.
            if let Err(e) = unsafe { emit(&mut h, loss.shallow_clone()) } {
                return crate::ffi::base::error::error_into_raw(e);
            }
            unsafe { f(self.userdata, c, h) }
        })
    }

    fn configure_gradient_clipping(
        &self,
        ctx: &mut OptimizationContext,
        idx: usize,
        clip_val: Option<f64>,
        algorithm: ClipAlgorithm,
    ) -> Result<()> {
        let Some(f) = self.slots.configure_gradient_clipping else {
            return match clip_val {
                Some(v) => ctx.clip_gradients(v, algorithm),
                None => Ok(()),
            };
        };
        let (v, a) = (clip_val.unwrap_or(0.0), algorithm_code(algorithm));
        call_slot("configure_gradient_clipping", ctx, true, |c| unsafe { f(self.userdata, c, idx, v, a) })
    }
}

/// Pins the context exclusively (one call at a time).
unsafe fn ctx_mut<'a>(
    p: *mut fulmen_optimization_context,
) -> Result<Exclusive<'a, OptimizationContext<'static, 'static>>> {
    Ok(handle::borrow_mut(p, "ctx")?.map(|h| unsafe { &mut *h.ctx }))
}

/// Reads the context (shared pin).
unsafe fn ctx_ref<'a>(
    p: *const fulmen_optimization_context,
) -> Result<Shared<'a, OptimizationContext<'static, 'static>>> {
    Ok(handle::borrow(p, "ctx")?.map(|h| unsafe { &*h.ctx }))
}

/// Lightning's `optimizer_closure()` on its own, in `optimizer_step`:
/// runs training_step, `optimizer_zero_grad` (at the start of an
/// accumulation window) and `backward`, with their hooks, and does not
/// step (Lightning's example of an optimizer_step that skips the update).
/// May run more than once; the batch's loss is the last run's.
/// `loss` (may be NULL) receives the loss, `has_loss` (may be NULL)
/// whether training_step returned one (when not, `*loss` is NaN).
///
/// Errors: the errors of training_step, zero_grad and backward;
/// FULMEN_CODE_INVALID_STATE (called from inside the closure or a
/// step with it: its context is in use).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_closure_run(
    closure: *mut fulmen_optimizer_closure,
    loss: *mut f64,
    has_loss: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        let cl = handle::borrow_mut(closure, "closure")?;
        let mut c = ctx_mut(cl.ctx)?;
        let value = c.run_closure()?;
        if !loss.is_null() {
            loss.write(value.unwrap_or(f64::NAN));
        }
        if !has_loss.is_null() {
            has_loss.write(value.is_some());
        }
        Ok(())
    })
}

/// Lightning's `optimizer.step(closure=optimizer_closure)`, in
/// `optimizer_step` with the `closure` it was given: runs the closure,
/// then, wrapped by the precision plugin as in Lightning, unscales the
/// gradients (`16-mixed`), calls `on_before_optimizer_step` and
/// `configure_gradient_clipping`, steps the optimizer (skipped by
/// `16-mixed` for inf/NaN gradients, and when training_step returned no
/// loss under `16-mixed`) and updates the loss scale. Once per batch.
/// `made` (may be NULL) receives whether the update was made.
///
/// Errors: the closure's errors; FULMEN_CODE_INVALID_ARGUMENT (`closure`
/// belongs to another context); FULMEN_CODE_INVALID_STATE (not in
/// optimizer_step, stepped already in this batch, or called from inside
/// the closure).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_step(
    ctx: *mut fulmen_optimization_context,
    closure: *mut fulmen_optimizer_closure,
    made: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let cl = handle::borrow_mut(closure, "closure")?;
        if cl.ctx != ctx {
            return Err(Error::invalid("`closure` is the closure of another optimizer_step"));
        }
        let done = c.step()?;
        if !made.is_null() {
            made.write(done.read()?);
        }
        Ok(())
    })
}

/// `optimizer.zero_grad(set_to_none)` of the hook's optimizer: the
/// gradients of its parameters become none (`set_to_none`, Lightning's
/// default) or zeros. Any optimization hook may call it.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_zero_grad(
    ctx: *mut fulmen_optimization_context,
    set_to_none: bool,
) -> *mut fulmen_error {
    guard!(|| ctx_mut(ctx)?.zero_grad(set_to_none))
}

/// Lightning's `clip_gradients(optimizer, gradient_clip_val,
/// gradient_clip_algorithm)` in `configure_gradient_clipping`: clips the
/// gradients of the hook's optimizer, already unscaled under `16-mixed`,
/// to `value` by `algorithm` (FULMEN_CLIP_NORM or FULMEN_CLIP_VALUE);
/// `value` <= 0 clips nothing, as in Lightning.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`value` NaN, `algorithm` not a
/// clip algorithm), FULMEN_CODE_INVALID_STATE (not in
/// configure_gradient_clipping).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_clip_gradients(
    ctx: *mut fulmen_optimization_context,
    value: f64,
    algorithm: i32,
) -> *mut fulmen_error {
    guard!(|| {
        let algorithm = algorithm_arg(algorithm)?;
        ctx_mut(ctx)?.clip_gradients(value, algorithm)
    })
}

/// Lightning's default `lr_scheduler_step`, in that hook: steps the
/// hook's scheduler (in torch's chainable form when its optimizer has
/// several). `metric` (may be NULL) is the value a ReduceLROnPlateau
/// steps on, which needs one; the others ignore it.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a ReduceLROnPlateau given no
/// metric), FULMEN_CODE_INVALID_STATE (not in lr_scheduler_step).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_scheduler_step(
    ctx: *mut fulmen_optimization_context,
    metric: *const f64,
) -> *mut fulmen_error {
    guard!(|| {
        let m = if metric.is_null() { None } else { Some(metric.read()) };
        ctx_mut(ctx)?.scheduler_step(m)
    })
}

/// Writes the learning rate of parameter group `group` of the hook's
/// optimizer (the scheduler's optimizer in lr_scheduler_step).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`group` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_learning_rate(
    ctx: *const fulmen_optimization_context,
    group: usize,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let lr = ctx_ref(ctx)?.learning_rate(group)?;
        out.write(lr);
        Ok(())
    })
}

/// Sets the learning rate of parameter group `group` of the hook's
/// optimizer, as writing `pg["lr"]` in Lightning (a warm-up in
/// optimizer_step); the loggers' `lr-*` values follow.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`group` out of range, `lr` not
/// finite or negative).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_set_learning_rate(
    ctx: *mut fulmen_optimization_context,
    group: usize,
    lr: f64,
) -> *mut fulmen_error {
    guard!(|| ctx_mut(ctx)?.set_learning_rate(group, lr))
}

/// Writes Lightning's `current_epoch`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_epoch(
    ctx: *const fulmen_optimization_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        out.write(ctx_ref(ctx)?.epoch());
        Ok(())
    })
}

/// Writes Lightning's `global_step`: the optimizer steps completed before
/// this batch's (in optimizer_step, the step being taken is not counted
/// yet).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimization_context_global_step(
    ctx: *const fulmen_optimization_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        out.write(ctx_ref(ctx)?.global_step());
        Ok(())
    })
}

/// Lightning's `self.clip_gradients(opt, gradient_clip_val,
/// gradient_clip_algorithm)` in a training step with automatic
/// optimization off: clips the gradients of optimizer `optimizer` to
/// `value` by `algorithm` (FULMEN_CLIP_NORM or FULMEN_CLIP_VALUE). Under
/// `16-mixed` the gradients are unscaled first (once: the following
/// `fulmen_step_context_optimizer_step` does not unscale again), so the
/// value applies to their true size. `value` <= 0 clips nothing.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` out of range, `value`
/// NaN, `algorithm` not a clip algorithm), FULMEN_CODE_INVALID_STATE (not
/// in a training step with automatic optimization off).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_clip_gradients(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
    value: f64,
    algorithm: i32,
) -> *mut fulmen_error {
    guard!(|| {
        let algorithm = algorithm_arg(algorithm)?;
        step_ctx_mut(ctx)?.clip_gradients(optimizer, value, algorithm)
    })
}
