//! Built-in callbacks:
//! GradientAccumulationScheduler, OnExceptionCheckpoint and ThroughputMonitor.
use crate::callbacks::{grad_accumulation, GradientAccumulationScheduler, OnExceptionCheckpoint};
use crate::error::Error;
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle;
use crate::ffi::tensor::handle::i64_list;
use crate::ffi::trainer::runs::fulmen_trainer;
use std::ffi::c_char;
use std::path::PathBuf;

/// The most entries a GradientAccumulationScheduler takes.
pub const FULMEN_ACCUMULATION_SCHEDULE_MAX: usize = grad_accumulation::MAX_SCHEDULE;

/// Adds a GradientAccumulationScheduler (Lightning's): from epoch
/// `epochs[i]` on, gradients of `factors[i]` batches add up before each
/// optimizer step (the loss divided by it, as `accumulate_grad_batches`).
/// Epoch 0 accumulates 1 unless listed. `n` is 1 to
/// FULMEN_ACCUMULATION_SCHEDULE_MAX; the arrays are copied.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (an empty
/// or too long schedule, a negative or repeated epoch, a factor below 1).
/// The fit refuses it with FULMEN_CODE_INVALID_ARGUMENT when the trainer's
/// `accumulate_grad_batches` is not 1, or the module optimizes manually.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_gradient_accumulation_scheduler(
    trainer: *mut fulmen_trainer,
    epochs: *const i64,
    factors: *const i64,
    n: usize,
) -> *mut fulmen_error {
    guard!(|| {
        if n > FULMEN_ACCUMULATION_SCHEDULE_MAX {
            return Err(Error::invalid(format!(
                "a schedule of {n} entries; at most {FULMEN_ACCUMULATION_SCHEDULE_MAX}"
            )));
        }
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let e = i64_list(epochs, n, "epochs")?;
        let f = i64_list(factors, n, "factors")?;
        let pairs: Vec<(i64, i64)> = e.iter().copied().zip(f.iter().copied()).collect();
        t.inner.add_callback(Box::new(GradientAccumulationScheduler::new(&pairs)?));
        Ok(())
    })
}

/// Adds an OnExceptionCheckpoint (Lightning's): when a fit fails (an error
/// from a step, hook, callback or data source, SIGINT / SIGTERM), rank 0
/// saves a full checkpoint to `<dirpath>/<filename>.ckpt` (filename NULL:
/// "on_exception"), replacing an earlier one, so `ckpt_path` can resume
/// the run. The fit still returns its error.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`dirpath` NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (`dirpath` empty, `filename` empty or
/// holding a '/', strings not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_on_exception_checkpoint(
    trainer: *mut fulmen_trainer,
    dirpath: *const c_char,
    filename: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let dir = PathBuf::from(str_arg(dirpath, "dirpath")?);
        let name = if filename.is_null() { None } else { Some(str_arg(filename, "filename")?) };
        t.inner.add_callback(Box::new(OnExceptionCheckpoint::new(dir, name)?));
        Ok(())
    })
}

/// Adds a ThroughputMonitor (Lightning's, with fabric's Throughput):
/// batches and samples per second over the last `window_size` batches (2
/// to 1048576; Lightning's default 100), per device and, with several
/// ranks, for the job, logged when the loggers are due as
/// `train<sep>time`, `train<sep>batches`, `train<sep>samples`,
/// `train<sep>device<sep>batches_per_sec`,
/// `train<sep>device<sep>samples_per_sec` (and `validate`, `test`,
/// `predict`); `separator` NULL is "/". A batch's samples are its first
/// tensor's first dimension. Training's clock skips validation runs.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`window_size` out of range, a
/// separator empty, not UTF-8 or holding a comma, quote or newline).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_throughput_monitor(
    trainer: *mut fulmen_trainer,
    window_size: usize,
    separator: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let sep = if separator.is_null() { "/" } else { str_arg(separator, "separator")? };
        t.inner.add_callback(Box::new(crate::callbacks::ThroughputMonitor::new(window_size, sep)?));
        Ok(())
    })
}
