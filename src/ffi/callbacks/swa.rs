//! Built-in callbacks: Lightning's `StochasticWeightAveraging`.
use crate::callbacks::stochastic_weight_avg::MAX_SWA_LRS;
use crate::callbacks::{StochasticWeightAveraging, StochasticWeightAveragingOptions, SwaStart};
use crate::error::{Error, ErrorCode};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::trainer::runs::fulmen_trainer;
use crate::optim::scheduler::AnnealStrategy;
use crate::trainer::hooks::Callback;

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
pub extern "C" fn fulmen_stochastic_weight_averaging_options_default(
    swa_lr: f64,
) -> fulmen_stochastic_weight_averaging_options {
    let d = StochasticWeightAveragingOptions::new(vec![swa_lr]);
    fulmen_stochastic_weight_averaging_options {
        swa_lr,
        swa_lrs: std::ptr::null(),
        n_swa_lrs: 0,
        swa_epoch_start: 0,
        swa_epoch_start_fraction: match d.swa_epoch_start {
            SwaStart::Fraction(f) => f,
            SwaStart::Epoch(_) => 0.8,
        },
        annealing_epochs: d.annealing_epochs,
        linear_anneal: d.annealing_strategy == AnnealStrategy::Linear,
        average_on_device: !d.average_on_cpu,
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
        let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
        if o.n_swa_lrs > MAX_SWA_LRS {
            return Err(Error::invalid(format!("n_swa_lrs {} is more than {MAX_SWA_LRS}", o.n_swa_lrs)));
        }
        let swa_lrs = match o.n_swa_lrs {
            0 => vec![o.swa_lr],
            n => crate::ffi::tensor::handle::slice_arg(o.swa_lrs, n, "options.swa_lrs")?.to_vec(),
        };
        let swa_epoch_start = match o.swa_epoch_start {
            0 => SwaStart::Fraction(o.swa_epoch_start_fraction),
            e if e > 0 => SwaStart::Epoch(e),
            e => return Err(Error::invalid(format!("swa_epoch_start must be >= 0 (0: the fraction), got {e}"))),
        };
        let opts = StochasticWeightAveragingOptions {
            swa_lrs,
            swa_epoch_start,
            annealing_epochs: o.annealing_epochs,
            annealing_strategy: if o.linear_anneal { AnnealStrategy::Linear } else { AnnealStrategy::Cos },
            average_on_cpu: !o.average_on_device,
        };
        let callback = StochasticWeightAveraging::new(opts)?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        if t.inner.has_callback(&callback.name()) {
            return Err(Error::invalid("the trainer has a StochasticWeightAveraging already (one drives the lr)"));
        }
        t.inner.add_callback(Box::new(callback));
        Ok(())
    })
}
