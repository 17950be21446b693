//! `fulmen_trainer_scale_batch_size`: Lightning's batch size finder.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::lightning_module::fulmen_lightning_module;
use crate::ffi::trainer::gen_options::{fulmen_batch_size_finder_options, fulmen_batch_size_finder_options_default};
use crate::ffi::trainer::runs::{fulmen_trainer, loader};
use crate::trainer::BatchSource;
use crate::tuner::BatchSizeOptions;

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
        let o = BatchSizeOptions::from(
            options.as_ref().copied().unwrap_or_else(|| fulmen_batch_size_finder_options_default()),
        );
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
