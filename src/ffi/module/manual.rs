//! Manual optimization from a training step (Lightning's
//! `automatic_optimization = False`): backward, optimizer steps and
//! zero_grad, toggling, schedulers, through the step context.
use crate::error::Error;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::write_out;
use crate::ffi::module::context::{ctx_mut, fulmen_step_context};
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};

/// Writes the number of optimizers `configure_optimizers` added
/// (Lightning's `len(self.optimizers())`); they are numbered from 0 in
/// that order in the calls below.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not a training step with automatic
/// optimization off; the same for every call below).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_optimizer_count(
    ctx: *mut fulmen_step_context,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        crate::ffi::base::handle::check_out(out, "out")?;
        let n = ctx_mut(ctx)?.optimizer_count()?;
        write_out(out, "out", n)
    })
}

/// Lightning's `manual_backward(loss)`: backward of `loss` (borrowed)
/// through the precision plugin (scaled for 16-mixed; under DDP the
/// gradients are averaged over ranks), with the callbacks'
/// `on_before_backward` / `on_after_backward` hooks (not the module's own:
/// it is the caller). Gradients add up until an optimizer's zero_grad.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`loss` has more than one element
/// or does not require grad), FULMEN_CODE_TORCH (the backward failed, e.g.
/// a graph already freed by an earlier backward), FULMEN_CODE_CALLBACK (a
/// callback's hook failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_manual_backward(
    ctx: *mut fulmen_step_context,
    loss: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let loss = tensor_arg(loss, "loss")?.shallow_clone();
        c.manual_backward(&loss)
    })
}

/// Steps optimizer `optimizer` (Lightning's `opt.step()`): the gradients
/// are unscaled (16-mixed), the callbacks' `on_before_optimizer_step` runs,
/// and the update is made unless (16-mixed) a gradient is inf or NaN; then
/// the loss scale is updated. Every call counts one in `global_step`.
/// `made` (may be NULL) receives whether the update was made.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` out of range),
/// FULMEN_CODE_TORCH (the update failed), FULMEN_CODE_CALLBACK (a
/// callback's hook failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_optimizer_step(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
    made: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        let done = ctx_mut(ctx)?.optimizer_step(optimizer)?;
        if !made.is_null() {
            made.write(done.read()?);
        }
        Ok(())
    })
}

/// Sets the gradients of optimizer `optimizer`'s parameters to none
/// (Lightning's `opt.zero_grad()`).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_optimizer_zero_grad(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
) -> *mut fulmen_error {
    guard!(|| ctx_mut(ctx)?.optimizer_zero_grad(optimizer))
}

/// Lightning's `toggle_optimizer`: the parameters of every other optimizer
/// stop requiring grad (each keeps what it had recorded), so a backward
/// reaches only this optimizer's parameters. Undo with
/// `fulmen_step_context_untoggle_optimizer`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_toggle_optimizer(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
) -> *mut fulmen_error {
    guard!(|| ctx_mut(ctx)?.toggle_optimizer(optimizer))
}

/// Lightning's `untoggle_optimizer`: restores `requires_grad` of the other
/// optimizers' parameters as the last toggle found them.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_untoggle_optimizer(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
) -> *mut fulmen_error {
    guard!(|| ctx_mut(ctx)?.untoggle_optimizer(optimizer))
}

/// Steps the scheduler added with optimizer `optimizer` (Lightning's
/// `self.lr_schedulers()[...].step()`), or, when it has several, each of
/// them in the order they were added; `metric` (may be NULL) is the value
/// ReduceLROnPlateau reads, ignored by the others. The interval and
/// frequency given to `fulmen_optimizer_config_add` do not apply: the
/// step decides.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` out of range;
/// ReduceLROnPlateau without `metric`, or a NaN one), FULMEN_CODE_INVALID_STATE
/// (the optimizer has no scheduler).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_scheduler_step(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
    metric: *const f64,
) -> *mut fulmen_error {
    guard!(|| {
        let metric = metric.as_ref().copied();
        if metric.is_some_and(f64::is_nan) {
            return Err(Error::invalid("the metric is NaN"));
        }
        ctx_mut(ctx)?.scheduler_step(optimizer, metric)
    })
}

/// Writes the number of schedulers over all optimizers (Lightning's
/// `len(self.lr_schedulers())`).
///
/// Errors: FULMEN_CODE_INVALID_STATE (outside a manual training step).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_lr_scheduler_count(
    ctx: *mut fulmen_step_context,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        crate::ffi::base::handle::check_out(out, "out")?;
        let n = ctx_mut(ctx)?.lr_scheduler_count()?;
        write_out(out, "out", n)
    })
}

/// Steps one scheduler, `scheduler` in Lightning's `self.lr_schedulers()`
/// list: optimizer 0's schedulers in the order they were added, then
/// optimizer 1's, and so on (the order of Lightning's configs when they
/// are listed optimizer by optimizer). `metric` (may be NULL) is the
/// value ReduceLROnPlateau reads, ignored by the others (but refused when
/// NaN). Schedulers that share an optimizer step in torch's chainable
/// forms, so the others' factors stay in the learning rate.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`scheduler` out of range;
/// ReduceLROnPlateau without `metric`; a NaN `metric`),
/// FULMEN_CODE_INVALID_STATE (outside a manual training step), and the
/// scheduler's own (OneCycleLR stepped past its total steps:
/// FULMEN_CODE_OUT_OF_RANGE).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_lr_scheduler_step(
    ctx: *mut fulmen_step_context,
    scheduler: usize,
    metric: *const f64,
) -> *mut fulmen_error {
    guard!(|| {
        let metric = metric.as_ref().copied();
        if metric.is_some_and(f64::is_nan) {
            return Err(Error::invalid("the metric is NaN"));
        }
        ctx_mut(ctx)?.lr_scheduler_step(scheduler, metric)
    })
}

/// Writes the learning rate of parameter group `group` of optimizer
/// `optimizer`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` or `group` out of
/// range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_learning_rate(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
    group: usize,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        crate::ffi::base::handle::check_out(out, "out")?;
        let lr = ctx_mut(ctx)?.learning_rate(optimizer, group)?;
        write_out(out, "out", lr)
    })
}
