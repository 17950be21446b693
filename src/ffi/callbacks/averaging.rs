//! Built-in callbacks: weight averaging (Lightning's `EMAWeightAveraging`
//! and `WeightAveraging`).
use crate::callbacks::{WeightAveraging, WeightAveragingOptions};
use crate::error::{Error, ErrorCode};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::trainer::runs::fulmen_trainer;

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
    let d = WeightAveragingOptions::default();
    fulmen_weight_averaging_options {
        ema: true,
        decay: d.decay.unwrap_or(0.999),
        use_buffers: d.use_buffers,
        update_every_n_steps: d.update_every_n_steps,
        update_starting_at_step: -1,
        update_starting_at_epoch: -1,
    }
}

/// Adds weight averaging (Lightning 2.6's `EMAWeightAveraging`, or its
/// `WeightAveraging` when `ema` is false): at fit's setup a copy of the
/// model's parameters and buffers is made on its device; after each
/// optimizer step the options select (and each selected epoch end) it is
/// updated as torch's `AveragedModel` (the first update copies);
/// validation inside fit runs with the average; at the end of training
/// the model gets the average's values. A checkpoint (not weights-only)
/// holds the average as its `state_dict`, the trained weights as
/// `current_model_state` and the count as `averaging_state`, as
/// Lightning's; resuming restores both, and a checkpoint without them
/// starts both from its `state_dict`.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (decay
/// outside [0, 1], update_every_n_steps < 0, a start below -1).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_weight_averaging(
    trainer: *mut fulmen_trainer,
    options: *const fulmen_weight_averaging_options,
) -> *mut fulmen_error {
    guard!(|| {
        let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
        let start = |v: i64, what: &str| match v {
            -1 => Ok(None),
            v if v >= 0 => Ok(Some(v)),
            v => Err(Error::invalid(format!("{what} {v}: -1 for none, or >= 0"))),
        };
        let opts = WeightAveragingOptions {
            decay: o.ema.then_some(o.decay),
            use_buffers: o.use_buffers,
            update_every_n_steps: o.update_every_n_steps,
            update_starting_at_step: start(o.update_starting_at_step, "update_starting_at_step")?,
            update_starting_at_epoch: start(o.update_starting_at_epoch, "update_starting_at_epoch")?,
        };
        let callback = WeightAveraging::new(opts)?;
        handle::borrow_mut(trainer, "trainer")?.inner.add_callback(Box::new(callback));
        Ok(())
    })
}
