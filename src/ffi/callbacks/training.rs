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
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        t.inner.add_callback(Box::new(accumulation_scheduler(epochs, factors, n)?));
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
        t.inner.add_callback(Box::new(on_exception_checkpoint(dirpath, filename)?));
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
        t.inner.add_callback(Box::new(throughput_monitor(window_size, separator, 0.0, 0.0)?));
        Ok(())
    })
}

/// `fulmen_trainer_add_throughput_monitor` with FLOP metrics, as
/// Lightning's with a module's `flops_per_batch`: `flops_per_batch` is the
/// FLOPs of one batch on one device (0: none, then as without FLOPs;
/// `fulmen_model_measure_flops` counts them), and `available_flops` the
/// device's peak FLOPs per second (0: none; see
/// `fulmen_available_flops`). Once the window is full it also logs
/// `<stage><sep>device<sep>flops_per_sec` (the window's FLOPs but its
/// first update's, over its time, per device), with several ranks
/// `<stage><sep>flops_per_sec` (over the job), and given
/// `available_flops`, `<stage><sep>device<sep>mfu` (device FLOPs per
/// second over the peak).
///
/// Errors: as `fulmen_trainer_add_throughput_monitor`, and
/// FULMEN_CODE_INVALID_ARGUMENT (`flops_per_batch` or `available_flops`
/// negative, NaN or infinite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_throughput_monitor_flops(
    trainer: *mut fulmen_trainer,
    window_size: usize,
    separator: *const c_char,
    flops_per_batch: f64,
    available_flops: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        t.inner.add_callback(Box::new(throughput_monitor(window_size, separator, flops_per_batch, available_flops)?));
        Ok(())
    })
}

/// Writes the peak FLOPs per second of the CUDA device named `device_name`
/// (as CUDA names it, e.g. "NVIDIA H100 80GB HBM3") for `dtype` ("float64",
/// "float32", "tfloat32", "bfloat16", "float16", "int8", "int4"), from
/// Lightning's table (`get_available_flops`); 0 when the table does not
/// know the device or the dtype (as for the CPU, which has none).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a string not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_available_flops(
    device_name: *const c_char,
    dtype: *const c_char,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(device_name, "device_name")?;
        let dtype = str_arg(dtype, "dtype")?;
        let flops = crate::callbacks::flops_table::available_flops(name, dtype).unwrap_or(0.0);
        crate::ffi::base::handle::write_out(out, "out", flops)
    })
}

/// The GradientAccumulationScheduler of `n` (epoch, factor) pairs.
pub(crate) unsafe fn accumulation_scheduler(
    epochs: *const i64,
    factors: *const i64,
    n: usize,
) -> crate::error::Result<GradientAccumulationScheduler> {
    if n > FULMEN_ACCUMULATION_SCHEDULE_MAX {
        return Err(Error::invalid(format!("a schedule of {n} entries; at most {FULMEN_ACCUMULATION_SCHEDULE_MAX}")));
    }
    let e = i64_list(epochs, n, "epochs")?;
    let f = i64_list(factors, n, "factors")?;
    let pairs: Vec<(i64, i64)> = e.iter().copied().zip(f.iter().copied()).collect();
    GradientAccumulationScheduler::new(&pairs)
}

/// The OnExceptionCheckpoint writing `filename` (NULL: Lightning's
/// "on_exception") in `dirpath`.
pub(crate) unsafe fn on_exception_checkpoint(
    dirpath: *const c_char,
    filename: *const c_char,
) -> crate::error::Result<OnExceptionCheckpoint> {
    let dir = PathBuf::from(str_arg(dirpath, "dirpath")?);
    let name = if filename.is_null() { None } else { Some(str_arg(filename, "filename")?) };
    OnExceptionCheckpoint::new(dir, name)
}

/// The ThroughputMonitor of the arguments; FLOPs counted when either
/// figure is not 0.
pub(crate) unsafe fn throughput_monitor(
    window_size: usize,
    separator: *const c_char,
    flops_per_batch: f64,
    available_flops: f64,
) -> crate::error::Result<crate::callbacks::ThroughputMonitor> {
    let sep = if separator.is_null() { "/" } else { str_arg(separator, "separator")? };
    let monitor = crate::callbacks::ThroughputMonitor::new(window_size, sep)?;
    if flops_per_batch == 0.0 && available_flops == 0.0 {
        return Ok(monitor);
    }
    let given = |v: f64| (v != 0.0).then_some(v);
    Ok(monitor.with_flops(crate::callbacks::throughput::Flops::new(given(flops_per_batch), given(available_flops))?))
}
