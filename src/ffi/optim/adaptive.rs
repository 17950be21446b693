//! Adagrad, Adamax, NAdam and RAdam optimizers (`torch.optim`).
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::nn::model::fulmen_model;
use crate::ffi::optim::gen_options::{
    fulmen_adagrad_options, fulmen_adamax_options, fulmen_nadam_options, fulmen_radam_options,
};
use crate::ffi::optim::optimizers::{collect_params, emit_optimizer, fulmen_optimizer, options};
use crate::ffi::tensor::handle::fulmen_tensor;
use crate::optim::{Adagrad, AdagradOptions, Adamax, AdamaxOptions, NAdam, NAdamOptions, RAdam, RAdamOptions};

/// Creates an Adagrad optimizer (torch's `_single_tensor_adagrad`) over
/// `model`'s parameters (if not NULL) and `params[0..n_params]`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_adagrad_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_adagrad_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = AdagradOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(Adagrad::new(p, opts)?)))
    })
}

/// Creates an Adamax optimizer (torch's `_single_tensor_adamax`) over
/// `model`'s parameters (if not NULL) and `params[0..n_params]`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_adamax_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_adamax_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = AdamaxOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(Adamax::new(p, opts)?)))
    })
}

/// Creates a NAdam optimizer (torch's `_single_tensor_nadam`; NAdamW with
/// `decoupled_weight_decay`) over `model`'s parameters (if not NULL) and
/// `params[0..n_params]`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_nadam_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_nadam_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = NAdamOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(NAdam::new(p, opts)?)))
    })
}

/// Creates a RAdam optimizer (torch's `_single_tensor_radam`; RAdamW with
/// `decoupled_weight_decay`) over `model`'s parameters (if not NULL) and
/// `params[0..n_params]`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_radam_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_radam_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = RAdamOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(RAdam::new(p, opts)?)))
    })
}
