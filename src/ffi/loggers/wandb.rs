//! The W&B logger as a `fulmen_logger` (Lightning's `WandbLogger` in W&B's
//! offline mode): made here, its own settings and readers; logging,
//! finalize, free and adding it to a trainer are the `fulmen_logger_*`
//! calls of every logger.
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out};
use crate::ffi::loggers::file_logger::{fulmen_logger, with_wandb, LoggerKind};
use crate::ffi::loggers::mlflow::opt_str;
use crate::ffi::nn::model::copy_str;
use crate::loggers::{SharedWandbLogger, WandbLogger};
use std::ffi::c_char;

/// Creates a W&B logger (Lightning's `WandbLogger(project=...,
/// save_dir=..., offline=True)`): the run is written under `save_dir`
/// (NULL or "": the working directory) as W&B's offline runs are, in
/// `save_dir/wandb/offline-run-<YYYYMMDD_HHMMSS>-<run id>/run-<run
/// id>.wandb`, which `wandb sync <that folder>` uploads to the project
/// `project` (NULL or "": Lightning's "lightning_logs"). Nothing is made
/// before the first use, which makes the folder and writes the run
/// (its name, id, settings, tags, host and start time) and Lightning's
/// metric definitions (`trainer/global_step`, and every metric stepped by
/// it). Each `log_metrics` is a history row with `trainer/global_step` =
/// the step, `_step`, `_runtime` and `_timestamp` (metrics of those four
/// names are dropped: W&B's own take their place), and the matching
/// summary update; hyperparameters go to the run's config (numbers,
/// true and false as such, other text as strings). `finalize` makes the
/// file durable and keeps the run open, as Lightning's logger; the run
/// ends (its exit record: code 1 after a "failed" finalize, else 0) with
/// `fulmen_logger_wandb_finish`, or when the logger is freed and no
/// trainer holds it (the last finalize decides the code). With the logger first among a trainer's loggers, the
/// trainer's log folder is `save_dir` and ModelCheckpoint writes to
/// `save_dir/project/<run id>/checkpoints`, as Lightning. Online
/// streaming, media, tables and checkpoint artifacts (`log_model`) are
/// not written. The caller owns `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8; a project holding one
/// of `/ \ # ? % :`, or "." or "..", which W&B refuses).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_new(
    save_dir: *const c_char,
    project: *const c_char,
    out: *mut *mut fulmen_logger,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let dir = opt_str(save_dir, "save_dir")?;
        let project = opt_str(project, "project")?;
        let logger = WandbLogger::new(dir, project)?;
        out.write(handle::into_raw(fulmen_logger { inner: LoggerKind::Wandb(SharedWandbLogger::new(logger)) }));
        Ok(())
    })
}

/// Names the run (Lightning's `name`: W&B's display name); NULL or "" for
/// none. Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, not a W&B logger),
/// FULMEN_CODE_INVALID_STATE (the run started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_set_name(
    logger: *mut fulmen_logger,
    name: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let n = opt_str(name, "name")?;
        with_wandb(logger, |l| l.set_name(n))
    })
}

/// Sets the run's id (Lightning's `id` / `version`; NULL or "" for a new
/// random id of eight lowercase letters and digits, as W&B makes them):
/// at most 64 letters, digits, '-' and '_'. Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (other characters, too long, not a
/// W&B logger), FULMEN_CODE_INVALID_STATE (the run started); at the first
/// use FULMEN_CODE_IO if that id's run folder for this second exists.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_set_id(
    logger: *mut fulmen_logger,
    id: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let id = opt_str(id, "id")?;
        with_wandb(logger, |l| l.set_id(id))
    })
}

/// Sets one of `wandb.init`'s run settings that Lightning's logger passes
/// on: `key` "entity", "group", "job_type" or "notes" (NULL or "" `value`
/// for none). Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (another key, not UTF-8, not a W&B
/// logger), FULMEN_CODE_INVALID_STATE (the run started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_set_setting(
    logger: *mut fulmen_logger,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (k, v) = (str_arg(key, "key")?, opt_str(value, "value")?);
        with_wandb(logger, |l| l.set_setting(k, v))
    })
}

/// Adds a tag of the run (`wandb.init(tags=[...])`; one given twice is
/// kept once). Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (empty, not UTF-8, not a W&B
/// logger), FULMEN_CODE_INVALID_STATE (the run started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_add_tag(
    logger: *mut fulmen_logger,
    tag: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let t = str_arg(tag, "tag")?;
        with_wandb(logger, |l| l.add_tag(t))
    })
}

/// Copies the run's id (Lightning's `version`) into `buf` as for
/// `fulmen_model_state_dict_name`, starting the run if the logger was not
/// used yet.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a W&B logger), FULMEN_CODE_IO
/// (the run folder or file cannot be made), FULMEN_CODE_OUT_OF_RANGE (buf
/// too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_run_id(
    logger: *mut fulmen_logger,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let id = with_wandb(logger, |l| l.run_id())?;
        copy_str(&id, buf, capacity, len_out)
    })
}

/// Copies the run's folder (the one `wandb sync` takes) into `buf` as for
/// `fulmen_model_state_dict_name`, starting the run if the logger was not
/// used yet.
///
/// Errors: those of `fulmen_logger_wandb_run_id`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_run_dir(
    logger: *mut fulmen_logger,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let dir = with_wandb(logger, |l| l.run_folder())?;
        copy_str(&dir.to_string_lossy(), buf, capacity, len_out)
    })
}

/// Ends the run now (`wandb.finish(exit_code)`): writes its exit record
/// with `exit_code` (0 for a run that finished) and makes the file
/// durable; later logging fails with FULMEN_CODE_INVALID_STATE, a second
/// finish does nothing. A logger never used starts and ends an empty run.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a W&B logger), FULMEN_CODE_IO.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_wandb_finish(logger: *mut fulmen_logger, exit_code: i32) -> *mut fulmen_error {
    guard!(|| with_wandb(logger, |l| l.finish(exit_code)))
}
