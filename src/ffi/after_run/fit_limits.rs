//! The limits of a trainer's next fits (Lightning's
//! `trainer.fit_loop.max_epochs` / `max_steps`), set between fits: a fit
//! goes on from the last one's progress, so a finished run trains on once
//! its limit is raised.
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::trainer::runs::fulmen_trainer;

/// Sets the epoch limit of the trainer's next fits, as the `max_epochs`
/// option does (-1: none); Lightning's `trainer.fit_loop.max_epochs = n`.
/// The next fit without `ckpt_path` goes on from the last fit's epoch, so
/// a trainer whose fit of 2 epochs ended trains one more epoch with 3.
/// The trainer's other options are unchanged.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`max_epochs` below -1; the
/// trainer keeps its limit); FULMEN_CODE_INVALID_STATE also while the
/// trainer runs (a hook of its fit cannot change it). Thread rules: the
/// trainer is changed, so it is pinned exclusively (see `fulmen/base.h`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_set_max_epochs(
    trainer: *mut fulmen_trainer,
    max_epochs: i64,
) -> *mut fulmen_error {
    guard!(|| { handle::borrow_mut(trainer, "trainer")?.inner.set_max_epochs(max_epochs) })
}

/// Sets the optimizer-step limit of the trainer's next fits, as the
/// `max_steps` option does (-1: none); Lightning's
/// `trainer.fit_loop.max_steps = n`. The step count goes on across fits
/// (`fulmen_trainer_global_step`), so the limit counts every fit's steps.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`max_steps` below -1; the trainer
/// keeps its limit); FULMEN_CODE_INVALID_STATE also while the trainer
/// runs. Thread rules: as `fulmen_trainer_set_max_epochs`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_set_max_steps(
    trainer: *mut fulmen_trainer,
    max_steps: i64,
) -> *mut fulmen_error {
    guard!(|| { handle::borrow_mut(trainer, "trainer")?.inner.set_max_steps(max_steps) })
}
