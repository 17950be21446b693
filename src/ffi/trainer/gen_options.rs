//! Generated from src/ffi/options_table.rs by tools/codegen/option_structs.rs (`make header`): do not edit.
//! The option structs of `fulmen/trainer.h`, each with its `*_default`
//! functions and, where the core has an options type for it, its
//! conversions to and from the core's options.
use crate::error::Error;
use crate::ffi::trainer::tuner::{lr_find_mode, lr_find_mode_code};
use crate::tuner::{BatchSizeMode, BatchSizeOptions, LrFindOptions};

/// Options of `fulmen_trainer_lr_find`; defaults from
/// `fulmen_lr_find_options_default` (Lightning's).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_lr_find_options {
    /// The first learning rate (default 1e-8).
    pub min_lr: f64,
    /// The last learning rate (default 1).
    pub max_lr: f64,
    /// Learning rates to try, one per optimizer step (default 100).
    pub num_training: i64,
    /// A `fulmen_lr_find_mode` (default exponential).
    pub mode: i32,
    /// Stop once the smoothed loss is above this multiple of the best one
    /// (default 4; 0: never stop early).
    pub early_stop_threshold: f64,
}

/// Lightning's defaults: 1e-8 to 1 over 100 steps, exponentially, stopping
/// at 4 times the best loss.
#[no_mangle]
pub extern "C" fn fulmen_lr_find_options_default() -> fulmen_lr_find_options {
    LrFindOptions::default().into()
}

impl From<LrFindOptions> for fulmen_lr_find_options {
    fn from(d: LrFindOptions) -> Self {
        fulmen_lr_find_options {
            min_lr: d.min_lr,
            max_lr: d.max_lr,
            num_training: d.num_training,
            mode: lr_find_mode_code(d.mode),
            early_stop_threshold: d.early_stop_threshold.unwrap_or(0.0),
        }
    }
}

impl TryFrom<fulmen_lr_find_options> for LrFindOptions {
    type Error = Error;

    fn try_from(o: fulmen_lr_find_options) -> Result<Self, Error> {
        Ok(LrFindOptions {
            min_lr: o.min_lr,
            max_lr: o.max_lr,
            num_training: o.num_training,
            mode: lr_find_mode(o.mode)?,
            early_stop_threshold: (o.early_stop_threshold != 0.0).then_some(o.early_stop_threshold),
        })
    }
}

/// Options of `fulmen_trainer_scale_batch_size`; defaults from
/// `fulmen_batch_size_finder_options_default` (Lightning's).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_batch_size_finder_options {
    /// false: "power", doubling until a trial runs out of memory (the
    /// default); true: "binsearch", then searching between the last size
    /// that fit and the first that did not.
    pub binsearch: bool,
    /// Optimizer steps per trial (default 3).
    pub steps_per_trial: i64,
    /// The first batch size tried (default 2).
    pub init_val: usize,
    /// The most trials (default 25).
    pub max_trials: i64,
    /// binsearch: the found size is reduced by this fraction, in [0, 1)
    /// (default 0.05).
    pub margin: f64,
    /// The largest batch size: sizes are capped at it, and the search ends
    /// once it reaches it, without trying it, as Lightning's (default 8192).
    pub max_val: usize,
}

/// Lightning's defaults: power mode, 3 steps per trial from batch size 2,
/// at most 25 trials, a 5% margin (binsearch), at most 8192.
#[no_mangle]
pub extern "C" fn fulmen_batch_size_finder_options_default() -> fulmen_batch_size_finder_options {
    BatchSizeOptions::default().into()
}

impl From<BatchSizeOptions> for fulmen_batch_size_finder_options {
    fn from(d: BatchSizeOptions) -> Self {
        fulmen_batch_size_finder_options {
            binsearch: d.mode == BatchSizeMode::BinSearch,
            steps_per_trial: d.steps_per_trial,
            init_val: d.init_val,
            max_trials: d.max_trials,
            margin: d.margin,
            max_val: d.max_val,
        }
    }
}

impl From<fulmen_batch_size_finder_options> for BatchSizeOptions {
    fn from(o: fulmen_batch_size_finder_options) -> Self {
        BatchSizeOptions {
            mode: if o.binsearch { BatchSizeMode::BinSearch } else { BatchSizeMode::Power },
            steps_per_trial: o.steps_per_trial,
            init_val: o.init_val,
            max_trials: o.max_trials,
            margin: o.margin,
            max_val: o.max_val,
        }
    }
}
