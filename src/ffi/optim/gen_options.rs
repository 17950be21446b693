//! Generated from src/ffi/options_table.rs by tools/codegen/option_structs.rs (`make header`): do not edit.
//! The option structs of `fulmen/optim.h`, each with its `*_default`
//! functions and, where the core has an options type for it, its
//! conversions to and from the core's options.
use crate::optim::{AdagradOptions, AdamOptions, AdamaxOptions, LbfgsOptions, NAdamOptions, RAdamOptions, RmsPropOptions, SgdOptions};

/// SGD options (`torch.optim.SGD`); defaults from `fulmen_sgd_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_sgd_options {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Momentum factor (default 0).
    pub momentum: f64,
    /// Dampening of the momentum (default 0).
    pub dampening: f64,
    /// L2 penalty (default 0).
    pub weight_decay: f64,
    /// Nesterov momentum (default false).
    pub nesterov: bool,
    /// Maximize instead of minimize (default false).
    pub maximize: bool,
}

/// torch's SGD defaults.
#[no_mangle]
pub extern "C" fn fulmen_sgd_options_default() -> fulmen_sgd_options {
    SgdOptions::default().into()
}

impl From<SgdOptions> for fulmen_sgd_options {
    fn from(d: SgdOptions) -> Self {
        fulmen_sgd_options {
            lr: d.lr,
            momentum: d.momentum,
            dampening: d.dampening,
            weight_decay: d.weight_decay,
            nesterov: d.nesterov,
            maximize: d.maximize,
        }
    }
}

impl From<fulmen_sgd_options> for SgdOptions {
    fn from(o: fulmen_sgd_options) -> Self {
        SgdOptions {
            lr: o.lr,
            momentum: o.momentum,
            dampening: o.dampening,
            weight_decay: o.weight_decay,
            nesterov: o.nesterov,
            maximize: o.maximize,
        }
    }
}

/// Adam / AdamW options; defaults from `fulmen_adam_options_default` or
/// `fulmen_adamw_options_default` (weight decay 1e-2).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_adam_options {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// First-moment decay (default 0.9).
    pub beta1: f64,
    /// Second-moment decay (default 0.999).
    pub beta2: f64,
    /// Denominator term (default 1e-8).
    pub eps: f64,
    /// Weight decay: L2 for Adam, decoupled for AdamW.
    pub weight_decay: f64,
    /// AMSGrad variant (default false).
    pub amsgrad: bool,
    /// Maximize instead of minimize (default false).
    pub maximize: bool,
}

/// torch's Adam defaults.
#[no_mangle]
pub extern "C" fn fulmen_adam_options_default() -> fulmen_adam_options {
    AdamOptions::default().into()
}

/// torch's AdamW defaults (weight decay 1e-2).
#[no_mangle]
pub extern "C" fn fulmen_adamw_options_default() -> fulmen_adam_options {
    AdamOptions::adamw().into()
}

impl From<AdamOptions> for fulmen_adam_options {
    fn from(d: AdamOptions) -> Self {
        fulmen_adam_options {
            lr: d.lr,
            beta1: d.betas.0,
            beta2: d.betas.1,
            eps: d.eps,
            weight_decay: d.weight_decay,
            amsgrad: d.amsgrad,
            maximize: d.maximize,
        }
    }
}

impl From<fulmen_adam_options> for AdamOptions {
    fn from(o: fulmen_adam_options) -> Self {
        AdamOptions {
            lr: o.lr,
            betas: (o.beta1, o.beta2),
            eps: o.eps,
            weight_decay: o.weight_decay,
            amsgrad: o.amsgrad,
            maximize: o.maximize,
        }
    }
}

/// RMSprop options; defaults from `fulmen_rmsprop_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_rmsprop_options {
    /// Learning rate (default 1e-2).
    pub lr: f64,
    /// Smoothing constant (default 0.99).
    pub alpha: f64,
    /// Denominator term (default 1e-8).
    pub eps: f64,
    /// L2 penalty (default 0).
    pub weight_decay: f64,
    /// Momentum factor (default 0).
    pub momentum: f64,
    /// Centered variant (default false).
    pub centered: bool,
    /// Maximize instead of minimize (default false).
    pub maximize: bool,
}

/// torch's RMSprop defaults.
#[no_mangle]
pub extern "C" fn fulmen_rmsprop_options_default() -> fulmen_rmsprop_options {
    RmsPropOptions::default().into()
}

impl From<RmsPropOptions> for fulmen_rmsprop_options {
    fn from(d: RmsPropOptions) -> Self {
        fulmen_rmsprop_options {
            lr: d.lr,
            alpha: d.alpha,
            eps: d.eps,
            weight_decay: d.weight_decay,
            momentum: d.momentum,
            centered: d.centered,
            maximize: d.maximize,
        }
    }
}

impl From<fulmen_rmsprop_options> for RmsPropOptions {
    fn from(o: fulmen_rmsprop_options) -> Self {
        RmsPropOptions {
            lr: o.lr,
            alpha: o.alpha,
            eps: o.eps,
            weight_decay: o.weight_decay,
            momentum: o.momentum,
            centered: o.centered,
            maximize: o.maximize,
        }
    }
}

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

/// torch's Adagrad defaults.
#[no_mangle]
pub extern "C" fn fulmen_adagrad_options_default() -> fulmen_adagrad_options {
    AdagradOptions::default().into()
}

impl From<AdagradOptions> for fulmen_adagrad_options {
    fn from(d: AdagradOptions) -> Self {
        fulmen_adagrad_options {
            lr: d.lr,
            lr_decay: d.lr_decay,
            weight_decay: d.weight_decay,
            initial_accumulator_value: d.initial_accumulator_value,
            eps: d.eps,
            maximize: d.maximize,
        }
    }
}

impl From<fulmen_adagrad_options> for AdagradOptions {
    fn from(o: fulmen_adagrad_options) -> Self {
        AdagradOptions {
            lr: o.lr,
            lr_decay: o.lr_decay,
            weight_decay: o.weight_decay,
            initial_accumulator_value: o.initial_accumulator_value,
            eps: o.eps,
            maximize: o.maximize,
        }
    }
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

/// torch's Adamax defaults.
#[no_mangle]
pub extern "C" fn fulmen_adamax_options_default() -> fulmen_adamax_options {
    AdamaxOptions::default().into()
}

impl From<AdamaxOptions> for fulmen_adamax_options {
    fn from(d: AdamaxOptions) -> Self {
        fulmen_adamax_options {
            lr: d.lr,
            beta1: d.betas.0,
            beta2: d.betas.1,
            eps: d.eps,
            weight_decay: d.weight_decay,
            maximize: d.maximize,
        }
    }
}

impl From<fulmen_adamax_options> for AdamaxOptions {
    fn from(o: fulmen_adamax_options) -> Self {
        AdamaxOptions {
            lr: o.lr,
            betas: (o.beta1, o.beta2),
            eps: o.eps,
            weight_decay: o.weight_decay,
            maximize: o.maximize,
        }
    }
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

/// torch's NAdam defaults.
#[no_mangle]
pub extern "C" fn fulmen_nadam_options_default() -> fulmen_nadam_options {
    NAdamOptions::default().into()
}

impl From<NAdamOptions> for fulmen_nadam_options {
    fn from(d: NAdamOptions) -> Self {
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
}

impl From<fulmen_nadam_options> for NAdamOptions {
    fn from(o: fulmen_nadam_options) -> Self {
        NAdamOptions {
            lr: o.lr,
            betas: (o.beta1, o.beta2),
            eps: o.eps,
            weight_decay: o.weight_decay,
            momentum_decay: o.momentum_decay,
            decoupled_weight_decay: o.decoupled_weight_decay,
            maximize: o.maximize,
        }
    }
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

/// torch's RAdam defaults.
#[no_mangle]
pub extern "C" fn fulmen_radam_options_default() -> fulmen_radam_options {
    RAdamOptions::default().into()
}

impl From<RAdamOptions> for fulmen_radam_options {
    fn from(d: RAdamOptions) -> Self {
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
}

impl From<fulmen_radam_options> for RAdamOptions {
    fn from(o: fulmen_radam_options) -> Self {
        RAdamOptions {
            lr: o.lr,
            betas: (o.beta1, o.beta2),
            eps: o.eps,
            weight_decay: o.weight_decay,
            decoupled_weight_decay: o.decoupled_weight_decay,
            maximize: o.maximize,
        }
    }
}

/// LBFGS options; defaults from `fulmen_lbfgs_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_lbfgs_options {
    /// Learning rate: the step length (the first iteration's scaled by
    /// `min(1, 1 / |g|_1)`; default 1).
    pub lr: f64,
    /// Iterations per step (default 20; at least 1).
    pub max_iter: i64,
    /// Loss evaluations per step; 0 = torch's default, `max_iter * 5 / 4`.
    pub max_eval: i64,
    /// Stop when no gradient entry exceeds this in magnitude (default 1e-7).
    pub tolerance_grad: f64,
    /// Stop when the loss or the step changes less than this (default 1e-9).
    pub tolerance_change: f64,
    /// Update pairs kept (default 100; 1 to 1048576).
    pub history_size: i64,
    /// The strong-Wolfe line search (torch's `line_search_fn =
    /// "strong_wolfe"`) instead of a fixed step (default false).
    pub strong_wolfe: bool,
}

/// torch's LBFGS defaults.
#[no_mangle]
pub extern "C" fn fulmen_lbfgs_options_default() -> fulmen_lbfgs_options {
    LbfgsOptions::default().into()
}

impl From<LbfgsOptions> for fulmen_lbfgs_options {
    fn from(d: LbfgsOptions) -> Self {
        fulmen_lbfgs_options {
            lr: d.lr,
            max_iter: d.max_iter,
            max_eval: d.max_eval.unwrap_or(0),
            tolerance_grad: d.tolerance_grad,
            tolerance_change: d.tolerance_change,
            history_size: d.history_size,
            strong_wolfe: d.strong_wolfe,
        }
    }
}

impl From<fulmen_lbfgs_options> for LbfgsOptions {
    fn from(o: fulmen_lbfgs_options) -> Self {
        LbfgsOptions {
            lr: o.lr,
            max_iter: o.max_iter,
            max_eval: (o.max_eval != 0).then_some(o.max_eval),
            tolerance_grad: o.tolerance_grad,
            tolerance_change: o.tolerance_change,
            history_size: o.history_size,
            strong_wolfe: o.strong_wolfe,
        }
    }
}
