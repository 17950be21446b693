//! Generated from src/ffi/options_table.rs by tools/codegen/option_structs.rs (`make header`): do not edit.
//! The option structs of `fulmen/callbacks.h`, each with its `*_default`
//! functions and, where the core has an options type for it, its
//! conversions to and from the core's options.
use crate::callbacks::{BackboneFinetuningOptions, EarlyStoppingOptions, ModelCheckpointOptions, StochasticWeightAveragingOptions, SwaStart, WeightAveragingOptions};
use crate::error::Error;
use crate::ffi::callbacks::averaging::optional_start;
use crate::ffi::callbacks::standard::{mode, mode_code, tristate};
use crate::ffi::callbacks::swa::swa_start;
use crate::optim::AnnealStrategy;
use std::ffi::c_char;
use std::path::PathBuf;

/// Options of `fulmen_trainer_add_model_checkpoint`; defaults (Lightning's)
/// from `fulmen_model_checkpoint_options_default`. Strings are copied.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_model_checkpoint_options {
    /// Folder; NULL = `<log dir>/checkpoints`.
    pub dirpath: *const c_char,
    /// Name template such as "{epoch}-{val_loss:.3f}"; NULL = "{epoch}-{step}".
    pub filename: *const c_char,
    /// Metric to rank by; NULL = keep the latest.
    pub monitor: *const c_char,
    /// A `fulmen_mode`: FULMEN_MODE_MIN (default) or FULMEN_MODE_MAX.
    pub mode: i32,
    /// Best checkpoints to keep (-1 all, 0 none; default 1).
    pub save_top_k: i64,
    /// Also write `last.ckpt` (default false).
    pub save_last: bool,
    /// Save every n optimizer steps (default 0: off).
    pub every_n_train_steps: i64,
    /// Save every n epochs (default 1).
    pub every_n_epochs: i64,
    /// Save only weights (default false).
    pub save_weights_only: bool,
    /// `name=value` in file names (default true).
    pub auto_insert_metric_name: bool,
    /// -1 auto (default), 0 after validation, 1 at training epoch end.
    pub save_on_train_epoch_end: i32,
    /// Save when this many seconds of training passed since the last such
    /// save, checked at each training batch end (default 0: off). Not with
    /// every_n_train_steps, nor every_n_epochs other than 0 or 1 (then off).
    pub train_time_interval: f64,
    /// On a failure during fit, save a checkpoint and `last` (default false).
    pub save_on_exception: bool,
    /// An existing name gets a `-v1` suffix (default true); false overwrites it.
    pub enable_version_counter: bool,
    /// With save_last, `last.ckpt` is a symlink to the newest checkpoint
    /// (Lightning's save_last="link"; a copy where symlinks are refused).
    pub save_last_link: bool,
}

/// Lightning's ModelCheckpoint defaults.
#[no_mangle]
pub extern "C" fn fulmen_model_checkpoint_options_default() -> fulmen_model_checkpoint_options {
    ModelCheckpointOptions::default().into()
}

impl From<ModelCheckpointOptions> for fulmen_model_checkpoint_options {
    fn from(d: ModelCheckpointOptions) -> Self {
        fulmen_model_checkpoint_options {
            dirpath: std::ptr::null(),
            filename: std::ptr::null(),
            monitor: std::ptr::null(),
            mode: mode_code(d.mode),
            save_top_k: d.save_top_k,
            save_last: d.save_last,
            every_n_train_steps: d.every_n_train_steps,
            every_n_epochs: d.every_n_epochs,
            save_weights_only: d.save_weights_only,
            auto_insert_metric_name: d.auto_insert_metric_name,
            save_on_train_epoch_end: d.save_on_train_epoch_end.map_or(-1, i32::from),
            train_time_interval: d.train_time_interval.unwrap_or(0.0),
            save_on_exception: d.save_on_exception,
            enable_version_counter: d.enable_version_counter,
            save_last_link: d.save_last_link,
        }
    }
}

impl fulmen_model_checkpoint_options {
    /// The core's options, given its `dirpath`, `filename` and `monitor` as converted by hand.
    pub fn to_core(self, dirpath: Option<PathBuf>, filename: Option<String>, monitor: Option<String>) -> Result<ModelCheckpointOptions, Error> {
        let o = self;
        Ok(ModelCheckpointOptions {
            dirpath,
            filename,
            monitor,
            mode: mode(o.mode)?,
            save_top_k: o.save_top_k,
            save_last: o.save_last,
            every_n_train_steps: o.every_n_train_steps,
            every_n_epochs: o.every_n_epochs,
            save_weights_only: o.save_weights_only,
            auto_insert_metric_name: o.auto_insert_metric_name,
            save_on_train_epoch_end: tristate(o.save_on_train_epoch_end, "save_on_train_epoch_end")?,
            train_time_interval: (o.train_time_interval != 0.0).then_some(o.train_time_interval),
            save_on_exception: o.save_on_exception,
            enable_version_counter: o.enable_version_counter,
            save_last_link: o.save_last_link,
        })
    }
}

/// Options of `fulmen_trainer_add_early_stopping`; defaults from
/// `fulmen_early_stopping_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_early_stopping_options {
    /// Metric to watch (required).
    pub monitor: *const c_char,
    /// Smallest change that counts as an improvement (default 0).
    pub min_delta: f64,
    /// Checks without improvement before stopping (default 3).
    pub patience: i64,
    /// A `fulmen_mode`: FULMEN_MODE_MIN (default) or FULMEN_MODE_MAX.
    pub mode: i32,
    /// A missing metric is an error (default true).
    pub strict: bool,
    /// Stop on NaN or infinite values (default true).
    pub check_finite: bool,
    /// Stop once better than this; NaN = none (default).
    pub stopping_threshold: f64,
    /// Stop once worse than this; NaN = none (default).
    pub divergence_threshold: f64,
    /// -1 auto (default), 0 after validation, 1 at training epoch end.
    pub check_on_train_epoch_end: i32,
}

/// Lightning's EarlyStopping defaults (monitor NULL: set it).
#[no_mangle]
pub extern "C" fn fulmen_early_stopping_options_default() -> fulmen_early_stopping_options {
    EarlyStoppingOptions::new("").into()
}

impl From<EarlyStoppingOptions> for fulmen_early_stopping_options {
    fn from(d: EarlyStoppingOptions) -> Self {
        fulmen_early_stopping_options {
            monitor: std::ptr::null(),
            min_delta: d.min_delta,
            patience: d.patience,
            mode: mode_code(d.mode),
            strict: d.strict,
            check_finite: d.check_finite,
            stopping_threshold: d.stopping_threshold.unwrap_or(f64::NAN),
            divergence_threshold: d.divergence_threshold.unwrap_or(f64::NAN),
            check_on_train_epoch_end: d.check_on_train_epoch_end.map_or(-1, i32::from),
        }
    }
}

impl fulmen_early_stopping_options {
    /// The core's options, given its `monitor` as converted by hand.
    pub fn to_core(self, monitor: String) -> Result<EarlyStoppingOptions, Error> {
        let o = self;
        Ok(EarlyStoppingOptions {
            monitor,
            min_delta: o.min_delta,
            patience: o.patience,
            mode: mode(o.mode)?,
            strict: o.strict,
            check_finite: o.check_finite,
            stopping_threshold: (!o.stopping_threshold.is_nan()).then_some(o.stopping_threshold),
            divergence_threshold: (!o.divergence_threshold.is_nan()).then_some(o.divergence_threshold),
            check_on_train_epoch_end: tristate(o.check_on_train_epoch_end, "check_on_train_epoch_end")?,
        })
    }
}

/// Weight averaging options; defaults (Lightning's `EMAWeightAveraging`)
/// from `fulmen_weight_averaging_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_weight_averaging_options {
    /// An exponential moving average with `decay` (default true); false
    /// averages every update equally (stochastic weight averaging,
    /// Lightning's `WeightAveraging`).
    pub ema: bool,
    /// The EMA decay in [0, 1] (default 0.999).
    pub decay: f64,
    /// Average the buffers too (BatchNorm statistics; default true);
    /// otherwise they are copied from the model at each update.
    pub use_buffers: bool,
    /// Update after every n-th optimizer step (default 1; 0: not per
    /// step).
    pub update_every_n_steps: i64,
    /// Update per step from this step index on; -1 (the default) from the
    /// first.
    pub update_starting_at_step: i64,
    /// Also update at each epoch end from this epoch on; -1 (the default)
    /// never.
    pub update_starting_at_epoch: i64,
}

/// Lightning's `EMAWeightAveraging` defaults.
#[no_mangle]
pub extern "C" fn fulmen_weight_averaging_options_default() -> fulmen_weight_averaging_options {
    WeightAveragingOptions::default().into()
}

impl From<WeightAveragingOptions> for fulmen_weight_averaging_options {
    fn from(d: WeightAveragingOptions) -> Self {
        fulmen_weight_averaging_options {
            ema: d.decay.is_some(),
            decay: d.decay.unwrap_or(0.999),
            use_buffers: d.use_buffers,
            update_every_n_steps: d.update_every_n_steps,
            update_starting_at_step: d.update_starting_at_step.unwrap_or(-1),
            update_starting_at_epoch: d.update_starting_at_epoch.unwrap_or(-1),
        }
    }
}

impl TryFrom<fulmen_weight_averaging_options> for WeightAveragingOptions {
    type Error = Error;

    fn try_from(o: fulmen_weight_averaging_options) -> Result<Self, Error> {
        Ok(WeightAveragingOptions {
            decay: o.ema.then_some(o.decay),
            use_buffers: o.use_buffers,
            update_every_n_steps: o.update_every_n_steps,
            update_starting_at_step: optional_start(o.update_starting_at_step, "update_starting_at_step")?,
            update_starting_at_epoch: optional_start(o.update_starting_at_epoch, "update_starting_at_epoch")?,
        })
    }
}

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
    let mut c: fulmen_backbone_finetuning_options = BackboneFinetuningOptions::default().into();
    c.backbone = c"backbone".as_ptr();
    c
}

impl From<BackboneFinetuningOptions> for fulmen_backbone_finetuning_options {
    fn from(d: BackboneFinetuningOptions) -> Self {
        fulmen_backbone_finetuning_options {
            backbone: std::ptr::null(),
            unfreeze_backbone_at_epoch: d.unfreeze_backbone_at_epoch,
            lambda_factor: d.lambda_factor,
            backbone_initial_ratio_lr: d.backbone_initial_ratio_lr,
            backbone_initial_lr: d.backbone_initial_lr.unwrap_or(-1.0),
            should_align: d.should_align,
            train_bn: d.train_bn,
            verbose: d.verbose,
            rounding: d.rounding,
        }
    }
}

impl fulmen_backbone_finetuning_options {
    /// The core's options, given its `backbone` as converted by hand.
    pub fn to_core(self, backbone: String) -> BackboneFinetuningOptions {
        let o = self;
        BackboneFinetuningOptions {
            backbone,
            unfreeze_backbone_at_epoch: o.unfreeze_backbone_at_epoch,
            lambda_factor: o.lambda_factor,
            backbone_initial_ratio_lr: o.backbone_initial_ratio_lr,
            backbone_initial_lr: (o.backbone_initial_lr >= 0.0 || o.backbone_initial_lr.is_nan()).then_some(o.backbone_initial_lr),
            should_align: o.should_align,
            train_bn: o.train_bn,
            verbose: o.verbose,
            rounding: o.rounding,
        }
    }
}

/// StochasticWeightAveraging options; Lightning's defaults from
/// `fulmen_stochastic_weight_averaging_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_stochastic_weight_averaging_options {
    /// The SWA lr of every param group (Lightning's `swa_lrs` as a float).
    pub swa_lr: f64,
    /// One SWA lr per param group instead (Lightning's list), or NULL.
    /// Read during the call only.
    pub swa_lrs: *const f64,
    /// Entries of `swa_lrs` (0: use `swa_lr`; at most 4096).
    pub n_swa_lrs: usize,
    /// Averaging starts at this epoch, counted from 1; 0 (the default)
    /// uses `swa_epoch_start_fraction`.
    pub swa_epoch_start: i64,
    /// Averaging starts at epoch `int(fraction * max_epochs)` (default
    /// 0.8), when `swa_epoch_start` is 0.
    pub swa_epoch_start_fraction: f64,
    /// Epochs of annealing to the SWA lr (default 10).
    pub annealing_epochs: i64,
    /// Linear annealing (true) instead of cosine (false, the default).
    pub linear_anneal: bool,
    /// Keep the average on the model's device (Lightning's `device=None`)
    /// instead of the CPU (false, the default, `device="cpu"`).
    pub average_on_device: bool,
}

/// Lightning's `StochasticWeightAveraging` defaults with `swa_lr` for
/// every param group.
#[no_mangle]
pub extern "C" fn fulmen_stochastic_weight_averaging_options_default(swa_lr: f64) -> fulmen_stochastic_weight_averaging_options {
    StochasticWeightAveragingOptions::new(vec![swa_lr]).into()
}

impl From<StochasticWeightAveragingOptions> for fulmen_stochastic_weight_averaging_options {
    fn from(d: StochasticWeightAveragingOptions) -> Self {
        fulmen_stochastic_weight_averaging_options {
            swa_lr: d.swa_lrs.first().copied().unwrap_or(f64::NAN),
            swa_lrs: std::ptr::null(),
            n_swa_lrs: 0,
            swa_epoch_start: match d.swa_epoch_start { SwaStart::Epoch(e) => e, SwaStart::Fraction(_) => 0 },
            swa_epoch_start_fraction: match d.swa_epoch_start { SwaStart::Fraction(f) => f, SwaStart::Epoch(_) => 0.8 },
            annealing_epochs: d.annealing_epochs,
            linear_anneal: d.annealing_strategy == AnnealStrategy::Linear,
            average_on_device: !d.average_on_cpu,
        }
    }
}

impl fulmen_stochastic_weight_averaging_options {
    /// The core's options, given its `swa_lrs` as converted by hand.
    pub fn to_core(self, swa_lrs: Vec<f64>) -> Result<StochasticWeightAveragingOptions, Error> {
        let o = self;
        Ok(StochasticWeightAveragingOptions {
            swa_lrs,
            swa_epoch_start: swa_start(o.swa_epoch_start, o.swa_epoch_start_fraction)?,
            annealing_epochs: o.annealing_epochs,
            annealing_strategy: if o.linear_anneal { AnnealStrategy::Linear } else { AnnealStrategy::Cos },
            average_on_cpu: !o.average_on_device,
        })
    }
}
