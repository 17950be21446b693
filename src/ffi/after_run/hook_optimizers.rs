//! The run's optimizers from a hook: Lightning's `trainer.optimizers`, and
//! the `optimizer` argument of on_before_optimizer_step / on_before_zero_grad
//! (its index from `fulmen_hook_context_optimizer_index`). The optimizers
//! belong to the run, so hooks reach them through the context, by index,
//! with the calls a `fulmen_optimizer`'s param groups have.
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::write_out;
use crate::ffi::callbacks::hooks::{ctx_mut, ctx_ref, fulmen_hook_context};
use crate::optim::group_hyper;
use std::ffi::c_char;

/// Writes the number of the run's optimizers (Lightning's
/// `len(trainer.optimizers)`): those configure_optimizers added, numbered
/// from 0 in its order as in `fulmen_hook_context_optimizer_index`; 0 in
/// the hooks of validate, test and predict, and in a fit with none. The
/// `on_save_checkpoint` hooks reach them too, in a fit and in
/// `fulmen_trainer_save_checkpoint` after it (the last fit's).
///
/// Errors: FULMEN_CODE_INVALID_STATE (a hook without them: the
/// datamodule's hooks and the built-in monitors' pass of
/// on_train_epoch_end).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_optimizer_count(
    ctx: *const fulmen_hook_context,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.optimizers()?.len()))
}

/// Writes the number of parameter groups of the run's optimizer
/// `optimizer_idx`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`optimizer_idx` >= the optimizer
/// count), FULMEN_CODE_INVALID_STATE (as for
/// `fulmen_hook_context_optimizer_count`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_param_group_count(
    ctx: *const fulmen_hook_context,
    optimizer_idx: usize,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.optimizer(optimizer_idx)?.param_groups().len()))
}

/// Reads the hyperparameter `name` of parameter group `group` of the run's
/// optimizer `optimizer_idx`, by torch's key as
/// `fulmen_optimizer_param_group_get` reads it (`"lr"`, `"weight_decay"`,
/// `"momentum"`, `"betas.0"`...): Lightning's
/// `optimizer.param_groups[group][name]` in on_before_optimizer_step.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a name this optimizer's groups do
/// not have, `name` not UTF-8), FULMEN_CODE_OUT_OF_RANGE (an index past
/// the optimizers or the groups), FULMEN_CODE_INVALID_STATE (as for
/// `fulmen_hook_context_optimizer_count`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_param_group_get(
    ctx: *const fulmen_hook_context,
    optimizer_idx: usize,
    group: usize,
    name: *const c_char,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(name, "name")?;
        let c = ctx_ref(ctx)?;
        write_out(out, "out", group_hyper::get(c.optimizer(optimizer_idx)?, group, name)?)
    })
}

/// Sets the hyperparameter `name` of parameter group `group` of the run's
/// optimizer `optimizer_idx`, checked as `fulmen_optimizer_param_group_set`
/// checks it; the next step uses it (a scheduler's next step recomputes
/// `"lr"`), and checkpoints keep it. An optimizer stepping with a closure
/// (LBFGS, whose closure's hooks run inside its step) can be read, not
/// changed.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown name, a value out of
/// its range), FULMEN_CODE_OUT_OF_RANGE (an index past the optimizers or
/// the groups), FULMEN_CODE_INVALID_STATE (the optimizer is stepping with
/// a closure; a context outside a run's hooks; another call is using
/// `ctx`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_param_group_set(
    ctx: *mut fulmen_hook_context,
    optimizer_idx: usize,
    group: usize,
    name: *const c_char,
    value: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(name, "name")?;
        let mut c = ctx_mut(ctx)?;
        group_hyper::set(c.optimizer_mut(optimizer_idx)?, group, name, value)
    })
}
