//! `fulmen_trainer_scale_batch_size`: Lightning's batch size finder.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::lightning_module::fulmen_lightning_module;
use crate::ffi::trainer::runs::{fulmen_trainer, loader};
use crate::trainer::BatchSource;
use crate::tuner::{BatchSizeMode, BatchSizeOptions};

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
    let d = BatchSizeOptions::default();
    fulmen_batch_size_finder_options {
        binsearch: d.mode == BatchSizeMode::BinSearch,
        steps_per_trial: d.steps_per_trial,
        init_val: d.init_val,
        max_trials: d.max_trials,
        margin: d.margin,
        max_val: d.max_val,
    }
}

fn to_rust(o: &fulmen_batch_size_finder_options) -> BatchSizeOptions {
    BatchSizeOptions {
        mode: if o.binsearch { BatchSizeMode::BinSearch } else { BatchSizeMode::Power },
        steps_per_trial: o.steps_per_trial,
        init_val: o.init_val,
        max_trials: o.max_trials,
        margin: o.margin,
        max_val: o.max_val,
    }
}

/// Lightning's `Tuner.scale_batch_size` (its BatchSizeFinder): fits of
/// `steps_per_trial` optimizer steps on `train` at growing batch sizes,
/// with `trainer`'s options but no loggers, checkpoints, progress bar or
/// callbacks, validating on `val` (may be NULL) as a fit would, at most
/// that many batches. A trial failing with FULMEN_CODE_OUT_OF_MEMORY (from
/// libtorch, or returned by the module's own callbacks; or cuDNN's
/// CUDNN_STATUS_NOT_SUPPORTED) is a size that does not fit; the search's
/// decisions are Lightning's. The trials train the model in turn; its
/// weights are put back afterwards, whatever happened. On success `train`
/// batches by the size found (the same loader handle), which is also
/// written to `*batch_size` (may be NULL); `options` NULL means the
/// defaults. Runs the module's and the loaders' callbacks on the calling
/// thread.
///
/// Errors: as `fulmen_trainer_fit` (any trial's error but running out of
/// memory), FULMEN_CODE_UNSUPPORTED (`train` is a host iterator, whose
/// batches cannot be resized), FULMEN_CODE_INVALID_ARGUMENT (a count below
/// 1, a margin outside [0, 1), fast_dev_run, a size that fell to 0 as
/// every size ran out of memory), FULMEN_CODE_INVALID_STATE (`train` is in
/// use by another call).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_scale_batch_size(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    train: *mut fulmen_loader,
    val: *const fulmen_loader,
    options: *const fulmen_batch_size_finder_options,
    batch_size: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let o = to_rust(&options.as_ref().copied().unwrap_or_else(|| fulmen_batch_size_finder_options_default()));
        let t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let found = {
            let tr = loader(train, "train")?;
            let v = if val.is_null() { None } else { Some(loader(val, "val")?) };
            t.inner.scale_batch_size(&mut m.inner, &*tr, v.as_deref().map(|v| v as &dyn BatchSource), &o)?
        };
        let mut tr = handle::borrow_mut(train, "train")?;
        let resized: Result<_> =
            tr.inner.resized(found).unwrap_or_else(|| Err(Error::state("the loader cannot be resized")));
        tr.inner = resized?;
        if !batch_size.is_null() {
            batch_size.write(found);
        }
        Ok(())
    })
}
