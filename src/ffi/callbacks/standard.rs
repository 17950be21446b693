//! Adding callbacks to a trainer: the built-in ones (ModelCheckpoint,
//! EarlyStopping, LearningRateMonitor, Timer) and host callbacks.
use crate::callbacks::{
    timer, DeviceStatsMonitor, EarlyStopping, EarlyStoppingOptions, LearningRateMonitor, Mode, ModelCheckpoint,
    ModelCheckpointOptions, Timer,
};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, opt_str, str_arg};
use crate::ffi::base::handle;
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

pub(crate) fn mode(v: i32) -> Result<Mode> {
    match v {
        0 => Ok(Mode::Min),
        1 => Ok(Mode::Max),
        m => Err(Error::invalid(format!("mode must be 0 (min) or 1 (max), got {m}"))),
    }
}

fn tristate(v: i32, what: &str) -> Result<Option<bool>> {
    match v {
        -1 => Ok(None),
        0 => Ok(Some(false)),
        1 => Ok(Some(true)),
        x => Err(Error::invalid(format!("{what} must be -1 (auto), 0 or 1, got {x}"))),
    }
}

/// Options of `fulmen_trainer_add_model_checkpoint`; defaults (Lightning's)
/// from `fulmen_model_checkpoint_options_default`. Strings are copied.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_model_checkpoint_options {
    /// Folder; NULL = `<log dir>/checkpoints`.
    pub dirpath: *const c_char,
    /// Name template such as "{epoch}-{val_loss:.3f}"; NULL = "{epoch}-{step}".
    pub filename: *const c_char,
    /// Metric to rank by; NULL = keep the latest.
    pub monitor: *const c_char,
    /// A `fulmen_mode`: FULMEN_MODE_MIN (default) or FULMEN_MODE_MAX.
    pub mode: i32,
    /// Best checkpoints to keep (-1 all, 0 none; default 1).
    pub save_top_k: i64,
    /// Also write `last.ckpt` (default false).
    pub save_last: bool,
    /// Save every n optimizer steps (default 0: off).
    pub every_n_train_steps: i64,
    /// Save every n epochs (default 1).
    pub every_n_epochs: i64,
    /// Save only weights (default false).
    pub save_weights_only: bool,
    /// `name=value` in file names (default true).
    pub auto_insert_metric_name: bool,
    /// -1 auto (default), 0 after validation, 1 at training epoch end.
    pub save_on_train_epoch_end: i32,
}

/// Lightning's ModelCheckpoint defaults.
#[no_mangle]
pub extern "C" fn fulmen_model_checkpoint_options_default() -> fulmen_model_checkpoint_options {
    let d = ModelCheckpointOptions::default();
    fulmen_model_checkpoint_options {
        dirpath: std::ptr::null(),
        filename: std::ptr::null(),
        monitor: std::ptr::null(),
        mode: 0,
        save_top_k: d.save_top_k,
        save_last: d.save_last,
        every_n_train_steps: d.every_n_train_steps,
        every_n_epochs: d.every_n_epochs,
        save_weights_only: d.save_weights_only,
        auto_insert_metric_name: d.auto_insert_metric_name,
        save_on_train_epoch_end: -1,
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
        let o = options.as_ref().copied().unwrap_or_else(|| fulmen_model_checkpoint_options_default());
        let opts = ModelCheckpointOptions {
            dirpath: opt_str(o.dirpath, "dirpath")?.map(PathBuf::from),
            filename: opt_str(o.filename, "filename")?,
            monitor: opt_str(o.monitor, "monitor")?,
            mode: mode(o.mode)?,
            save_top_k: o.save_top_k,
            save_last: o.save_last,
            every_n_train_steps: o.every_n_train_steps,
            every_n_epochs: o.every_n_epochs,
            save_weights_only: o.save_weights_only,
            auto_insert_metric_name: o.auto_insert_metric_name,
            save_on_train_epoch_end: tristate(o.save_on_train_epoch_end, "save_on_train_epoch_end")?,
        };
        t.inner.add_callback(Box::new(ModelCheckpoint::new(opts)?));
        Ok(())
    })
}

/// Options of `fulmen_trainer_add_early_stopping`; defaults from
/// `fulmen_early_stopping_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_early_stopping_options {
    /// Metric to watch (required).
    pub monitor: *const c_char,
    /// Smallest change that counts as an improvement (default 0).
    pub min_delta: f64,
    /// Checks without improvement before stopping (default 3).
    pub patience: i64,
    /// A `fulmen_mode`: FULMEN_MODE_MIN (default) or FULMEN_MODE_MAX.
    pub mode: i32,
    /// A missing metric is an error (default true).
    pub strict: bool,
    /// Stop on NaN or infinite values (default true).
    pub check_finite: bool,
    /// Stop once better than this; NaN = none (default).
    pub stopping_threshold: f64,
    /// Stop once worse than this; NaN = none (default).
    pub divergence_threshold: f64,
    /// -1 auto (default), 0 after validation, 1 at training epoch end.
    pub check_on_train_epoch_end: i32,
}

/// Lightning's EarlyStopping defaults (monitor NULL: set it).
#[no_mangle]
pub extern "C" fn fulmen_early_stopping_options_default() -> fulmen_early_stopping_options {
    let d = EarlyStoppingOptions::new("x");
    fulmen_early_stopping_options {
        monitor: std::ptr::null(),
        min_delta: d.min_delta,
        patience: d.patience,
        mode: 0,
        strict: d.strict,
        check_finite: d.check_finite,
        stopping_threshold: f64::NAN,
        divergence_threshold: f64::NAN,
        check_on_train_epoch_end: -1,
    }
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
        let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
        let monitor = opt_str(o.monitor, "monitor")?
            .ok_or_else(|| Error::new(ErrorCode::NullArgument, "options.monitor is NULL"))?;
        let opts = EarlyStoppingOptions {
            monitor,
            min_delta: o.min_delta,
            patience: o.patience,
            mode: mode(o.mode)?,
            strict: o.strict,
            check_finite: o.check_finite,
            stopping_threshold: (!o.stopping_threshold.is_nan()).then_some(o.stopping_threshold),
            divergence_threshold: (!o.divergence_threshold.is_nan()).then_some(o.divergence_threshold),
            check_on_train_epoch_end: tristate(o.check_on_train_epoch_end, "check_on_train_epoch_end")?,
        };
        t.inner.add_callback(Box::new(EarlyStopping::new(opts)?));
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
    let interval = opt_str(logging_interval, "logging_interval")?.unwrap_or_default();
    t.inner.add_callback(Box::new(LearningRateMonitor::with_options(&interval, log_momentum, log_weight_decay)?));
    Ok(())
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
        let cpu = tristate(cpu_stats, "cpu_stats")?;
        t.inner.add_callback(Box::new(DeviceStatsMonitor::new(cpu)));
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
        let d = match opt_str(duration, "duration")? {
            Some(s) => Some(timer::parse_duration(&s)?),
            None => None,
        };
        let interval = opt_str(interval, "interval")?.unwrap_or_else(|| "step".into());
        t.inner.add_callback(Box::new(Timer::new(d, &interval)?));
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
