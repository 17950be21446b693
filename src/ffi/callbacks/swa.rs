//! Built-in callbacks: Lightning's `StochasticWeightAveraging`.
use crate::callbacks::stochastic_weight_avg::MAX_SWA_LRS;
use crate::callbacks::{StochasticWeightAveraging, SwaStart};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::callbacks::gen_options::fulmen_stochastic_weight_averaging_options;
use crate::ffi::trainer::runs::fulmen_trainer;
use crate::trainer::hooks::Callback;

/// When averaging starts: epoch `epoch` (counted from 1), or at
/// `fraction` of max_epochs when `epoch` is 0; a negative epoch is refused.
pub(crate) fn swa_start(epoch: i64, fraction: f64) -> Result<SwaStart> {
    match epoch {
        0 => Ok(SwaStart::Fraction(fraction)),
        e if e > 0 => Ok(SwaStart::Epoch(e)),
        e => Err(Error::invalid(format!("swa_epoch_start must be >= 0 (0: the fraction), got {e}"))),
    }
}

/// Adds Lightning's `StochasticWeightAveraging`. From the start of epoch
/// `swa_epoch_start - 1` (0-based) the optimizer's lr anneals to the SWA lr
/// over `annealing_epochs` epochs (torch's SWALR, stepping every epoch, in
/// place of the optimizer's scheduler), and every epoch start from then to
/// the last adds the model's parameters to an equal average. Training ends
/// with the averaged parameters in the model. When max_epochs bounds the
/// fit, a model with BatchNorm layers trains one epoch more, forward only
/// (no backward, no optimizer step), its running statistics reset and
/// accumulated as a cumulative average, so they fit the averaged weights;
/// Lightning's own callback ends that epoch with an optimizer step on stale
/// gradients, which fulmen leaves out. Checkpoints keep the average, the
/// count and SWALR's state (in Lightning's format as Lightning's callback
/// does, so either resumes from the other's file); a resumed fit goes on
/// with SWALR and the average where they were. A fast_dev_run skips the
/// callback.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`trainer` or `options` NULL,
/// `swa_lrs` NULL with `n_swa_lrs` > 0), FULMEN_CODE_INVALID_ARGUMENT (an
/// lr not positive and finite, more than 4096 lrs, `swa_epoch_start` < 0,
/// a fraction outside [0, 1], `annealing_epochs` < 0, a second
/// StochasticWeightAveraging on the trainer). At fit start:
/// FULMEN_CODE_INVALID_ARGUMENT (not exactly one optimizer, more than one
/// scheduler, as many lrs as neither 1 nor the param groups (checked again
/// when SWALR takes over), a fraction without max_epochs, a start after
/// the last epoch), FULMEN_CODE_UNSUPPORTED (manual optimization).
/// Thread rules: as the trainer's other setters.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_stochastic_weight_averaging(
    trainer: *mut fulmen_trainer,
    options: *const fulmen_stochastic_weight_averaging_options,
) -> *mut fulmen_error {
    guard!(|| {
        let callback = stochastic_weight_averaging(options)?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        if t.inner.has_callback(&callback.name()) {
            return Err(Error::invalid("the trainer has a StochasticWeightAveraging already (one drives the lr)"));
        }
        t.inner.add_callback(Box::new(callback));
        Ok(())
    })
}

/// The StochasticWeightAveraging `options` describe.
pub(crate) unsafe fn stochastic_weight_averaging(
    options: *const fulmen_stochastic_weight_averaging_options,
) -> Result<StochasticWeightAveraging> {
    let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
    if o.n_swa_lrs > MAX_SWA_LRS {
        return Err(Error::invalid(format!("n_swa_lrs {} is more than {MAX_SWA_LRS}", o.n_swa_lrs)));
    }
    let swa_lrs = match o.n_swa_lrs {
        0 => vec![o.swa_lr],
        n => crate::ffi::tensor::handle::slice_arg(o.swa_lrs, n, "options.swa_lrs")?.to_vec(),
    };
    StochasticWeightAveraging::new(o.to_core(swa_lrs)?)
}
