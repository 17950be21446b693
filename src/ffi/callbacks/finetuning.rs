//! Built-in callbacks: Lightning's `BackboneFinetuning`.
use crate::callbacks::{BackboneFinetuning, BackboneFinetuningOptions, BackboneLambda};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle;
use crate::ffi::callbacks::gen_options::fulmen_backbone_finetuning_options;
use crate::ffi::trainer::runs::fulmen_trainer;
use std::ffi::c_void;

/// Adds Lightning's `BackboneFinetuning`. At setup the backbone's
/// parameters stop requiring grad (its BatchNorms stay trainable when
/// `train_bn`; otherwise they also stop tracking running statistics), so
/// `configure_optimizers` builds each optimizer over the trainable
/// parameters (`fulmen_model_parameters` with `trainable_only`). At the
/// start of epoch `unfreeze_backbone_at_epoch` the backbone becomes
/// trainable and its parameters join every optimizer as a new param group
/// (the optimizer's defaults, lr `backbone_initial_lr`, else the first
/// group's lr times `backbone_initial_ratio_lr`); each later epoch start
/// sets that group's lr to `lambda_factor` times the previous one, at most
/// the first group's when `should_align`. Schedulers take the new group as
/// torch 2.13's do: StepLR, MultiStepLR, ExponentialLR, LinearLR,
/// ConstantLR, PolynomialLR, ReduceLROnPlateau and ChainedScheduler step it;
/// CosineAnnealingLR steps it until its first restart; LambdaLR,
/// MultiplicativeLR, CyclicLR, OneCycleLR and CosineAnnealingWarmRestarts
/// fail at their first step after the unfreeze (FULMEN_CODE_INVALID_STATE),
/// SequentialLR at its next milestone. Checkpoints keep the added groups
/// (in Lightning's form too): a resumed fit puts them back, with the
/// backbone trainable, before the optimizer states load. Not with several
/// processes (DDP).
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (a
/// factor or ratio negative or not finite, a `backbone_initial_lr` NaN or
/// infinite (< 0 means none), a negative epoch, rounding outside 0..=17,
/// `backbone` empty or not UTF-8). At fit: a backbone path the model lacks
/// (FULMEN_CODE_INVALID_ARGUMENT); every backbone parameter already in an
/// optimizer (FULMEN_CODE_INVALID_STATE); DDP (FULMEN_CODE_UNSUPPORTED).
/// Thread rules: as the trainer's other setters.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_backbone_finetuning(
    trainer: *mut fulmen_trainer,
    options: *const fulmen_backbone_finetuning_options,
) -> *mut fulmen_error {
    guard!(|| {
        let callback = BackboneFinetuning::new(core_options(options)?)?;
        handle::borrow_mut(trainer, "trainer")?.inner.add_callback(Box::new(callback));
        Ok(())
    })
}

/// The core's options from the C struct (required).
pub(crate) unsafe fn core_options(
    options: *const fulmen_backbone_finetuning_options,
) -> Result<BackboneFinetuningOptions> {
    let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
    let opts = o.to_core(str_arg(o.backbone, "options.backbone")?.to_string());
    opts.validate()?;
    Ok(opts)
}

/// Lightning's `lambda_func` of BackboneFinetuning: writes to `*out` the
/// factor of the backbone's lr for `epoch` (the start of epoch `e` asks for
/// `e + 1`, as Lightning does); return NULL or an error.
pub type fulmen_backbone_lambda_fn =
    Option<unsafe extern "C" fn(userdata: *mut c_void, epoch: i64, out: *mut f64) -> *mut fulmen_error>;

/// The host lambda form's arguments, checked: the callback of `options`
/// and the function (FULMEN_CODE_NULL_ARGUMENT when NULL).
pub(crate) unsafe fn lambda_callback(
    options: *const fulmen_backbone_finetuning_options,
    lambda_func: fulmen_backbone_lambda_fn,
) -> Result<(BackboneFinetuning, LambdaFn)> {
    let f = lambda_func.ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `lambda_func` is NULL"))?;
    Ok((BackboneFinetuning::new(core_options(options)?)?, f))
}

/// The non-NULL `fulmen_backbone_lambda_fn`.
pub(crate) type LambdaFn = unsafe extern "C" fn(*mut c_void, i64, *mut f64) -> *mut fulmen_error;

/// `callback` with the host's `f` as its `lambda_func`, owning `held`.
pub(crate) fn with_host_lambda(callback: BackboneFinetuning, f: LambdaFn, held: Userdata) -> BackboneFinetuning {
    let lambda: BackboneLambda = Box::new(move |epoch| {
        let mut v = f64::NAN;
        // SAFETY: the host's function with its own userdata, on the fit's thread.
        call_host(&format!("BackboneFinetuning lambda_func({epoch})"), || unsafe { f(held.ptr(), epoch, &mut v) })?;
        Ok(v)
    });
    callback.with_lambda(lambda)
}

/// Adds Lightning's `BackboneFinetuning` as
/// `fulmen_trainer_add_backbone_finetuning` does, with a host function in
/// place of `options.lambda_factor` (not used, but checked as there): at each epoch
/// start after the unfreeze the backbone's lr becomes
/// `lambda_func(epoch + 1)` times the previous one (at most the first
/// group's when `should_align`), once per optimizer as Lightning calls it.
/// `lambda_func` runs on the thread that runs the fit, under the trainer's
/// `callback_timeout`; its factor must be finite and >= 0. `userdata_free` (may be NULL) runs once when the
/// trainer is freed, not when this call fails. A checkpoint keeps the
/// backbone's last lr, not the function.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`lambda_func` NULL, or as
/// `fulmen_trainer_add_backbone_finetuning`), FULMEN_CODE_INVALID_ARGUMENT
/// (as `fulmen_trainer_add_backbone_finetuning`). At fit, besides its
/// errors: the function's own error (code kept, FULMEN_CODE_CALLBACK for
/// an invalid handle) or a factor NaN, infinite or < 0
/// (FULMEN_CODE_INVALID_ARGUMENT) fail the fit.
/// Thread rules: as the trainer's other setters.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_backbone_finetuning_lambda(
    trainer: *mut fulmen_trainer,
    options: *const fulmen_backbone_finetuning_options,
    lambda_func: fulmen_backbone_lambda_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut fulmen_error {
    guard!(|| {
        let (callback, f) = lambda_callback(options, lambda_func)?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        // Nothing fails from here on, so the destructor is armed at once.
        t.inner.add_callback(Box::new(with_host_lambda(callback, f, Userdata::new(userdata, userdata_free))));
        Ok(())
    })
}
