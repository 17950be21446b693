//! Built-in callbacks: Lightning's `BackboneFinetuning`.
use super::error::{fulmen_error, guard, str_arg};
use super::handle;
use super::trainer::fulmen_trainer;
use crate::callbacks::{BackboneFinetuning, BackboneFinetuningOptions};
use crate::error::{Error, ErrorCode};
use std::ffi::c_char;

/// BackboneFinetuning options; Lightning's defaults from
/// `fulmen_backbone_finetuning_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_backbone_finetuning_options {
    /// The backbone's dotted path in the model, NUL-terminated (default
    /// "backbone"; "0" is a Sequential's first child). Read during the
    /// call only.
    pub backbone: *const c_char,
    /// The epoch whose start unfreezes the backbone (default 10).
    pub unfreeze_backbone_at_epoch: i64,
    /// Each later epoch multiplies the backbone's lr by this (default 2,
    /// Lightning's `multiplicative` lambda_func).
    pub lambda_factor: f64,
    /// The backbone's first lr as a fraction of the first group's lr
    /// (default 0.1).
    pub backbone_initial_ratio_lr: f64,
    /// The backbone's first lr; < 0 (the default) uses the ratio.
    pub backbone_initial_lr: f64,
    /// Keep the backbone's lr at most the first group's (default true).
    pub should_align: bool,
    /// Train the backbone's BatchNorms all along (default true).
    pub train_bn: bool,
    /// Print both learning rates at each change on stderr (default false).
    pub verbose: bool,
    /// Decimals printed (default 12).
    pub rounding: i32,
}

/// Lightning's `BackboneFinetuning` defaults.
#[no_mangle]
pub extern "C" fn fulmen_backbone_finetuning_options_default() -> fulmen_backbone_finetuning_options {
    let d = BackboneFinetuningOptions::default();
    fulmen_backbone_finetuning_options {
        backbone: c"backbone".as_ptr(),
        unfreeze_backbone_at_epoch: d.unfreeze_backbone_at_epoch,
        lambda_factor: d.lambda_factor,
        backbone_initial_ratio_lr: d.backbone_initial_ratio_lr,
        backbone_initial_lr: -1.0,
        should_align: d.should_align,
        train_bn: d.train_bn,
        verbose: d.verbose,
        rounding: d.rounding,
    }
}

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
    guard("fulmen_trainer_add_backbone_finetuning", || {
        let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
        let opts = BackboneFinetuningOptions {
            backbone: str_arg(o.backbone, "options.backbone")?.to_string(),
            unfreeze_backbone_at_epoch: o.unfreeze_backbone_at_epoch,
            lambda_factor: o.lambda_factor,
            backbone_initial_ratio_lr: o.backbone_initial_ratio_lr,
            backbone_initial_lr: (o.backbone_initial_lr >= 0.0 || o.backbone_initial_lr.is_nan())
                .then_some(o.backbone_initial_lr),
            should_align: o.should_align,
            train_bn: o.train_bn,
            verbose: o.verbose,
            rounding: o.rounding,
        };
        let callback = BackboneFinetuning::new(opts)?;
        handle::borrow_mut(trainer, "trainer")?.inner.add_callback(Box::new(callback));
        Ok(())
    })
}
