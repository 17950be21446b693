//! Adagrad, Adamax, NAdam and RAdam optimizers (`torch.optim`), with their
//! option structs.
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::nn::model::fulmen_model;
use crate::ffi::optim::optimizers::{collect_params, emit_optimizer, fulmen_optimizer, options};
use crate::ffi::tensor::handle::fulmen_tensor;
use crate::optim::{Adagrad, AdagradOptions, Adamax, AdamaxOptions, NAdam, NAdamOptions, RAdam, RAdamOptions};

/// Adagrad options; defaults from `fulmen_adagrad_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_adagrad_options {
    /// Learning rate (default 1e-2).
    pub lr: f64,
    /// Learning-rate decay: step t uses `lr / (1 + (t - 1) * lr_decay)`
    /// (default 0).
    pub lr_decay: f64,
    /// L2 penalty (default 0).
    pub weight_decay: f64,
    /// Starting value of the sum of squared gradients (default 0).
    pub initial_accumulator_value: f64,
    /// Denominator term (default 1e-10).
    pub eps: f64,
    /// Maximize instead of minimize (default false).
    pub maximize: bool,
}

/// Adamax options; defaults from `fulmen_adamax_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_adamax_options {
    /// Learning rate (default 2e-3).
    pub lr: f64,
    /// First-moment decay (default 0.9).
    pub beta1: f64,
    /// Decay of the infinity norm (default 0.999).
    pub beta2: f64,
    /// Term added to the norm (default 1e-8).
    pub eps: f64,
    /// L2 penalty (default 0).
    pub weight_decay: f64,
    /// Maximize instead of minimize (default false).
    pub maximize: bool,
}

/// NAdam options; defaults from `fulmen_nadam_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_nadam_options {
    /// Learning rate (default 2e-3).
    pub lr: f64,
    /// First-moment decay (default 0.9).
    pub beta1: f64,
    /// Second-moment decay (default 0.999).
    pub beta2: f64,
    /// Denominator term (default 1e-8).
    pub eps: f64,
    /// Weight decay: L2, or decoupled with `decoupled_weight_decay`
    /// (default 0).
    pub weight_decay: f64,
    /// Momentum decay of the momentum schedule (default 4e-3).
    pub momentum_decay: f64,
    /// Decoupled weight decay, as NAdamW (default false).
    pub decoupled_weight_decay: bool,
    /// Maximize instead of minimize (default false).
    pub maximize: bool,
}

/// RAdam options; defaults from `fulmen_radam_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_radam_options {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// First-moment decay (default 0.9).
    pub beta1: f64,
    /// Second-moment decay (default 0.999).
    pub beta2: f64,
    /// Denominator term (default 1e-8).
    pub eps: f64,
    /// Weight decay: L2, or decoupled with `decoupled_weight_decay`
    /// (default 0).
    pub weight_decay: f64,
    /// Decoupled weight decay, as RAdamW (default false).
    pub decoupled_weight_decay: bool,
    /// Maximize instead of minimize (default false).
    pub maximize: bool,
}

/// torch's Adagrad defaults.
#[no_mangle]
pub extern "C" fn fulmen_adagrad_options_default() -> fulmen_adagrad_options {
    let d = AdagradOptions::default();
    fulmen_adagrad_options {
        lr: d.lr,
        lr_decay: d.lr_decay,
        weight_decay: d.weight_decay,
        initial_accumulator_value: d.initial_accumulator_value,
        eps: d.eps,
        maximize: d.maximize,
    }
}

/// torch's Adamax defaults.
#[no_mangle]
pub extern "C" fn fulmen_adamax_options_default() -> fulmen_adamax_options {
    let d = AdamaxOptions::default();
    fulmen_adamax_options {
        lr: d.lr,
        beta1: d.betas.0,
        beta2: d.betas.1,
        eps: d.eps,
        weight_decay: d.weight_decay,
        maximize: d.maximize,
    }
}

/// torch's NAdam defaults.
#[no_mangle]
pub extern "C" fn fulmen_nadam_options_default() -> fulmen_nadam_options {
    let d = NAdamOptions::default();
    fulmen_nadam_options {
        lr: d.lr,
        beta1: d.betas.0,
        beta2: d.betas.1,
        eps: d.eps,
        weight_decay: d.weight_decay,
        momentum_decay: d.momentum_decay,
        decoupled_weight_decay: d.decoupled_weight_decay,
        maximize: d.maximize,
    }
}

/// torch's RAdam defaults.
#[no_mangle]
pub extern "C" fn fulmen_radam_options_default() -> fulmen_radam_options {
    let d = RAdamOptions::default();
    fulmen_radam_options {
        lr: d.lr,
        beta1: d.betas.0,
        beta2: d.betas.1,
        eps: d.eps,
        weight_decay: d.weight_decay,
        decoupled_weight_decay: d.decoupled_weight_decay,
        maximize: d.maximize,
    }
}

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
        let o = self::options(options)?;
        let p = collect_params(model, params, n_params)?;
        let opts = AdagradOptions {
            lr: o.lr,
            lr_decay: o.lr_decay,
            weight_decay: o.weight_decay,
            initial_accumulator_value: o.initial_accumulator_value,
            eps: o.eps,
            maximize: o.maximize,
        };
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
        let o = self::options(options)?;
        let p = collect_params(model, params, n_params)?;
        let opts = AdamaxOptions {
            lr: o.lr,
            betas: (o.beta1, o.beta2),
            eps: o.eps,
            weight_decay: o.weight_decay,
            maximize: o.maximize,
        };
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
        let o = self::options(options)?;
        let p = collect_params(model, params, n_params)?;
        let opts = NAdamOptions {
            lr: o.lr,
            betas: (o.beta1, o.beta2),
            eps: o.eps,
            weight_decay: o.weight_decay,
            momentum_decay: o.momentum_decay,
            decoupled_weight_decay: o.decoupled_weight_decay,
            maximize: o.maximize,
        };
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
        let o = self::options(options)?;
        let p = collect_params(model, params, n_params)?;
        let opts = RAdamOptions {
            lr: o.lr,
            betas: (o.beta1, o.beta2),
            eps: o.eps,
            weight_decay: o.weight_decay,
            decoupled_weight_decay: o.decoupled_weight_decay,
            maximize: o.maximize,
        };
        emit_optimizer(out, || Ok(Box::new(RAdam::new(p, opts)?)))
    })
}
