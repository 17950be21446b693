//! Schedulers beyond the closed forms: CyclicLR, and LambdaLR /
//! MultiplicativeLR whose factor is a host callback.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host, Userdata};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::optim::optimizers::fulmen_optimizer;
use crate::ffi::schedulers::gen_options::fulmen_cyclic_lr_options;
use crate::ffi::schedulers::scheduler::{fulmen_scheduler, make};
use crate::optim::{CyclicLr, CyclicLrOptions, LambdaLr, LrLambda};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `CyclicLR`: sets every group's lr to `base_lr` (and, cycling momentum,
/// its momentum / beta1 to `max_momentum`), then cycles between `base_lr`
/// and `max_lr`; usually stepped per batch (FULMEN_INTERVAL_STEP).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a negative or non-finite lr or
/// gamma, a non-finite momentum, a step size < 1, `mode` not a
/// fulmen_cyclic_mode, cycle_momentum with Adagrad, which has no momentum).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_cyclic_lr_new(
    optimizer: *mut fulmen_optimizer,
    options: *const fulmen_cyclic_lr_options,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = cyclic_options(options)?;
        make(optimizer, out, |opt| Ok(Box::new(CyclicLr::new(opt, opts)?)))
    })
}

/// `CyclicLR` with each param group's own range (torch's `base_lr` and
/// `max_lr` given as lists): `base_lrs` and `max_lrs` hold one finite
/// value >= 0 per group of the optimizer (`n_base_lrs` / `n_max_lrs` equal
/// to its group count), or are empty (count 0) for the options' value in
/// every group. Otherwise as `fulmen_scheduler_cyclic_lr_new`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a count that is neither 0 nor the
/// group count; a bad value; the options as in
/// `fulmen_scheduler_cyclic_lr_new`), FULMEN_CODE_NULL_ARGUMENT
/// (`options` NULL, or a list NULL with a count > 0).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_cyclic_lr_ranges_new(
    optimizer: *mut fulmen_optimizer,
    options: *const fulmen_cyclic_lr_options,
    base_lrs: *const f64,
    n_base_lrs: usize,
    max_lrs: *const f64,
    n_max_lrs: usize,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = cyclic_options(options)?;
        let lower = crate::ffi::tensor::handle::slice_arg(base_lrs, n_base_lrs, "base_lrs")?;
        let upper = crate::ffi::tensor::handle::slice_arg(max_lrs, n_max_lrs, "max_lrs")?;
        make(optimizer, out, |opt| Ok(Box::new(CyclicLr::with_ranges(opt, opts, lower, upper)?)))
    })
}

/// The core's options from the C struct (required).
unsafe fn cyclic_options(options: *const fulmen_cyclic_lr_options) -> Result<CyclicLrOptions> {
    let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
    CyclicLrOptions::try_from(*o)
}

/// The factor of LambdaLR / MultiplicativeLR for step `epoch` (0 at
/// construction) of parameter group `group`, written to `*out`; return NULL
/// or an error (NULL as a function pointer is refused).
pub type fulmen_lr_lambda_fn =
    Option<unsafe extern "C" fn(userdata: *mut c_void, epoch: i64, group: usize, out: *mut f64) -> *mut fulmen_error>;

/// Builds LambdaLR or MultiplicativeLR; `userdata_free` runs when the
/// scheduler goes, and not at all when this fails.
unsafe fn lambda_scheduler(
    optimizer: *mut fulmen_optimizer,
    lr_lambda: fulmen_lr_lambda_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    multiplicative: bool,
    out: *mut *mut fulmen_scheduler,
) -> Result<()> {
    let f = lr_lambda.ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `lr_lambda` is NULL"))?;
    let name = if multiplicative { "multiplicative_lr" } else { "lambda_lr" };
    // The destructor is armed only once the scheduler exists.
    let armed = Arc::new(AtomicBool::new(false));
    /// The userdata, whose destructor runs only once armed.
    struct Guarded(Userdata, Arc<AtomicBool>, Option<unsafe extern "C" fn(*mut c_void)>);
    impl Drop for Guarded {
        fn drop(&mut self) {
            if self.1.load(Ordering::SeqCst) {
                self.0.set_free(self.2);
            }
        }
    }
    let held = Guarded(Userdata::new(userdata, None), armed.clone(), userdata_free);
    let lambda: LrLambda = Box::new(move |epoch, group| {
        let mut v = f64::NAN;
        // SAFETY: the host's callback with its own userdata, on the thread that steps.
        call_host(&format!("{name} lr_lambda (step {epoch}, group {group})"), || unsafe {
            f(held.0.ptr(), epoch, group, &mut v)
        })?;
        Ok(v)
    });
    make(optimizer, out, |opt| {
        let s = if multiplicative { LambdaLr::multiplicative(opt, lambda)? } else { LambdaLr::new(opt, lambda)? };
        Ok(Box::new(s))
    })?;
    armed.store(true, Ordering::SeqCst);
    Ok(())
}

/// `LambdaLR`: the lr of group `g` at step `t` is `initial_lr *
/// lr_lambda(t, g)` (step 0 written at once). `lr_lambda` runs on the
/// thread that steps the scheduler (the trainer's, or the host loop's);
/// `userdata_free` (may be NULL) runs once when the scheduler is freed,
/// not when this call fails. A state dict keeps the step and the lrs, not
/// the function (as torch).
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`lr_lambda` NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (a factor that is NaN or infinite), or the
/// callback's own error (also from later steps).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_lambda_lr_new(
    optimizer: *mut fulmen_optimizer,
    lr_lambda: fulmen_lr_lambda_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { lambda_scheduler(optimizer, lr_lambda, userdata, userdata_free, false, out) })
}

/// `MultiplicativeLR`: from step 1 on, each step multiplies group `g`'s lr
/// by `lr_lambda(t, g)`. Threads, `userdata_free` and state as
/// `fulmen_scheduler_lambda_lr_new`.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`lr_lambda` NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (a factor that is NaN or infinite), or the
/// callback's own error (also from later steps).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_multiplicative_lr_new(
    optimizer: *mut fulmen_optimizer,
    lr_lambda: fulmen_lr_lambda_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { lambda_scheduler(optimizer, lr_lambda, userdata, userdata_free, true, out) })
}
