//! torch.optim's kernel choices from C: `fused=True` (SGD, Adam, AdamW and
//! Adagrad as one libtorch kernel per parameter group and device) and
//! `foreach` (every kind but LBFGS as a few `_foreach_*` kernels).
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, write_out};
use crate::ffi::optim::optimizers::fulmen_optimizer;

/// torch's `foreach` argument (in C, `fulmen_foreach`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeachChoice {
    /// torch's default (`foreach=None`): the foreach updates when every
    /// parameter is on CUDA, the for-loop updates otherwise.
    Default = 0,
    /// The for-loop updates (`foreach=False`).
    Off = 1,
    /// The foreach updates (`foreach=True`).
    On = 2,
}

impl ForeachChoice {
    fn to_core(v: i32) -> Result<Option<bool>> {
        match v {
            0 => Ok(None),
            1 => Ok(Some(false)),
            2 => Ok(Some(true)),
            _ => Err(Error::invalid(format!("{v} is not a fulmen_foreach (0 default, 1 off, 2 on)"))),
        }
    }

    fn from_core(v: Option<bool>) -> ForeachChoice {
        match v {
            None => ForeachChoice::Default,
            Some(false) => ForeachChoice::Off,
            Some(true) => ForeachChoice::On,
        }
    }
}

/// Turns `optimizer`'s fused updates on or off (torch's `fused=True`;
/// default off): SGD, Adam, AdamW and Adagrad then update all the
/// parameters of a group and device with one libtorch kernel
/// (`_fused_sgd_`, `_fused_adam_`, `_fused_adamw_`, `_fused_adagrad_`), where the default updates launch
/// several per parameter. The results are torch's fused ones, which differ
/// from the default updates in the last bits. The choice is saved in the
/// optimizer's state (every param group's `fused` entry, as torch), and a
/// loaded state sets it, as in torch. Under "16-mixed" the gradients are
/// unscaled before the fused step, and the loss scaler's inf/NaN finding
/// goes to the kernel on the device (torch's `found_inf`): a step with an
/// inf or NaN gradient is skipped there, so the host waits for nothing.
/// Not while a fit uses the optimizer.
///
/// Errors: FULMEN_CODE_UNSUPPORTED (another kind of optimizer, or a
/// parameter that is not floating or lives on a device without fused
/// kernels: the CPU, CUDA and MPS have them).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_set_fused(
    optimizer: *mut fulmen_optimizer,
    fused: bool,
) -> *mut fulmen_error {
    guard!(|| handle::borrow_mut(optimizer, "optimizer")?.inner.set_fused(fused))
}

/// Writes whether `optimizer`'s updates are fused.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_fused(
    optimizer: *const fulmen_optimizer,
    out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", handle::borrow(optimizer, "optimizer")?.inner.fused()))
}

/// Chooses `optimizer`'s foreach updates (torch's `foreach`; a
/// `fulmen_foreach`, default FULMEN_FOREACH_DEFAULT): SGD, Adam, AdamW,
/// Adagrad, RMSprop, Adamax, NAdam and RAdam then update the parameters of
/// a group, device and dtype with a few libtorch `_foreach_*` kernels, op
/// for op as torch's `_multi_tensor_*` updates, where the for-loop updates
/// launch several per parameter. FULMEN_FOREACH_DEFAULT is torch's
/// `foreach=None`: foreach when every parameter is on CUDA (as torch's
/// default there), the for-loop otherwise. The choice is the optimizer's,
/// for all its param groups (torch keeps one per group; a state whose
/// groups differ is refused). On the CPU the results equal the for-loop's
/// bit for bit (libtorch runs the foreach ops tensor by tensor), but for
/// NAdam and RAdam, whose foreach updates order their operations
/// differently and so differ in the last bits, as torch's do; as in torch,
/// Nesterov momentum without maximize or weight decay adds to the
/// gradients in place. An explicit choice is saved in the optimizer's state
/// (every param group's `foreach` entry, as torch), and a loaded state sets
/// it, as in torch. Fused updates, when on, run instead. Not while a fit
/// uses the optimizer.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`foreach` not a fulmen_foreach;
/// FULMEN_FOREACH_ON while the fused updates are on, which torch refuses
/// too), FULMEN_CODE_UNSUPPORTED (FULMEN_FOREACH_ON for LBFGS, which has
/// no foreach updates in torch either; FULMEN_FOREACH_OFF is accepted and
/// changes nothing there).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_set_foreach(
    optimizer: *mut fulmen_optimizer,
    foreach: i32,
) -> *mut fulmen_error {
    guard!(|| {
        let choice = ForeachChoice::to_core(foreach)?;
        handle::borrow_mut(optimizer, "optimizer")?.inner.set_foreach(choice)
    })
}

/// Writes `optimizer`'s foreach choice, a `fulmen_foreach`, to `*out`
/// (FULMEN_FOREACH_DEFAULT for the kinds without foreach updates).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_foreach(
    optimizer: *const fulmen_optimizer,
    out: *mut i32,
) -> *mut fulmen_error {
    guard!(|| {
        let choice = ForeachChoice::from_core(handle::borrow(optimizer, "optimizer")?.inner.foreach());
        write_out(out, "out", choice as i32)
    })
}
