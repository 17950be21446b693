//! `fulmen_trainer_options` and `fulmen_trainer`: Lightning's Trainer.
use super::data::fulmen_loader;
use super::error::{fulmen_error, guard, guard_value, str_arg};
use super::handle::{self, check_out, write_out, Handle, Shared};
use super::model::copy_str;
use super::module::fulmen_lightning_module;
use super::tensor::handle::{emit, fulmen_tensor};
use crate::error::{Error, ErrorCode, Result};
use crate::parse::parse_bool;
use crate::trainer::{BatchLimit, BatchSource, ClipAlgorithm, LoggerChoice, Trainer, TrainerOptions, ValCheckInterval};
use std::ffi::c_char;
use std::path::PathBuf;

/// Trainer options set by name, as Lightning's `Trainer(...)` keyword
/// arguments. Free with `fulmen_trainer_options_free`.
pub struct fulmen_trainer_options {
    pub(crate) opts: TrainerOptions,
}

impl Handle for fulmen_trainer_options {
    const C_NAME: &'static str = "fulmen_trainer_options";
}

/// A trainer. Free with `fulmen_trainer_free`.
pub struct fulmen_trainer {
    pub(crate) inner: Trainer,
}

impl Handle for fulmen_trainer {
    const C_NAME: &'static str = "fulmen_trainer";
}

const KEYS: &str = "max_epochs, min_epochs, max_steps, min_steps, max_time, limit_train_batches, limit_val_batches, \
limit_test_batches, limit_predict_batches, val_check_interval, check_val_every_n_epoch, num_sanity_val_steps, \
accumulate_grad_batches, gradient_clip_val, gradient_clip_algorithm, fast_dev_run, overfit_batches, deterministic, \
log_every_n_steps, seed, default_root_dir, enable_progress_bar, enable_checkpointing, enable_model_summary, \
inference_mode, logger, detect_nonfinite_loss, detect_anomaly, callback_timeout, handle_signals, accelerator, devices, precision, strategy, num_nodes, \
process_group_backend, ddp_timeout";

fn parse_int(key: &str, v: &str) -> Result<i64> {
    v.trim().parse::<i64>().map_err(|_| Error::invalid(format!("option {key}: {v:?} is not an integer")))
}

fn parse_opt_int(key: &str, v: &str) -> Result<Option<i64>> {
    if v.trim().eq_ignore_ascii_case("none") {
        Ok(None)
    } else {
        parse_int(key, v).map(Some)
    }
}

/// A number written with a '.' or an exponent is a float (a fraction);
/// otherwise an integer (a count), as Lightning tells 1.0 from 1.
fn is_float_text(v: &str) -> bool {
    v.contains(['.', 'e', 'E'])
}

fn parse_number(key: &str, v: &str) -> Result<f64> {
    v.trim().parse::<f64>().map_err(|_| Error::invalid(format!("option {key}: {v:?} is not a number")))
}

fn parse_limit(key: &str, v: &str) -> Result<BatchLimit> {
    let v = v.trim();
    let limit = if is_float_text(v) {
        let f = parse_number(key, v)?;
        if !(0.0..=1.0).contains(&f) {
            return Err(Error::invalid(format!(
                "option {key}: a fraction must be in [0.0, 1.0], got {v}; give a whole number for a count"
            )));
        }
        if f == 1.0 {
            BatchLimit::All
        } else {
            BatchLimit::Fraction(f)
        }
    } else {
        let n = parse_int(key, v)?;
        if n < 0 {
            return Err(Error::invalid(format!("option {key}: {n} batches is negative")));
        }
        BatchLimit::Count(n as usize)
    };
    Ok(limit)
}

/// Applies one `key = value` option.
pub(crate) fn set_option(o: &mut TrainerOptions, key: &str, value: &str) -> Result<()> {
    let v = value.trim();
    match key {
        "max_epochs" => o.max_epochs = parse_opt_int(key, v)?,
        "min_epochs" => o.min_epochs = parse_opt_int(key, v)?,
        "max_steps" => o.max_steps = parse_int(key, v)?,
        "min_steps" => o.min_steps = parse_opt_int(key, v)?,
        "max_time" => {
            o.max_time = if v.eq_ignore_ascii_case("none") {
                None
            } else {
                Some(crate::callbacks::timer::parse_duration(v).map_err(|e| e.context("option max_time"))?)
            }
        }
        "limit_train_batches" => o.limit_train_batches = parse_limit(key, v)?,
        "limit_val_batches" => o.limit_val_batches = parse_limit(key, v)?,
        "limit_test_batches" => o.limit_test_batches = parse_limit(key, v)?,
        "limit_predict_batches" => o.limit_predict_batches = parse_limit(key, v)?,
        "overfit_batches" => o.overfit_batches = parse_limit(key, v)?,
        "val_check_interval" => {
            o.val_check_interval = if is_float_text(v) {
                ValCheckInterval::Fraction(parse_number(key, v)?)
            } else {
                let n = parse_int(key, v)?;
                if n < 1 {
                    return Err(Error::invalid(format!("option val_check_interval: {n} batches must be >= 1")));
                }
                ValCheckInterval::Batches(n as usize)
            }
        }
        "check_val_every_n_epoch" => o.check_val_every_n_epoch = parse_opt_int(key, v)?,
        "num_sanity_val_steps" => o.num_sanity_val_steps = parse_int(key, v)?,
        "accumulate_grad_batches" => o.accumulate_grad_batches = parse_int(key, v)?,
        "gradient_clip_val" => {
            o.gradient_clip_val = if v.eq_ignore_ascii_case("none") { None } else { Some(parse_number(key, v)?) }
        }
        "gradient_clip_algorithm" => {
            o.gradient_clip_algorithm = match v {
                "norm" => ClipAlgorithm::Norm,
                "value" => ClipAlgorithm::Value,
                _ => {
                    return Err(Error::invalid(format!(
                        "option gradient_clip_algorithm: {v:?} is not \"norm\" or \"value\""
                    )))
                }
            }
        }
        "fast_dev_run" => {
            o.fast_dev_run = match parse_bool(key, v) {
                Ok(b) => i64::from(b),
                Err(_) => parse_int(key, v).map_err(|_| {
                    Error::invalid(format!("option fast_dev_run: {v:?} is not a boolean or a batch count"))
                })?,
            }
        }
        "deterministic" => o.deterministic = parse_bool(key, v)?,
        "log_every_n_steps" => o.log_every_n_steps = parse_int(key, v)?,
        "seed" => {
            o.seed = if v.eq_ignore_ascii_case("none") {
                None
            } else {
                Some(
                    v.parse::<u64>()
                        .map_err(|_| Error::invalid(format!("option seed: {v:?} is not a non-negative integer")))?,
                )
            };
        }
        "default_root_dir" => {
            if value.is_empty() {
                return Err(Error::invalid("option default_root_dir: empty path"));
            }
            o.default_root_dir = PathBuf::from(value);
        }
        "enable_progress_bar" => o.enable_progress_bar = parse_bool(key, v)?,
        "enable_checkpointing" => o.enable_checkpointing = parse_bool(key, v)?,
        "enable_model_summary" => o.enable_model_summary = parse_bool(key, v)?,
        "inference_mode" => o.inference_mode = parse_bool(key, v)?,
        "logger" => {
            o.logger = match parse_bool(key, v) {
                Ok(b) => LoggerChoice { csv: b, tensorboard: b },
                Err(_) => {
                    let mut c = LoggerChoice { csv: false, tensorboard: false };
                    for part in v.split(',').map(str::trim) {
                        match part {
                            "csv" => c.csv = true,
                            "tensorboard" => c.tensorboard = true,
                            _ => {
                                return Err(Error::invalid(format!(
                                    "option logger: {part:?} is not true, false, \"csv\" or \"tensorboard\""
                                )))
                            }
                        }
                    }
                    c
                }
            }
        }
        "detect_nonfinite_loss" => o.detect_nonfinite_loss = parse_bool(key, v)?,
        "detect_anomaly" => o.detect_anomaly = parse_bool(key, v)?,
        "handle_signals" => o.handle_signals = parse_bool(key, v)?,
        "callback_timeout" => {
            o.callback_timeout = if v.eq_ignore_ascii_case("none") || v == "0" {
                None
            } else {
                Some(crate::callbacks::timer::parse_duration(v).map_err(|e| e.context(format!("option {key}")))?)
            }
        }
        "accelerator" => {
            crate::accelerators::registry::resolve(v)?;
            o.accelerator = v.to_string();
        }
        "devices" => o.devices = v.to_string(),
        "strategy" => {
            let mut spec = crate::strategies::lookup(v)?;
            let old = &o.strategy;
            spec.num_nodes = old.num_nodes;
            spec.timeout = old.timeout;
            spec.process_group_backend.clone_from(&old.process_group_backend);
            o.strategy = spec;
        }
        "num_nodes" => o.strategy.set("num_nodes", v)?,
        "process_group_backend" => o.strategy.set("process_group_backend", v)?,
        "ddp_timeout" => o.strategy.set("timeout", v)?,
        "precision" => {
            o.precision = v.to_string();
            o.grad_scaler = None;
        }
        _ => return Err(Error::invalid(format!("unknown trainer option {key:?}; known options: {KEYS}"))),
    }
    o.validate().map_err(|e| e.context(format!("option {key}")))
}

/// Creates trainer options with Lightning's defaults: max_epochs 1000 when
/// neither max_epochs nor max_steps is set, 2 sanity-check validation
/// batches, log_every_n_steps 50, progress bar, model summary, CSV and
/// TensorBoard loggers and a checkpoint of the latest epoch, all under
/// default_root_dir "."; accelerator and devices "auto", precision
/// "32-true".
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_new(out: *mut *mut fulmen_trainer_options) -> *mut fulmen_error {
    guard("fulmen_trainer_options_new", || {
        check_out(out, "out")?;
        out.write(handle::into_raw(fulmen_trainer_options { opts: TrainerOptions::default() }));
        Ok(())
    })
}

/// Sets option `key` from its text form, as Lightning's `Trainer(...)`
/// keyword arguments. Numbers written with '.' or an exponent are floats
/// (fractions), without them integers (counts): `limit_train_batches` "1.0"
/// is every batch, "1" is one batch. Keys: `max_epochs`, `min_epochs`,
/// `max_steps`, `min_steps` (int, "none"), `max_time` (seconds or
/// "DD:HH:MM:SS"), `limit_{train,val,test,predict}_batches`,
/// `overfit_batches` (fraction or count), `val_check_interval` (fraction or
/// batch count), `check_val_every_n_epoch` (int or "none"),
/// `num_sanity_val_steps` (-1 = all), `accumulate_grad_batches`,
/// `gradient_clip_val` (number or "none"), `gradient_clip_algorithm`
/// ("norm", "value"), `fast_dev_run` (bool or batch count),
/// `deterministic`, `log_every_n_steps`, `seed` (int or "none"),
/// `default_root_dir`, `enable_progress_bar`, `enable_checkpointing`,
/// `enable_model_summary`, `inference_mode`, `logger` (bool, "csv",
/// "tensorboard", "csv,tensorboard"), `detect_nonfinite_loss`,
/// `detect_anomaly` (autograd's anomaly mode during the run: a NaN
/// gradient fails backward naming the operation), `callback_timeout`
/// (seconds or "DD:HH:MM:SS"; "none" or 0 = no limit: a host callback
/// that runs longer fails the run with FULMEN_CODE_CALLBACK when it
/// returns, since fulmen cannot interrupt host code), `handle_signals`
/// (default true: SIGINT / SIGTERM stop the run as described at the top
/// of this header; false leaves the process's signal handlers alone),
/// `accelerator` ("auto", "cpu", "cuda", "gpu", "mps", "xla", "tpu" or a
/// registered name), `devices` ("auto", "1", "-1", "0,2", ...),
/// `precision` ("32-true", "16-mixed", "bf16-mixed", "64-true",
/// "16-true", "bf16-true", legacy "32", "16", "bf16", "64"), `strategy`
/// ("auto", "single_device", "ddp", "ddp_spawn",
/// "ddp_find_unused_parameters_true", "dp", "xla", ...), `num_nodes`,
/// `process_group_backend` ("gloo", "nccl", "none" = by device),
/// `ddp_timeout` (seconds; rendezvous and collectives). An unknown
/// key or bad value is an error naming it; the options are then unchanged.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard("fulmen_trainer_options_set", || {
        let mut o = handle::borrow_mut(options, "options")?;
        let (k, v) = (str_arg(key, "key")?, str_arg(value, "value")?);
        let mut next = o.opts.clone();
        set_option(&mut next, k, v)?;
        o.opts = next;
        Ok(())
    })
}

/// Sets an integer option (see `fulmen_trainer_options_set`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_int(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: i64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_options_set_int", || {
        let mut o = handle::borrow_mut(options, "options")?;
        let mut next = o.opts.clone();
        set_option(&mut next, str_arg(key, "key")?, &value.to_string())?;
        o.opts = next;
        Ok(())
    })
}

/// Sets a numeric option such as a batch-limit fraction.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_float(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: f64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_options_set_float", || {
        let mut o = handle::borrow_mut(options, "options")?;
        let mut next = o.opts.clone();
        set_option(&mut next, str_arg(key, "key")?, &format!("{value:?}"))?;
        o.opts = next;
        Ok(())
    })
}

/// Sets a boolean option.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_bool(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: bool,
) -> *mut fulmen_error {
    guard("fulmen_trainer_options_set_bool", || {
        let mut o = handle::borrow_mut(options, "options")?;
        let mut next = o.opts.clone();
        set_option(&mut next, str_arg(key, "key")?, if value { "true" } else { "false" })?;
        o.opts = next;
        Ok(())
    })
}

/// Frees trainer options. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_free(options: *mut fulmen_trainer_options) {
    guard_value((), || drop(handle::take(options)));
}

/// Creates a trainer from `options` (copied; NULL for the defaults).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_new(
    options: *const fulmen_trainer_options,
    out: *mut *mut fulmen_trainer,
) -> *mut fulmen_error {
    guard("fulmen_trainer_new", || {
        check_out(out, "out")?;
        let opts = if options.is_null() {
            TrainerOptions::default()
        } else {
            handle::borrow(options, "options")?.opts.clone()
        };
        let inner = Trainer::new(opts)?;
        out.write(handle::into_raw(fulmen_trainer { inner }));
        Ok(())
    })
}

unsafe fn loader<'a>(p: *const fulmen_loader, arg: &str) -> Result<Shared<'a, dyn BatchSource + Send>> {
    Ok(handle::borrow(p, arg)?.map(|h| h.inner.as_ref()))
}

unsafe fn ckpt<'a>(p: *const c_char) -> Result<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        str_arg(p, "ckpt_path").map(Some)
    }
}

/// Trains `module` on `train`, validating on `val` (may be NULL) as
/// `val_check_interval` says when the module has a validation_step.
/// `ckpt_path` (may be NULL) resumes from a checkpoint: a file path,
/// "last" (the newest last/any checkpoint of this root dir) or "best" (the
/// best checkpoint of this trainer's previous fit). Callbacks run on the
/// calling thread. A failing callback stops training with an error naming
/// the callback, epoch and step; the parameters keep the last completed
/// update.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_fit(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    train: *const fulmen_loader,
    val: *const fulmen_loader,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard("fulmen_trainer_fit", || {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let tr = loader(train, "train")?;
        let v = if val.is_null() { None } else { Some(loader(val, "val")?) };
        t.inner.fit(&mut m.inner, &*tr, v.as_deref().map(|v| v as &dyn BatchSource), ckpt(ckpt_path)?)
    })
}

/// Runs the validation loop over `loader` once; `ckpt_path` (may be NULL)
/// first loads the weights of a checkpoint ("best", "last" or a path).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_validate(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard("fulmen_trainer_validate", || {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        t.inner.validate(&mut m.inner, &*self::loader(loader, "loader")?, ckpt(ckpt_path)?).map(|_| ())
    })
}

/// Runs the test loop over `loader` once; `ckpt_path` as for validate.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_test(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard("fulmen_trainer_test", || {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        t.inner.test(&mut m.inner, &*self::loader(loader, "loader")?, ckpt(ckpt_path)?).map(|_| ())
    })
}

/// Runs predict_step over `loader` and writes the outputs concatenated
/// along dimension 0 to `*out` (NULL when no step produced an output);
/// `ckpt_path` as for validate.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_predict(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    ckpt_path: *const c_char,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard("fulmen_trainer_predict", || {
        check_out(out, "out")?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        match t.inner.predict(&mut m.inner, &*self::loader(loader, "loader")?, ckpt(ckpt_path)?)? {
            Some(p) => emit(out, p),
            None => {
                out.write(std::ptr::null_mut());
                Ok(())
            }
        }
    })
}

/// Writes the latest value of a logged metric (Lightning's
/// `trainer.callback_metrics[name]`); FULMEN_CODE_INVALID_ARGUMENT names
/// the metrics that exist when `name` is not one of them.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_callback_metric(
    trainer: *const fulmen_trainer,
    name: *const c_char,
    out: *mut f64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_callback_metric", || {
        let t = handle::borrow(trainer, "trainer")?;
        let n = str_arg(name, "name")?;
        let m = t.inner.callback_metrics();
        let v = m
            .get(n)
            .copied()
            .ok_or_else(|| Error::invalid(format!("no metric {n:?}; logged: {:?}", m.keys().collect::<Vec<_>>())))?;
        write_out(out, "out", v)
    })
}

/// Writes the number of optimizer steps of the last fit.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_global_step(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_global_step", || {
        write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.global_step())
    })
}

/// Writes the number of epochs the last fit completed.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_current_epoch(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_current_epoch", || {
        write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.current_epoch())
    })
}

/// Copies the log folder of the last fit (`.../lightning_logs/version_N`)
/// into `buf` as for `fulmen_model_state_dict_name`;
/// FULMEN_CODE_INVALID_STATE when no logger ran.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_log_dir(
    trainer: *const fulmen_trainer,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard("fulmen_trainer_log_dir", || {
        let t = handle::borrow(trainer, "trainer")?;
        let d = t.inner.log_dir().ok_or_else(|| Error::new(ErrorCode::InvalidState, "no logger has run"))?;
        copy_str(&d.to_string_lossy(), buf, capacity, len_out)
    })
}

/// Which path of the trainer's ModelCheckpoint to read (`fulmen_checkpoint_path`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointPath {
    /// The best checkpoint (by the monitored metric; the latest without one).
    Best = 0,
    /// The `last.ckpt` copy (with save_last).
    Last = 1,
}

/// Copies the best or last checkpoint path of the trainer's first
/// ModelCheckpoint (the user's, else the default one) into `buf` as for
/// `fulmen_model_state_dict_name`; FULMEN_CODE_INVALID_STATE when there is
/// none yet. `which` is a `fulmen_checkpoint_path`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_checkpoint_path(
    trainer: *const fulmen_trainer,
    which: i32,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard("fulmen_trainer_checkpoint_path", || {
        let t = handle::borrow(trainer, "trainer")?;
        let cb = t
            .inner
            .checkpoint_callback()
            .ok_or_else(|| Error::new(ErrorCode::InvalidState, "the trainer has no ModelCheckpoint"))?;
        let path = match which {
            0 => &cb.best_model_path,
            1 => &cb.last_model_path,
            w => return Err(Error::invalid(format!("{w} is not a fulmen_checkpoint_path (0 best, 1 last)"))),
        };
        if path.is_empty() {
            return Err(Error::new(ErrorCode::InvalidState, "no checkpoint has been saved yet"));
        }
        copy_str(path, buf, capacity, len_out)
    })
}

/// Writes the best monitored score of the trainer's ModelCheckpoint;
/// FULMEN_CODE_INVALID_STATE when it monitors nothing or saved nothing.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_best_model_score(
    trainer: *const fulmen_trainer,
    out: *mut f64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_best_model_score", || {
        let t = handle::borrow(trainer, "trainer")?;
        let score = t.inner.checkpoint_callback().and_then(|c| c.best_model_score);
        write_out(
            out,
            "out",
            score.ok_or_else(|| Error::new(ErrorCode::InvalidState, "no monitored checkpoint has been saved"))?,
        )
    })
}

/// Frees a trainer (and the callbacks and loggers added to it). NULL or an
/// already freed handle is a no-op. Freeing a trainer whose fit (or any
/// other call) is running, from one of its callbacks or another thread,
/// is deferred until that call returns.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_free(trainer: *mut fulmen_trainer) {
    guard_value((), || drop(handle::take(trainer)));
}

/// Sets the `accelerator` option from a handle (as Lightning accepts an
/// Accelerator object); same as setting its registry name.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_accelerator(
    options: *mut fulmen_trainer_options,
    accelerator: *const super::accelerator::fulmen_accelerator,
) -> *mut fulmen_error {
    guard("fulmen_trainer_options_set_accelerator", || {
        let mut o = handle::borrow_mut(options, "options")?;
        let a = handle::borrow(accelerator, "accelerator")?;
        o.opts.accelerator = a.inner.name().to_string();
        Ok(())
    })
}
