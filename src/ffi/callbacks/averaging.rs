//! Built-in callbacks: weight averaging (Lightning's `EMAWeightAveraging`
//! and `WeightAveraging`).
use crate::callbacks::{WeightAveraging, WeightAveragingOptions};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::callbacks::gen_options::fulmen_weight_averaging_options;
use crate::ffi::trainer::runs::fulmen_trainer;

/// A start (a step or an epoch, `what`) as the core takes it: -1 is none,
/// `v >= 0` from `v` on; anything else is refused.
pub(crate) fn optional_start(v: i64, what: &str) -> Result<Option<i64>> {
    match v {
        -1 => Ok(None),
        v if v >= 0 => Ok(Some(v)),
        v => Err(Error::invalid(format!("{what} {v}: -1 for none, or >= 0"))),
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
        let callback = weight_averaging(options)?;
        handle::borrow_mut(trainer, "trainer")?.inner.add_callback(Box::new(callback));
        Ok(())
    })
}

/// The WeightAveraging `options` describe.
pub(crate) unsafe fn weight_averaging(options: *const fulmen_weight_averaging_options) -> Result<WeightAveraging> {
    let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
    WeightAveraging::new(WeightAveragingOptions::try_from(*o)?)
}
