//! Generated from src/ffi/options_table.rs by tools/codegen/option_structs.rs (`make header`): do not edit.
//! The option structs of `fulmen/schedulers.h`, each with its `*_default`
//! functions and, where the core has an options type for it, its
//! conversions to and from the core's options.
use crate::error::Error;
use crate::optim::{AnnealStrategy, CyclicLrOptions, CyclicMode, OneCycleOptions, PlateauMode, PlateauOptions, ThresholdMode};

/// Options of `OneCycleLR`; defaults from `fulmen_one_cycle_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_one_cycle_options {
    /// Peak learning rate.
    pub max_lr: f64,
    /// Steps in the cycle.
    pub total_steps: i64,
    /// Fraction of the cycle spent increasing the lr (default 0.3).
    pub pct_start: f64,
    /// Cosine (false, default) or linear (true) annealing.
    pub linear_anneal: bool,
    /// Cycle momentum / beta1 inversely to the lr (default true).
    pub cycle_momentum: bool,
    /// Lower momentum bound (default 0.85).
    pub base_momentum: f64,
    /// Upper momentum bound (default 0.95).
    pub max_momentum: f64,
    /// initial lr = max_lr / div_factor (default 25).
    pub div_factor: f64,
    /// min lr = initial lr / final_div_factor (default 1e4).
    pub final_div_factor: f64,
    /// Three-phase schedule (default false).
    pub three_phase: bool,
}

/// torch's OneCycleLR defaults for a peak lr and a cycle length.
#[no_mangle]
pub extern "C" fn fulmen_one_cycle_options_default(max_lr: f64, total_steps: i64) -> fulmen_one_cycle_options {
    OneCycleOptions::new(max_lr, total_steps).into()
}

impl From<OneCycleOptions> for fulmen_one_cycle_options {
    fn from(d: OneCycleOptions) -> Self {
        fulmen_one_cycle_options {
            max_lr: d.max_lr,
            total_steps: d.total_steps,
            pct_start: d.pct_start,
            linear_anneal: d.anneal_strategy == AnnealStrategy::Linear,
            cycle_momentum: d.cycle_momentum,
            base_momentum: d.base_momentum,
            max_momentum: d.max_momentum,
            div_factor: d.div_factor,
            final_div_factor: d.final_div_factor,
            three_phase: d.three_phase,
        }
    }
}

impl From<fulmen_one_cycle_options> for OneCycleOptions {
    fn from(o: fulmen_one_cycle_options) -> Self {
        OneCycleOptions {
            max_lr: o.max_lr,
            total_steps: o.total_steps,
            pct_start: o.pct_start,
            anneal_strategy: if o.linear_anneal { AnnealStrategy::Linear } else { AnnealStrategy::Cos },
            cycle_momentum: o.cycle_momentum,
            base_momentum: o.base_momentum,
            max_momentum: o.max_momentum,
            div_factor: o.div_factor,
            final_div_factor: o.final_div_factor,
            three_phase: o.three_phase,
        }
    }
}

/// Options of `ReduceLROnPlateau`; defaults from
/// `fulmen_plateau_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_plateau_options {
    /// Higher metric is better (false: lower is better, the default).
    pub mode_max: bool,
    /// Factor applied to the lr on a plateau (default 0.1).
    pub factor: f64,
    /// Bad steps tolerated before reducing (default 10).
    pub patience: u64,
    /// Threshold of a significant improvement (default 1e-4).
    pub threshold: f64,
    /// Absolute (true) or relative (false, default) threshold.
    pub threshold_abs: bool,
    /// Steps to wait after a reduction (default 0).
    pub cooldown: u64,
    /// Lower bound of the lr (default 0).
    pub min_lr: f64,
    /// Smaller reductions are skipped (default 1e-8).
    pub eps: f64,
}

/// torch's ReduceLROnPlateau defaults.
#[no_mangle]
pub extern "C" fn fulmen_plateau_options_default() -> fulmen_plateau_options {
    PlateauOptions::default().into()
}

impl From<PlateauOptions> for fulmen_plateau_options {
    fn from(d: PlateauOptions) -> Self {
        fulmen_plateau_options {
            mode_max: d.mode == PlateauMode::Max,
            factor: d.factor,
            patience: d.patience,
            threshold: d.threshold,
            threshold_abs: d.threshold_mode == ThresholdMode::Abs,
            cooldown: d.cooldown,
            min_lr: d.min_lr,
            eps: d.eps,
        }
    }
}

impl From<fulmen_plateau_options> for PlateauOptions {
    fn from(o: fulmen_plateau_options) -> Self {
        PlateauOptions {
            mode: if o.mode_max { PlateauMode::Max } else { PlateauMode::Min },
            factor: o.factor,
            patience: o.patience,
            threshold: o.threshold,
            threshold_mode: if o.threshold_abs { ThresholdMode::Abs } else { ThresholdMode::Rel },
            cooldown: o.cooldown,
            min_lr: o.min_lr,
            eps: o.eps,
        }
    }
}

/// CyclicLR options; defaults from `fulmen_cyclic_lr_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_cyclic_lr_options {
    /// Lower learning rate (every group).
    pub base_lr: f64,
    /// Upper learning rate (every group).
    pub max_lr: f64,
    /// Steps of the rising half (default 2000).
    pub step_size_up: i64,
    /// Steps of the falling half; 0 = `step_size_up` (the default).
    pub step_size_down: i64,
    /// A `fulmen_cyclic_mode` (default triangular).
    pub mode: i32,
    /// EXP_RANGE's factor (default 1).
    pub gamma: f64,
    /// Cycle the momentum (Adam family: beta1) inversely (default true).
    pub cycle_momentum: bool,
    /// Lower momentum (default 0.8).
    pub base_momentum: f64,
    /// Upper momentum (default 0.9).
    pub max_momentum: f64,
}

/// torch's CyclicLR defaults between `base_lr` and `max_lr`.
#[no_mangle]
pub extern "C" fn fulmen_cyclic_lr_options_default(base_lr: f64, max_lr: f64) -> fulmen_cyclic_lr_options {
    CyclicLrOptions::new(base_lr, max_lr).into()
}

impl From<CyclicLrOptions> for fulmen_cyclic_lr_options {
    fn from(d: CyclicLrOptions) -> Self {
        fulmen_cyclic_lr_options {
            base_lr: d.base_lr,
            max_lr: d.max_lr,
            step_size_up: d.step_size_up,
            step_size_down: d.step_size_down.unwrap_or(0),
            mode: d.mode as i32,
            gamma: d.gamma,
            cycle_momentum: d.cycle_momentum,
            base_momentum: d.base_momentum,
            max_momentum: d.max_momentum,
        }
    }
}

impl TryFrom<fulmen_cyclic_lr_options> for CyclicLrOptions {
    type Error = Error;

    fn try_from(o: fulmen_cyclic_lr_options) -> Result<Self, Error> {
        Ok(CyclicLrOptions {
            base_lr: o.base_lr,
            max_lr: o.max_lr,
            step_size_up: o.step_size_up,
            step_size_down: (o.step_size_down != 0).then_some(o.step_size_down),
            mode: CyclicMode::from_i32(o.mode)?,
            gamma: o.gamma,
            cycle_momentum: o.cycle_momentum,
            base_momentum: o.base_momentum,
            max_momentum: o.max_momentum,
        })
    }
}
