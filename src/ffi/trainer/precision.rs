//! `fulmen_precision`: a precision plugin as a handle (Lightning's
//! `MixedPrecision(...)` / `DoublePrecision()` objects), with loss-scaler
//! settings for `16-mixed`.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::nn::model::copy_str;
use crate::ffi::trainer::runs::fulmen_trainer_options;
use crate::precision::{GradScaler, GradScalerSettings, Precision};
use std::ffi::c_char;

/// A precision plugin. Free with `fulmen_precision_free`.
pub struct fulmen_precision {
    precision: Precision,
    scaler: Option<GradScalerSettings>,
}

impl Handle for fulmen_precision {
    const C_NAME: &'static str = "fulmen_precision";
}

/// Creates a precision plugin from one of Lightning's precision values
/// ("64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true",
/// legacy "64", "32", "16", "bf16"); anything else is an error listing them.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown or non-UTF-8 value).
#[no_mangle]
pub unsafe extern "C" fn fulmen_precision_new(
    precision: *const c_char,
    out: *mut *mut fulmen_precision,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let p = Precision::parse(str_arg(precision, "precision")?)?;
        out.write(handle::into_raw(fulmen_precision { precision: p, scaler: None }));
        Ok(())
    })
}

/// Sets the loss scaler of a `16-mixed` plugin (torch's GradScaler:
/// defaults 65536, 2.0, 0.5, 2000); an error for other precisions or values
/// torch refuses.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not `16-mixed`, or a value torch
/// refuses).
#[no_mangle]
pub unsafe extern "C" fn fulmen_precision_set_grad_scaler(
    precision: *mut fulmen_precision,
    init_scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut p = handle::borrow_mut(precision, "precision")?;
        if !p.precision.uses_grad_scaler() {
            return Err(Error::invalid(format!(
                "precision {} does not use loss scaling; only 16-mixed does",
                p.precision
            )));
        }
        let settings = GradScalerSettings { init_scale, growth_factor, backoff_factor, growth_interval };
        GradScaler::with_settings(settings)?;
        p.scaler = Some(settings);
        Ok(())
    })
}

/// Copies the plugin's canonical precision name ("16-mixed", ...) into
/// `buf` as for `fulmen_model_state_dict_name`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`buf` too small; `*len_out` is still
/// written).
#[no_mangle]
pub unsafe extern "C" fn fulmen_precision_name(
    precision: *const fulmen_precision,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| { copy_str(handle::borrow(precision, "precision")?.precision.name(), buf, capacity, len_out) })
}

/// Uses `precision` (copied) for runs with these options, as Lightning's
/// `Trainer(plugins=[...])`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_precision(
    options: *mut fulmen_trainer_options,
    precision: *const fulmen_precision,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(options, "options")?;
        let p = handle::borrow(precision, "precision")?;
        set(&mut o, &p)
    })
}

fn set(o: &mut fulmen_trainer_options, p: &fulmen_precision) -> Result<()> {
    o.opts.precision = p.precision.name().to_string();
    o.opts.grad_scaler = p.scaler;
    Ok(())
}

/// Frees a precision plugin. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_precision_free(precision: *mut fulmen_precision) {
    handle::free(precision);
}
