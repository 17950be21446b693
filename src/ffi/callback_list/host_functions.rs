//! The built-in callbacks of `configure_callbacks` that call host
//! functions: Lightning's `BasePredictionWriter` and `BackboneFinetuning`
//! with its `lambda_func`. Each owns its `userdata` once added; the module
//! builds them anew at every run, so each call needs userdata of its own.
use super::fulmen_callback_list;
use crate::ffi::base::callback::Userdata;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::callbacks::finetuning::{fulmen_backbone_lambda_fn, lambda_callback, with_host_lambda};
use crate::ffi::callbacks::gen_options::fulmen_backbone_finetuning_options;
use crate::ffi::prediction::{
    fulmen_prediction_batch_fn, fulmen_prediction_epoch_fn, fulmen_prediction_value_batch_fn,
    fulmen_prediction_value_epoch_fn, interval_of, tensor_writer, value_writer,
};
use std::ffi::{c_char, c_void};

/// In `configure_callbacks`: adds a prediction writer (arguments as for
/// `fulmen_trainer_add_prediction_writer`), replacing the trainer's
/// prediction writers for the run and the ones after it, as Lightning
/// replaces the callbacks of the types a module returns. `configure_callbacks`
/// runs at every run's start, so a module that adds a writer there adds a
/// new one each time (the one before is replaced, and its `userdata_free`
/// runs): give each call userdata of its own, or a NULL `userdata_free`.
/// On success the writer owns `userdata`; on failure nothing is taken.
///
/// Errors: as `fulmen_trainer_add_prediction_writer`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_prediction_writer(
    list: *mut fulmen_callback_list,
    write_interval: *const c_char,
    write_on_batch_end: fulmen_prediction_batch_fn,
    write_on_epoch_end: fulmen_prediction_epoch_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut fulmen_error {
    guard!(|| {
        let interval = interval_of(write_interval, write_on_batch_end.is_some(), write_on_epoch_end.is_some())?;
        let mut l = handle::borrow_mut(list, "list")?;
        // Nothing fails from here on, so the destructor is armed at once.
        let ud = Userdata::new(userdata, userdata_free);
        l.callbacks.push(Box::new(tensor_writer(interval, write_on_batch_end, write_on_epoch_end, ud)));
        Ok(())
    })
}

/// In `configure_callbacks`: adds a prediction writer of whole values
/// (arguments as for `fulmen_trainer_add_prediction_value_writer`),
/// replacing the trainer's prediction writers (of either form) as
/// `fulmen_callback_list_add_prediction_writer` does, with the same rules
/// for `userdata`.
///
/// Errors: as `fulmen_trainer_add_prediction_value_writer`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_prediction_value_writer(
    list: *mut fulmen_callback_list,
    write_interval: *const c_char,
    write_on_batch_end: fulmen_prediction_value_batch_fn,
    write_on_epoch_end: fulmen_prediction_value_epoch_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut fulmen_error {
    guard!(|| {
        let interval = interval_of(write_interval, write_on_batch_end.is_some(), write_on_epoch_end.is_some())?;
        let mut l = handle::borrow_mut(list, "list")?;
        // Nothing fails from here on, so the destructor is armed at once.
        let ud = Userdata::new(userdata, userdata_free);
        l.callbacks.push(Box::new(value_writer(interval, write_on_batch_end, write_on_epoch_end, ud)));
        Ok(())
    })
}

/// In `configure_callbacks`: adds a BackboneFinetuning whose backbone lr
/// follows the host's `lambda_func` (arguments as for
/// `fulmen_trainer_add_backbone_finetuning_lambda`), replacing the
/// trainer's BackboneFinetuning. `userdata` as for
/// `fulmen_callback_list_add_prediction_writer`: owned on success, a new
/// one each run.
///
/// Errors: as `fulmen_trainer_add_backbone_finetuning_lambda`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_backbone_finetuning_lambda(
    list: *mut fulmen_callback_list,
    options: *const fulmen_backbone_finetuning_options,
    lambda_func: fulmen_backbone_lambda_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut fulmen_error {
    guard!(|| {
        let (callback, f) = lambda_callback(options, lambda_func)?;
        let mut l = handle::borrow_mut(list, "list")?;
        // Nothing fails from here on, so the destructor is armed at once.
        l.callbacks.push(Box::new(with_host_lambda(callback, f, Userdata::new(userdata, userdata_free))));
        Ok(())
    })
}
