//! One parameter group's hyperparameters by torch's key, read and written
//! from C (`optimizer.param_groups[i]["weight_decay"] = 0.0`).
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, write_out};
use crate::ffi::optim::optimizers::fulmen_optimizer;
use crate::optim::group_hyper;
use std::ffi::c_char;

/// The number of parameter groups of `optimizer` (1 plus those
/// `fulmen_optimizer_add_param_group` added).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_param_group_count(
    optimizer: *const fulmen_optimizer,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", handle::borrow(optimizer, "optimizer")?.inner.param_groups().len()) })
}

/// Reads the hyperparameter `name` of parameter group `group` by torch's
/// key: `"lr"`, `"weight_decay"`, the momentum as the optimizer names it
/// (`"momentum"` for SGD and RMSprop, `"betas.0"` or `"beta1"` for the Adam
/// family; Adagrad has none), and the kind's other constants, each kept per
/// group as torch keeps them: SGD `"dampening"`, `"nesterov"`; RMSprop
/// `"alpha"`, `"eps"`, `"centered"`; Adagrad `"lr_decay"`,
/// `"initial_accumulator_value"`, `"eps"`; the Adam family `"betas.1"` (or
/// `"beta2"`), `"eps"`, Adam / AdamW `"amsgrad"`, NAdam `"momentum_decay"`,
/// NAdam / RAdam `"decoupled_weight_decay"`; every kind `"maximize"`.
/// Flags read 0 or 1.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a name this optimizer's groups do
/// not have), FULMEN_CODE_OUT_OF_RANGE (`group` >= the group count).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_param_group_get(
    optimizer: *const fulmen_optimizer,
    group: usize,
    name: *const c_char,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(name, "name")?;
        let o = handle::borrow(optimizer, "optimizer")?;
        write_out(out, "out", group_hyper::get(o.inner.as_ref(), group, name)?)
    })
}

/// Sets the hyperparameter `name` (as in `fulmen_optimizer_param_group_get`)
/// of parameter group `group`, such as `"weight_decay"` 0 for a group of
/// biases and norms, or `"beta2"` 0.95 and `"eps"` 1e-6 for one group.
/// Each value is checked as torch's constructor checks that option: finite;
/// `lr`, `weight_decay`, `eps`, `alpha`, `lr_decay`, `momentum_decay` and
/// SGD's / RMSprop's `momentum` >= 0; betas in [0, 1); a flag 0 or 1;
/// SGD's `dampening` any finite value (Nesterov's need of a momentum and
/// no dampening is checked by the constructor only, as in torch).
/// Checkpoints keep every group's values. A scheduler
/// computes `"lr"` (and a cycling one the momentum) from the group's base
/// learning rate at each of its steps, so an `"lr"` set here lasts until
/// the scheduler's next step (torch's chainable schedulers would scale it
/// instead).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown name; a value out of
/// its range, above), FULMEN_CODE_OUT_OF_RANGE (`group` >= the group
/// count).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_param_group_set(
    optimizer: *mut fulmen_optimizer,
    group: usize,
    name: *const c_char,
    value: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(name, "name")?;
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        group_hyper::set(o.inner.as_mut(), group, name, value)
    })
}
