//! Fit, validate, test and predict with a LightningDataModule (Lightning's
//! `trainer.fit(model, datamodule=dm)` and the like).
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out};
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::datamodule::fulmen_datamodule;
use crate::ffi::module::lightning_module::fulmen_lightning_module;
use crate::ffi::tensor::handle::{emit, fulmen_tensor};
use crate::ffi::trainer::loaders::FULMEN_LOADERS_MAX;
use crate::ffi::trainer::runs::{ckpt, fulmen_trainer};
use std::ffi::c_char;

/// Refuses a run given a datamodule and loaders at once, as Lightning's
/// Trainer does, and a NULL datamodule.
fn check_args(datamodule: *mut fulmen_datamodule, loaders_given: bool) -> Result<()> {
    if datamodule.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, "argument `datamodule` is NULL"));
    }
    if loaders_given {
        return Err(Error::invalid(
            "a run takes loaders or a datamodule, not both (as Lightning's Trainer): pass NULL loaders with a \
             datamodule",
        ));
    }
    Ok(())
}

/// Lightning's `trainer.fit(model, datamodule=dm)`: calls the datamodule's
/// `prepare_data` (local rank 0), `setup("fit")`, its `train_dataloader` /
/// `val_dataloader` as `fulmen_trainer_fit` calls the module's (the
/// module's own hooks where the datamodule has none; reloaded every
/// `reload_dataloaders_every_n_epochs` epochs), saves its `state_dict` in
/// every checkpoint and gives a resumed fit's back to `load_state_dict`,
/// and calls `teardown("fit")` at the end, also when the fit fails after
/// setup. `train` and `val` must be NULL: loaders and a datamodule at once
/// are refused, as in Lightning. `ckpt_path` as for `fulmen_trainer_fit`.
///
/// Errors: as `fulmen_trainer_fit`, and FULMEN_CODE_NULL_ARGUMENT
/// (`datamodule` NULL), FULMEN_CODE_INVALID_ARGUMENT (`train` or `val`
/// given too), FULMEN_CODE_INVALID_STATE (neither the datamodule nor the
/// module has a train_dataloader), FULMEN_CODE_OUT_OF_RANGE (a state_dict
/// over FULMEN_MAX_DATAMODULE_STATE bytes).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_fit_datamodule(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    train: *const fulmen_loader,
    val: *const fulmen_loader,
    datamodule: *mut fulmen_datamodule,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        check_args(datamodule, !train.is_null() || !val.is_null())?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let mut d = handle::borrow_mut(datamodule, "datamodule")?;
        t.inner.fit_datamodule(&mut m.inner, &mut d.inner, ckpt(ckpt_path)?)
    })
}

/// Lightning's `trainer.validate(model, datamodule=dm)`: `prepare_data`,
/// `setup("validate")`, the validation loop over the loaders of its
/// `val_dataloader` (the module's where it has none), `teardown("validate")`.
/// `loader` must be NULL. `ckpt_path` as for `fulmen_trainer_validate`
/// (its datamodule state, if any, is given to `load_state_dict`).
///
/// Errors: as `fulmen_trainer_validate`, and FULMEN_CODE_NULL_ARGUMENT,
/// FULMEN_CODE_INVALID_ARGUMENT (`loader` given too, a dataloader hook
/// giving no loader), FULMEN_CODE_INVALID_STATE (no val_dataloader).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_validate_datamodule(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    datamodule: *mut fulmen_datamodule,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        check_args(datamodule, !loader.is_null())?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let mut d = handle::borrow_mut(datamodule, "datamodule")?;
        t.inner.validate_datamodule(&mut m.inner, &mut d.inner, ckpt(ckpt_path)?).map(|_| ())
    })
}

/// Lightning's `trainer.test(model, datamodule=dm)`, as
/// `fulmen_trainer_validate_datamodule` with `test_dataloader` and stage
/// "test".
///
/// Errors: as `fulmen_trainer_test`, and FULMEN_CODE_NULL_ARGUMENT,
/// FULMEN_CODE_INVALID_ARGUMENT (`loader` given too, a dataloader hook
/// giving no loader), FULMEN_CODE_INVALID_STATE (no test_dataloader).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_test_datamodule(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    datamodule: *mut fulmen_datamodule,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        check_args(datamodule, !loader.is_null())?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let mut d = handle::borrow_mut(datamodule, "datamodule")?;
        t.inner.test_datamodule(&mut m.inner, &mut d.inner, ckpt(ckpt_path)?).map(|_| ())
    })
}

/// Lightning's `trainer.predict(model, datamodule=dm)`, as
/// `fulmen_trainer_validate_datamodule` with `predict_dataloader` and
/// stage "predict": `outs[i]` receives loader i's outputs concatenated
/// along dimension 0 (NULL when its steps returned none), `*n` the number
/// of loaders. The caller owns the tensors; on failure every `outs[i]` is
/// NULL. `loader` must be NULL.
///
/// Errors: as `fulmen_trainer_predict`, and FULMEN_CODE_NULL_ARGUMENT
/// (`datamodule`, `outs` or `n` NULL), FULMEN_CODE_INVALID_ARGUMENT
/// (`loader` given too, a dataloader hook giving no loader),
/// FULMEN_CODE_INVALID_STATE (no predict_dataloader),
/// FULMEN_CODE_OUT_OF_RANGE (more loaders than `capacity`; `*n` says how
/// many).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fulmen_trainer_predict_datamodule(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    datamodule: *mut fulmen_datamodule,
    ckpt_path: *const c_char,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    n: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(outs, "outs")?;
        check_out(n, "n")?;
        n.write(0);
        for i in 0..capacity.min(FULMEN_LOADERS_MAX) {
            outs.add(i).write(std::ptr::null_mut());
        }
        check_args(datamodule, !loader.is_null())?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let mut d = handle::borrow_mut(datamodule, "datamodule")?;
        let results = t.inner.predict_datamodule(&mut m.inner, &mut d.inner, ckpt(ckpt_path)?)?;
        if results.len() > capacity {
            n.write(results.len());
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("predict gave the outputs of {} loaders; `outs` has room for {capacity}", results.len()),
            ));
        }
        for (i, r) in results.iter().enumerate() {
            if let Some(p) = r {
                emit(outs.add(i), p.shallow_clone())?;
            }
        }
        n.write(results.len());
        Ok(())
    })
}
