//! Adding callbacks to a trainer: the built-in ones (ModelCheckpoint,
//! EarlyStopping, LearningRateMonitor, Timer) and host callbacks.
use crate::callbacks::{timer, DeviceStatsMonitor, EarlyStopping, LearningRateMonitor, Mode, ModelCheckpoint, Timer};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, opt_str, str_arg};
use crate::ffi::base::handle;
use crate::ffi::callbacks::gen_options::{
    fulmen_early_stopping_options, fulmen_model_checkpoint_options, fulmen_model_checkpoint_options_default,
};
use crate::ffi::callbacks::hooks::{fulmen_callback_vtable, host_callback};
use crate::ffi::trainer::runs::fulmen_trainer;
use std::ffi::c_char;
use std::path::PathBuf;

/// Whether a lower or a higher monitored value is better (`fulmen_mode`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorMode {
    /// Lower is better (losses).
    Min = 0,
    /// Higher is better (accuracies).
    Max = 1,
}

/// The core's mode of a `fulmen_mode` value.
pub(crate) fn mode(v: i32) -> Result<Mode> {
    match v {
        0 => Ok(Mode::Min),
        1 => Ok(Mode::Max),
        m => Err(Error::invalid(format!("mode must be 0 (min) or 1 (max), got {m}"))),
    }
}

/// The `fulmen_mode` value of the core's mode.
pub(crate) fn mode_code(m: Mode) -> i32 {
    match m {
        Mode::Min => MonitorMode::Min as i32,
        Mode::Max => MonitorMode::Max as i32,
    }
}

/// -1 (auto: `None`), 0 or 1 as an optional bool; `what` names the field
/// in the error.
pub(crate) fn tristate(v: i32, what: &str) -> Result<Option<bool>> {
    match v {
        -1 => Ok(None),
        0 => Ok(Some(false)),
        1 => Ok(Some(true)),
        x => Err(Error::invalid(format!("{what} must be -1 (auto), 0 or 1, got {x}"))),
    }
}

/// Adds a ModelCheckpoint (`options` may be NULL for the defaults). The
/// default checkpoint callback is then not added.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a string not UTF-8, a bad filename
/// template, `mode` or `save_on_train_epoch_end` out of its values,
/// `save_top_k` < -1 or > 1 without `monitor`, negative `every_n_*`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_model_checkpoint(
    trainer: *mut fulmen_trainer,
    options: *const fulmen_model_checkpoint_options,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        t.inner.add_callback(Box::new(model_checkpoint(options)?));
        Ok(())
    })
}

/// The ModelCheckpoint `options` describe (NULL: the defaults).
pub(crate) unsafe fn model_checkpoint(options: *const fulmen_model_checkpoint_options) -> Result<ModelCheckpoint> {
    let o = options.as_ref().copied().unwrap_or_else(|| fulmen_model_checkpoint_options_default());
    let opts = o.to_core(
        opt_str(o.dirpath, "dirpath")?.map(PathBuf::from),
        opt_str(o.filename, "filename")?,
        opt_str(o.monitor, "monitor")?,
    )?;
    ModelCheckpoint::new(opts)
}

/// The EarlyStopping `options` describe.
pub(crate) unsafe fn early_stopping(options: *const fulmen_early_stopping_options) -> Result<EarlyStopping> {
    let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
    let monitor =
        opt_str(o.monitor, "monitor")?.ok_or_else(|| Error::new(ErrorCode::NullArgument, "options.monitor is NULL"))?;
    EarlyStopping::new(o.to_core(monitor)?)
}

/// Adds an EarlyStopping callback.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`monitor` empty or not UTF-8, negative
/// `patience`, `mode` or `check_on_train_epoch_end` out of its values).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_early_stopping(
    trainer: *mut fulmen_trainer,
    options: *const fulmen_early_stopping_options,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        t.inner.add_callback(Box::new(early_stopping(options)?));
        Ok(())
    })
}

/// Adds a LearningRateMonitor logging `lr-<Optimizer>` every
/// `log_every_n_steps` ("step"), at each epoch start ("epoch"), or both
/// (NULL). Same as `fulmen_trainer_add_lr_monitor_with(trainer,
/// logging_interval, false, false)`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`logging_interval` not "step",
/// "epoch", "none" or "", or not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_lr_monitor(
    trainer: *mut fulmen_trainer,
    logging_interval: *const c_char,
) -> *mut fulmen_error {
    guard!(|| add_lr_monitor(trainer, logging_interval, false, false))
}

/// Adds a LearningRateMonitor (Lightning's): `lr-<Optimizer>` (`-N` for a
/// repeated class, `/pgN` per group of several) every `log_every_n_steps`
/// ("step"), at each epoch start ("epoch"), or both (NULL: a batch start
/// logs the step-interval schedulers' optimizers, an epoch start the
/// epoch-interval ones, optimizers without a scheduler at both). With
/// `log_momentum`, also `<name>-momentum` (momentum, beta1 for the Adam
/// family, 0 without either); with `log_weight_decay`,
/// `<name>-weight_decay`. The values are callback metrics too. As
/// Lightning's, it needs a logger: a fit of a trainer with
/// `logger=false` and no logger added fails at its start with
/// FULMEN_CODE_INVALID_ARGUMENT.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`logging_interval` not "step",
/// "epoch", "none" or "", or not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_lr_monitor_with(
    trainer: *mut fulmen_trainer,
    logging_interval: *const c_char,
    log_momentum: bool,
    log_weight_decay: bool,
) -> *mut fulmen_error {
    guard!(|| { add_lr_monitor(trainer, logging_interval, log_momentum, log_weight_decay) })
}

unsafe fn add_lr_monitor(
    trainer: *mut fulmen_trainer,
    logging_interval: *const c_char,
    log_momentum: bool,
    log_weight_decay: bool,
) -> Result<()> {
    let mut t = handle::borrow_mut(trainer, "trainer")?;
    t.inner.add_callback(Box::new(lr_monitor(logging_interval, log_momentum, log_weight_decay)?));
    Ok(())
}

/// The LearningRateMonitor the arguments describe.
pub(crate) unsafe fn lr_monitor(
    logging_interval: *const c_char,
    log_momentum: bool,
    log_weight_decay: bool,
) -> Result<LearningRateMonitor> {
    let interval = opt_str(logging_interval, "logging_interval")?.unwrap_or_default();
    LearningRateMonitor::with_options(&interval, log_momentum, log_weight_decay)
}

/// Adds a DeviceStatsMonitor (Lightning's): when the loggers are due
/// (every `log_every_n_steps`), the accelerator's device statistics (on the
/// CPU: `cpu_percent`, `cpu_vm_percent`, `cpu_swap_percent`,
/// `cpu_rss_bytes`; on CUDA the allocator's) go to the loggers around
/// every training, validation and test batch as
/// `DeviceStatsMonitor.on_train_batch_start/<stat>` and so on.
/// `cpu_stats`: -1 (Lightning's None) the device's own statistics, 1 adds
/// the CPU's on another device, 0 logs nothing on a CPU. As Lightning's, it
/// needs a logger: a fit of a trainer with `logger=false` and no logger
/// added fails at its setup with FULMEN_CODE_INVALID_ARGUMENT.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`cpu_stats` not -1, 0 or 1).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_device_stats_monitor(
    trainer: *mut fulmen_trainer,
    cpu_stats: i32,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        t.inner.add_callback(Box::new(DeviceStatsMonitor::new(tristate(cpu_stats, "cpu_stats")?)));
        Ok(())
    })
}

/// Adds a Timer stopping training after `duration` (seconds, or
/// "DD:HH:MM:SS"; NULL only measures), checked every "step" or "epoch".
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`duration` neither non-negative
/// seconds nor "DD:HH:MM:SS", `interval` not "step" or "epoch", a string not
/// UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_timer(
    trainer: *mut fulmen_trainer,
    duration: *const c_char,
    interval: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        t.inner.add_callback(Box::new(timer_callback(duration, interval)?));
        Ok(())
    })
}

/// Adds a host callback named `name` (which keys its entries in
/// checkpoints); `vtable` is copied. Its hooks run before the
/// LightningModule's, in the order callbacks were added. On failure
/// `userdata_free` is not called.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`name` empty or not UTF-8,
/// `struct_size` too small, `on_hook` NULL).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_callback(
    trainer: *mut fulmen_trainer,
    name: *const c_char,
    vtable: *const fulmen_callback_vtable,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let cb = host_callback(str_arg(name, "name")?, vtable)?;
        t.inner.add_callback(Box::new(cb));
        Ok(())
    })
}

/// The Timer of `duration` (NULL: none) checked every `interval` (NULL:
/// "step").
pub(crate) unsafe fn timer_callback(duration: *const c_char, interval: *const c_char) -> Result<Timer> {
    let d = match opt_str(duration, "duration")? {
        Some(s) => Some(timer::parse_duration(&s)?),
        None => None,
    };
    let interval = opt_str(interval, "interval")?.unwrap_or_else(|| "step".into());
    Timer::new(d, &interval)
}
