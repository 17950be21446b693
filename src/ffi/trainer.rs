//! `fulmen_trainer_options` and `fulmen_trainer`: Lightning's Trainer.
use super::data::fulmen_loader;
use super::error::{fulmen_error, guard, guard_value, str_arg};
use super::handle::{self, check_out, write_out, Handle};
use super::model::copy_str;
use super::module::fulmen_lightning_module;
use super::tensor::handle::{emit, fulmen_tensor};
use crate::error::{Error, ErrorCode, Result};
use crate::trainer::{BatchLimit, BatchSource, Trainer, TrainerOptions};
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

const KEYS: &str = "max_epochs, max_steps, limit_train_batches, limit_val_batches, limit_test_batches, \
limit_predict_batches, log_every_n_steps, seed, default_root_dir, enable_progress_bar, logger, detect_nonfinite_loss";

fn parse_int(key: &str, v: &str) -> Result<i64> {
    v.trim().parse::<i64>().map_err(|_| Error::invalid(format!("option {key}: {v:?} is not an integer")))
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(format!("option {key}: {v:?} is not a boolean (true/false)"))),
    }
}

fn parse_limit(key: &str, v: &str) -> Result<BatchLimit> {
    let x = v.trim().parse::<f64>().map_err(|_| Error::invalid(format!("option {key}: {v:?} is not a number")))?;
    BatchLimit::from_f64(x).map_err(|e| e.context(format!("option {key}")))
}

/// Applies one `key = value` option.
pub(crate) fn set_option(o: &mut TrainerOptions, key: &str, value: &str) -> Result<()> {
    match key {
        "max_epochs" => {
            let v = value.trim();
            o.max_epochs = if v.eq_ignore_ascii_case("none") { None } else { Some(parse_int(key, v)?) };
        }
        "max_steps" => o.max_steps = parse_int(key, value)?,
        "limit_train_batches" => o.limit_train_batches = parse_limit(key, value)?,
        "limit_val_batches" => o.limit_val_batches = parse_limit(key, value)?,
        "limit_test_batches" => o.limit_test_batches = parse_limit(key, value)?,
        "limit_predict_batches" => o.limit_predict_batches = parse_limit(key, value)?,
        "log_every_n_steps" => o.log_every_n_steps = parse_int(key, value)?,
        "seed" => {
            let v = value.trim();
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
        "enable_progress_bar" => o.enable_progress_bar = parse_bool(key, value)?,
        "logger" => o.enable_csv_logger = parse_bool(key, value)?,
        "detect_nonfinite_loss" => o.detect_nonfinite_loss = parse_bool(key, value)?,
        _ => return Err(Error::invalid(format!("unknown trainer option {key:?}; known options: {KEYS}"))),
    }
    o.validate().map_err(|e| e.context(format!("option {key}")))
}

/// Creates trainer options with Lightning's defaults (max_epochs 1000 when
/// neither max_epochs nor max_steps is set, log_every_n_steps 50, progress
/// and CSV logger on, default_root_dir ".").
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_new(out: *mut *mut fulmen_trainer_options) -> *mut fulmen_error {
    guard("fulmen_trainer_options_new", || {
        check_out(out, "out")?;
        out.write(handle::into_raw(fulmen_trainer_options { opts: TrainerOptions::default() }));
        Ok(())
    })
}

/// Sets option `key` from its text form: `max_epochs` (int or "none"),
/// `max_steps` (int, -1 = none), `limit_{train,val,test,predict}_batches`
/// (fraction in [0,1] or whole count), `log_every_n_steps`, `seed` (int or
/// "none"), `default_root_dir` (path), `enable_progress_bar`, `logger` (CSV
/// logger), `detect_nonfinite_loss` (booleans). An unknown key or bad value
/// is an error naming it; the options are then unchanged.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard("fulmen_trainer_options_set", || {
        let o = handle::borrow_mut(options, "options")?;
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
        let o = handle::borrow_mut(options, "options")?;
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
        let o = handle::borrow_mut(options, "options")?;
        let mut next = o.opts.clone();
        set_option(&mut next, str_arg(key, "key")?, &value.to_string())?;
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
        let o = handle::borrow_mut(options, "options")?;
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

unsafe fn loader<'a>(p: *const fulmen_loader, arg: &str) -> Result<&'a dyn BatchSource> {
    Ok(handle::borrow(p, arg)?.inner.as_ref())
}

/// Trains `module` on `train`, validating on `val` (may be NULL) after
/// every epoch when the module has a validation_step. Callbacks run on the
/// calling thread. A failing callback stops training with an error naming
/// the callback, epoch and step; the parameters keep the last completed
/// update.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_fit(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    train: *const fulmen_loader,
    val: *const fulmen_loader,
) -> *mut fulmen_error {
    guard("fulmen_trainer_fit", || {
        let t = handle::borrow_mut(trainer, "trainer")?;
        let m = handle::borrow_mut(module, "module")?;
        let tr = loader(train, "train")?;
        let v = if val.is_null() { None } else { Some(loader(val, "val")?) };
        t.inner.fit(&mut m.inner, tr, v)
    })
}

/// Runs the validation loop over `loader` once.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_validate(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
) -> *mut fulmen_error {
    guard("fulmen_trainer_validate", || {
        let t = handle::borrow_mut(trainer, "trainer")?;
        let m = handle::borrow_mut(module, "module")?;
        t.inner.validate(&mut m.inner, self::loader(loader, "loader")?).map(|_| ())
    })
}

/// Runs the test loop over `loader` once.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_test(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
) -> *mut fulmen_error {
    guard("fulmen_trainer_test", || {
        let t = handle::borrow_mut(trainer, "trainer")?;
        let m = handle::borrow_mut(module, "module")?;
        t.inner.test(&mut m.inner, self::loader(loader, "loader")?).map(|_| ())
    })
}

/// Runs predict_step over `loader` and writes the outputs concatenated
/// along dimension 0 to `*out` (NULL when no step produced an output).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_predict(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard("fulmen_trainer_predict", || {
        check_out(out, "out")?;
        let t = handle::borrow_mut(trainer, "trainer")?;
        let m = handle::borrow_mut(module, "module")?;
        match t.inner.predict(&mut m.inner, self::loader(loader, "loader")?)? {
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
        let v = t.inner.callback_metrics.get(n).copied().ok_or_else(|| {
            Error::invalid(format!(
                "no metric {n:?}; logged: {:?}",
                t.inner.callback_metrics.keys().collect::<Vec<_>>()
            ))
        })?;
        write_out(out, "out", v)
    })
}

/// Writes the number of optimizer steps of the last fit.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_global_step(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_global_step", || write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.global_step))
}

/// Writes the number of epochs the last fit completed.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_current_epoch(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard("fulmen_trainer_current_epoch", || {
        write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.current_epoch)
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
        let d = t.inner.log_dir.as_ref().ok_or_else(|| Error::new(ErrorCode::InvalidState, "no logger has run"))?;
        copy_str(&d.to_string_lossy(), buf, capacity, len_out)
    })
}

/// Frees a trainer. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_free(trainer: *mut fulmen_trainer) {
    guard_value((), || drop(handle::take(trainer)));
}
