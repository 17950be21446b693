//! torch.optim's `fused=True` from C: the updates of SGD, Adam, AdamW and
//! Adagrad
//! as one libtorch kernel per parameter group and device.
use super::error::{fulmen_error, guard};
use super::handle::{self, write_out};
use super::optim::fulmen_optimizer;

/// Turns `optimizer`'s fused updates on or off (torch's `fused=True`;
/// default off): SGD, Adam, AdamW and Adagrad then update all the
/// parameters of a group and device with one libtorch kernel
/// (`_fused_sgd_`, `_fused_adam_`, `_fused_adamw_`, `_fused_adagrad_`), where the default updates launch
/// several per parameter. The results are torch's fused ones, which differ
/// from the default updates in the last bits. The choice is saved in the
/// optimizer's state (every param group's `fused` entry, as torch), and a
/// loaded state sets it, as in torch. Under "16-mixed" the gradients are
/// unscaled before the fused step (torch hands the scale to the kernel).
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
    guard("fulmen_optimizer_set_fused", || handle::borrow_mut(optimizer, "optimizer")?.inner.set_fused(fused))
}

/// Writes whether `optimizer`'s updates are fused.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_fused(
    optimizer: *const fulmen_optimizer,
    out: *mut bool,
) -> *mut fulmen_error {
    guard("fulmen_optimizer_fused", || write_out(out, "out", handle::borrow(optimizer, "optimizer")?.inner.fused()))
}
