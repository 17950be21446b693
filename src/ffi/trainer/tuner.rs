//! `fulmen_trainer_lr_find`: Lightning's learning-rate range test, and the
//! `fulmen_lr_find_result` it gives.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::lightning_module::fulmen_lightning_module;
use crate::ffi::trainer::gen_options::{fulmen_lr_find_options, fulmen_lr_find_options_default};
use crate::ffi::trainer::runs::{fulmen_trainer, loader};
use crate::trainer::BatchSource;
use crate::tuner::{LrFindMode, LrFindOptions, LrFindResult};

/// How the learning rate grows in a range test (`fulmen_lr_find_mode`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LrFindModeCode {
    /// Exponentially from min_lr to max_lr (the default).
    Exponential = 0,
    /// Linearly from min_lr to max_lr.
    Linear = 1,
}

/// The core's mode of a `fulmen_lr_find_mode` value.
pub(crate) fn lr_find_mode(m: i32) -> Result<LrFindMode> {
    match m {
        0 => Ok(LrFindMode::Exponential),
        1 => Ok(LrFindMode::Linear),
        m => Err(Error::invalid(format!("{m} is not a fulmen_lr_find_mode (0 or 1)"))),
    }
}

/// The `fulmen_lr_find_mode` value of the core's mode.
pub(crate) fn lr_find_mode_code(m: LrFindMode) -> i32 {
    match m {
        LrFindMode::Exponential => LrFindModeCode::Exponential as i32,
        LrFindMode::Linear => LrFindModeCode::Linear as i32,
    }
}

/// The learning rates a range test tried and the smoothed losses after
/// them. Free with `fulmen_lr_find_result_free`.
pub struct fulmen_lr_find_result {
    pub(crate) inner: LrFindResult,
}

impl Handle for fulmen_lr_find_result {
    const C_NAME: &'static str = "fulmen_lr_find_result";
}

/// Lightning's `Tuner(trainer).lr_find(module, train, val)`: a range test
/// of learning rates with `trainer`'s options but no loggers, checkpoints,
/// progress bar or callbacks, at most `num_training` optimizer steps, the
/// module's one optimizer starting at min_lr. The module's model gets its
/// weights back afterwards, whatever happened; the trainer is unchanged.
/// `val` may be NULL; `options` NULL means the defaults. On success
/// `*out` is a new result (owned by the caller). Runs the module's and the
/// loaders' callbacks on the calling thread.
///
/// Errors: as `fulmen_trainer_fit`, and FULMEN_CODE_INVALID_ARGUMENT (not
/// 0 < min_lr < max_lr, num_training < 1, a negative or non-finite
/// early_stop_threshold, an unknown mode, several optimizers, manual
/// optimization, fast_dev_run).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_lr_find(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    train: *const fulmen_loader,
    val: *const fulmen_loader,
    options_: *const fulmen_lr_find_options,
    out: *mut *mut fulmen_lr_find_result,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let o =
            LrFindOptions::try_from(options_.as_ref().copied().unwrap_or_else(|| fulmen_lr_find_options_default()))?;
        let t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let tr = loader(train, "train")?;
        let v = if val.is_null() { None } else { Some(loader(val, "val")?) };
        let found = t.inner.lr_find(&mut m.inner, &*tr, v.as_deref().map(|v| v as &dyn BatchSource), &o)?;
        out.write(handle::into_raw(fulmen_lr_find_result { inner: found }));
        Ok(())
    })
}

/// Copies the points of a range test: `lrs[i]` the learning rate of step
/// i and `losses[i]` the smoothed loss after it (NaN where the step gave
/// no loss), up to `capacity` of each; `*count_out` is the number of
/// points. `lrs` and `losses` may be NULL (with capacity 0) to count.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_OUT_OF_RANGE (`capacity` below the count; nothing copied).
#[no_mangle]
pub unsafe extern "C" fn fulmen_lr_find_result_points(
    result: *const fulmen_lr_find_result,
    lrs: *mut f64,
    losses: *mut f64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let r = handle::borrow(result, "result")?;
        let n = r.inner.losses.len().min(r.inner.lrs.len());
        count_out.write(n);
        if capacity == 0 && lrs.is_null() && losses.is_null() {
            return Ok(());
        }
        if capacity < n {
            return Err(Error::new(
                crate::error::ErrorCode::OutOfRange,
                format!("capacity {capacity} is below the {n} points of the range test"),
            ));
        }
        check_out(lrs, "lrs")?;
        check_out(losses, "losses")?;
        std::ptr::copy_nonoverlapping(r.inner.lrs.as_ptr(), lrs, n);
        std::ptr::copy_nonoverlapping(r.inner.losses.as_ptr(), losses, n);
        Ok(())
    })
}

/// Lightning's `suggestion(skip_begin, skip_end)`: the learning rate where
/// the smoothed loss falls fastest, leaving out the first `skip_begin` and
/// last `skip_end` points (Lightning's defaults: 10 and 1) and non-finite
/// losses. `*found_out` is false (and `*lr_out` unchanged) when fewer than
/// two points remain.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE.
#[no_mangle]
pub unsafe extern "C" fn fulmen_lr_find_result_suggestion(
    result: *const fulmen_lr_find_result,
    skip_begin: usize,
    skip_end: usize,
    lr_out: *mut f64,
    found_out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(lr_out, "lr_out")?;
        check_out(found_out, "found_out")?;
        let r = handle::borrow(result, "result")?;
        let lr = r.inner.suggestion(skip_begin, skip_end)?;
        if let Some(lr) = lr {
            lr_out.write(lr);
        }
        found_out.write(lr.is_some());
        Ok(())
    })
}

/// Frees a range test's result. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_lr_find_result_free(result: *mut fulmen_lr_find_result) {
    handle::free(result);
}
