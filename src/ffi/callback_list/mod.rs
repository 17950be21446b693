//! `configure_callbacks` (Lightning's `LightningModule.configure_callbacks`):
//! the list a module fills when a run starts, with host callbacks and the
//! built-in ones. As Lightning does with the callbacks a module returns,
//! each replaces the trainer's callbacks of its type for the run.
use crate::callbacks::BackboneFinetuning;
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, Handle};
use crate::ffi::callbacks::gen_options::{
    fulmen_backbone_finetuning_options, fulmen_early_stopping_options, fulmen_model_checkpoint_options,
    fulmen_stochastic_weight_averaging_options, fulmen_weight_averaging_options,
};
use crate::ffi::callbacks::hooks::{fulmen_callback_vtable, host_callback};
use crate::ffi::callbacks::pruning::{fulmen_model_pruning, model_pruning};
use crate::ffi::callbacks::standard::{early_stopping, lr_monitor, model_checkpoint, timer_callback, tristate};
use crate::ffi::callbacks::training::{accumulation_scheduler, on_exception_checkpoint, throughput_monitor};
use crate::ffi::callbacks::{averaging, finetuning, spike, swa};
use crate::trainer::Callback;
use std::ffi::c_char;

mod host_functions;

/// The callbacks a LightningModule's `configure_callbacks` adds (see
/// `fulmen_module_vtable`). Borrowed: valid only during that callback.
pub struct fulmen_callback_list {
    pub(crate) callbacks: Vec<Box<dyn Callback>>,
}

impl Handle for fulmen_callback_list {
    const C_NAME: &'static str = "fulmen_callback_list";
}

/// Adds a host callback named `name` (its kind: a trainer callback of the
/// same name is replaced for the run, as Lightning replaces callbacks of
/// the module's callbacks' types), read from `vtable` as for
/// `fulmen_trainer_add_callback`. On success the callback owns
/// `userdata` (its `userdata_free` runs when the trainer is freed or the
/// callback replaced); on failure nothing is taken.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`name` empty or not UTF-8,
/// `on_hook` NULL, `struct_size` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add(
    list: *mut fulmen_callback_list,
    name: *const c_char,
    vtable: *const fulmen_callback_vtable,
) -> *mut fulmen_error {
    guard!(|| {
        let cb = host_callback(str_arg(name, "name")?, vtable)?;
        add_to_list(list, Box::new(cb))
    })
}

/// Adds `callback` to the list `configure_callbacks` fills.
pub(crate) unsafe fn add_to_list(list: *mut fulmen_callback_list, callback: Box<dyn Callback>) -> Result<()> {
    handle::borrow_mut(list, "list")?.callbacks.push(callback);
    Ok(())
}

/// In `configure_callbacks`: adds a ModelCheckpoint (`options` as for
/// `fulmen_trainer_add_model_checkpoint`; NULL for the defaults). As
/// Lightning does with the callbacks a module returns, it replaces the
/// trainer's ModelCheckpoints (the default one included) for the run and
/// the ones after it; ModelCheckpoints still run last.
///
/// Errors: as `fulmen_trainer_add_model_checkpoint`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_model_checkpoint(
    list: *mut fulmen_callback_list,
    options: *const fulmen_model_checkpoint_options,
) -> *mut fulmen_error {
    guard!(|| { add_to_list(list, Box::new(model_checkpoint(options)?)) })
}

/// In `configure_callbacks`: adds an EarlyStopping (`options` as for
/// `fulmen_trainer_add_early_stopping`), replacing the trainer's
/// EarlyStopping callbacks as Lightning does.
///
/// Errors: as `fulmen_trainer_add_early_stopping`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_early_stopping(
    list: *mut fulmen_callback_list,
    options: *const fulmen_early_stopping_options,
) -> *mut fulmen_error {
    guard!(|| { add_to_list(list, Box::new(early_stopping(options)?)) })
}

/// In `configure_callbacks`: adds a LearningRateMonitor (arguments as for
/// `fulmen_trainer_add_lr_monitor_with`), replacing the trainer's.
///
/// Errors: as `fulmen_trainer_add_lr_monitor_with`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_lr_monitor(
    list: *mut fulmen_callback_list,
    logging_interval: *const c_char,
    log_momentum: bool,
    log_weight_decay: bool,
) -> *mut fulmen_error {
    guard!(|| { add_to_list(list, Box::new(lr_monitor(logging_interval, log_momentum, log_weight_decay)?)) })
}

/// In `configure_callbacks`: adds a BackboneFinetuning (`options` as for
/// `fulmen_trainer_add_backbone_finetuning`).
///
/// Errors: as `fulmen_trainer_add_backbone_finetuning`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_backbone_finetuning(
    list: *mut fulmen_callback_list,
    options: *const fulmen_backbone_finetuning_options,
) -> *mut fulmen_error {
    guard!(|| add_to_list(list, Box::new(BackboneFinetuning::new(finetuning::core_options(options)?)?)))
}

/// In `configure_callbacks`: adds a StochasticWeightAveraging (`options`
/// as for `fulmen_trainer_add_stochastic_weight_averaging`); the trainer's
/// is replaced, and the list takes one.
///
/// Errors: as `fulmen_trainer_add_stochastic_weight_averaging`, and
/// FULMEN_CODE_INVALID_ARGUMENT (a second one in the list).
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_stochastic_weight_averaging(
    list: *mut fulmen_callback_list,
    options: *const fulmen_stochastic_weight_averaging_options,
) -> *mut fulmen_error {
    guard!(|| {
        let callback = swa::stochastic_weight_averaging(options)?;
        let mut l = handle::borrow_mut(list, "list")?;
        if l.callbacks.iter().any(|c| c.kind() == callback.kind()) {
            return Err(Error::invalid("the list has a StochasticWeightAveraging already (one drives the lr)"));
        }
        l.callbacks.push(Box::new(callback));
        Ok(())
    })
}

/// In `configure_callbacks`: adds a WeightAveraging (`options` as for
/// `fulmen_trainer_add_weight_averaging`).
///
/// Errors: as `fulmen_trainer_add_weight_averaging`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_weight_averaging(
    list: *mut fulmen_callback_list,
    options: *const fulmen_weight_averaging_options,
) -> *mut fulmen_error {
    guard!(|| add_to_list(list, Box::new(averaging::weight_averaging(options)?)))
}

/// In `configure_callbacks`: adds a GradientAccumulationScheduler of the
/// `n` (epoch, factor) pairs, as `fulmen_trainer_add_gradient_accumulation_scheduler`.
///
/// Errors: as `fulmen_trainer_add_gradient_accumulation_scheduler`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_gradient_accumulation_scheduler(
    list: *mut fulmen_callback_list,
    epochs: *const i64,
    factors: *const i64,
    n: usize,
) -> *mut fulmen_error {
    guard!(|| add_to_list(list, Box::new(accumulation_scheduler(epochs, factors, n)?)))
}

/// In `configure_callbacks`: adds a ModelPruning with `pruning`'s settings
/// (copied; the caller still owns and frees `pruning`), as
/// `fulmen_trainer_add_model_pruning`.
///
/// Errors: as `fulmen_trainer_add_model_pruning`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_model_pruning(
    list: *mut fulmen_callback_list,
    pruning: *const fulmen_model_pruning,
) -> *mut fulmen_error {
    guard!(|| add_to_list(list, Box::new(model_pruning(pruning)?)))
}

/// In `configure_callbacks`: adds a Timer (arguments as for
/// `fulmen_trainer_add_timer`).
///
/// Errors: as `fulmen_trainer_add_timer`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_timer(
    list: *mut fulmen_callback_list,
    duration: *const c_char,
    interval: *const c_char,
) -> *mut fulmen_error {
    guard!(|| add_to_list(list, Box::new(timer_callback(duration, interval)?)))
}

/// In `configure_callbacks`: adds a ThroughputMonitor (arguments as for
/// `fulmen_trainer_add_throughput_monitor_flops`; `flops_per_batch` and
/// `available_flops` 0 for none).
///
/// Errors: as `fulmen_trainer_add_throughput_monitor_flops`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_throughput_monitor(
    list: *mut fulmen_callback_list,
    window_size: usize,
    separator: *const c_char,
    flops_per_batch: f64,
    available_flops: f64,
) -> *mut fulmen_error {
    guard!(|| add_to_list(
        list,
        Box::new(throughput_monitor(window_size, separator, flops_per_batch, available_flops)?)
    ))
}

/// In `configure_callbacks`: adds a DeviceStatsMonitor (`cpu_stats` as for
/// `fulmen_trainer_add_device_stats_monitor`).
///
/// Errors: as `fulmen_trainer_add_device_stats_monitor`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_device_stats_monitor(
    list: *mut fulmen_callback_list,
    cpu_stats: i32,
) -> *mut fulmen_error {
    guard!(|| add_to_list(list, Box::new(crate::callbacks::DeviceStatsMonitor::new(tristate(cpu_stats, "cpu_stats")?))))
}

/// In `configure_callbacks`: adds a SpikeDetection (arguments as for
/// `fulmen_trainer_add_spike_detection`).
///
/// Errors: as `fulmen_trainer_add_spike_detection`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_spike_detection(
    list: *mut fulmen_callback_list,
    mode: i32,
    window: usize,
    warmup: i64,
    atol: f64,
    rtol: f64,
    exclude_batches_path: *const c_char,
    finite_only: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let callback = spike::spike_detection(mode, window, warmup, atol, rtol, exclude_batches_path, finite_only)?;
        add_to_list(list, Box::new(callback))
    })
}

/// In `configure_callbacks`: adds an OnExceptionCheckpoint (arguments as
/// for `fulmen_trainer_add_on_exception_checkpoint`).
///
/// Errors: as `fulmen_trainer_add_on_exception_checkpoint`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_list_add_on_exception_checkpoint(
    list: *mut fulmen_callback_list,
    dirpath: *const c_char,
    filename: *const c_char,
) -> *mut fulmen_error {
    guard!(|| add_to_list(list, Box::new(on_exception_checkpoint(dirpath, filename)?)))
}
