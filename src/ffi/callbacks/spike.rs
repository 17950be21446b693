//! Built-in callbacks: Lightning's `SpikeDetection`.
use crate::callbacks::{SpikeDetection, SpikeDetectionOptions};
use crate::ffi::base::error::{fulmen_error, guard, opt_str};
use crate::ffi::base::handle;
use crate::ffi::callbacks::standard::mode as parse_mode;
use crate::ffi::trainer::runs::fulmen_trainer;
use std::ffi::c_char;
use std::path::PathBuf;

/// Adds Lightning's `SpikeDetection` (Lightning's defaults in brackets):
/// after every training batch of fit, the loss is compared with the mean
/// of the last `window` [10] losses (torchmetrics' running mean; the
/// first loss has none to compare with). From batch `warmup` [1] of each
/// epoch on, a loss is a spike when it is not better than the previous
/// one (`mode` a `fulmen_mode`: FULMEN_MODE_MIN [lower is better] or
/// FULMEN_MODE_MAX) and differs from the mean by at least `atol` [NaN:
/// unchecked] and by at least `rtol` [2] times the mean (NaN: unchecked),
/// or, with `finite_only` [true], when it is NaN or infinite (without it a
/// NaN is never a spike, and no non-finite loss enters the mean). A spike
/// appends its batch index and the one before to the batches to skip,
/// which rank 0 writes as a JSON list (Python's `json.dump(..., indent=4)`)
/// to `exclude_batches_path` (a path ending in ".json"; another path is a
/// folder, the file `skip_batches.json` in it; NULL:
/// `<default_root_dir>/skip_batches.json`; folders are created), and the
/// fit fails with FULMEN_CODE_NON_FINITE "Training spike detected in batch
/// N (epoch E): loss ... against a running mean of ...", where Lightning
/// raises `TrainingSpikeException`. The running mean is in double
/// precision (Lightning's in float32). Its window is not kept in
/// checkpoints. A step that returns no loss (manual optimization) is not
/// checked. The path is copied. The callback runs on the thread that runs
/// the fit.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`mode` not a fulmen_mode,
/// `window` 0 or above 1048576, `warmup` < 0, an infinite tolerance,
/// `exclude_batches_path` empty or not UTF-8). At fit: the spike
/// (FULMEN_CODE_NON_FINITE, also when writing the file failed, which its
/// message then says), FULMEN_CODE_UNSUPPORTED (several processes: the
/// ranks would not stop together), FULMEN_CODE_SHAPE_MISMATCH (a loss of
/// more than one element).
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_spike_detection(
    trainer: *mut fulmen_trainer,
    mode: i32,
    window: usize,
    warmup: i64,
    atol: f64,
    rtol: f64,
    exclude_batches_path: *const c_char,
    finite_only: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let callback = spike_detection(mode, window, warmup, atol, rtol, exclude_batches_path, finite_only)?;
        handle::borrow_mut(trainer, "trainer")?.inner.add_callback(Box::new(callback));
        Ok(())
    })
}

/// The SpikeDetection the arguments of `fulmen_trainer_add_spike_detection`
/// describe.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn spike_detection(
    mode: i32,
    window: usize,
    warmup: i64,
    atol: f64,
    rtol: f64,
    exclude_batches_path: *const c_char,
    finite_only: bool,
) -> crate::error::Result<SpikeDetection> {
    let opts = SpikeDetectionOptions {
        mode: parse_mode(mode)?,
        window,
        warmup,
        atol: (!atol.is_nan()).then_some(atol),
        rtol: (!rtol.is_nan()).then_some(rtol),
        exclude_batches_path: opt_str(exclude_batches_path, "exclude_batches_path")?.map(PathBuf::from),
        finite_only,
    };
    SpikeDetection::new(opts)
}
