//! The MLflow logger as a `fulmen_logger` (Lightning's `MLFlowLogger`):
//! made here, its own settings and readers; logging, finalize, free and
//! adding it to a trainer are the `fulmen_logger_*` calls of every logger.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out};
use crate::ffi::loggers::file_logger::{fulmen_logger, with_mlflow, LoggerKind};
use crate::ffi::nn::model::copy_str;
use crate::loggers::{LogModel, MlflowLogger, SharedMlflowLogger};
use std::ffi::c_char;

/// `log_model`: no checkpoint uploaded (Lightning's `log_model=False`).
pub const FULMEN_MLFLOW_LOG_MODEL_OFF: i32 = 0;
/// `log_model`: the checkpoints still on disk when the run ends
/// (Lightning's `log_model=True`).
pub const FULMEN_MLFLOW_LOG_MODEL_AT_END: i32 = 1;
/// `log_model`: every checkpoint as soon as it is saved (Lightning's
/// `log_model="all"`).
pub const FULMEN_MLFLOW_LOG_MODEL_ALL: i32 = 2;

/// Reads an optional string argument: NULL as "".
pub(crate) unsafe fn opt_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        Ok("")
    } else {
        str_arg(p, what)
    }
}

/// Creates an MLflow logger (Lightning's `MLFlowLogger(experiment_name,
/// tracking_uri=...)`) on the tracking server at `tracking_uri`
/// (`http://host:port[/path]`, as `mlflow server` serves it; NULL or "":
/// `MLFLOW_TRACKING_URI` when first used). `experiment_name` NULL or "" is
/// Lightning's "lightning_logs". Nothing is sent before the first use,
/// which finds the experiment by name (creating it when missing) and starts
/// a run (tags `mlflow.user`, `mlflow.source.name`, `mlflow.source.type`
/// and `mlflow.runName` as MLflow's client sets them, then the logger's
/// own), or resumes the run of `fulmen_logger_mlflow_set_run_id`. Requests
/// carry `MLFLOW_TRACKING_TOKEN` as a bearer token, or
/// `MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD` as basic
/// authentication, and wait at most 60 s for the server. Checkpoints go
/// through the server's artifact proxy (`mlflow-artifacts:`) or into a
/// local artifact folder. The caller owns `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, not an http:// URI),
/// FULMEN_CODE_UNSUPPORTED (`https://`: no TLS built in).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_new(
    tracking_uri: *const c_char,
    experiment_name: *const c_char,
    out: *mut *mut fulmen_logger,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let uri = opt_str(tracking_uri, "tracking_uri")?;
        let name = opt_str(experiment_name, "experiment_name")?;
        let logger = MlflowLogger::new((!uri.is_empty()).then_some(uri), name)?;
        out.write(handle::into_raw(fulmen_logger { inner: LoggerKind::Mlflow(SharedMlflowLogger::new(logger)) }));
        Ok(())
    })
}

/// Names the run (Lightning's `run_name`: the `mlflow.runName` tag); NULL
/// or "" for the server's generated name. Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, not an MLflow
/// logger), FULMEN_CODE_INVALID_STATE (the run started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_set_run_name(
    logger: *mut fulmen_logger,
    run_name: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let n = opt_str(run_name, "run_name")?;
        with_mlflow(logger, |l| l.set_run_name(n))
    })
}

/// Sets a tag of the run (Lightning's `tags`), over the ones fulmen sets.
/// Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`key` empty, not UTF-8; not an
/// MLflow logger), FULMEN_CODE_INVALID_STATE (the run started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_set_tag(
    logger: *mut fulmen_logger,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (k, v) = (str_arg(key, "key")?, str_arg(value, "value")?);
        with_mlflow(logger, |l| l.set_tag(k, v))
    })
}

/// Which checkpoints of the trainer's ModelCheckpoint become artifacts of
/// the run (Lightning's `log_model`): FULMEN_MLFLOW_LOG_MODEL_OFF (the
/// default), _AT_END (those still on disk at finalize) or _ALL (each when
/// saved). A checkpoint `dir/name.ckpt` goes to the artifact folder
/// `name/`, as Lightning puts it (without Lightning's `metadata.yaml` and
/// `aliases.txt`). Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (another value; not an MLflow
/// logger), FULMEN_CODE_INVALID_STATE (the run started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_set_log_model(
    logger: *mut fulmen_logger,
    mode: i32,
) -> *mut fulmen_error {
    guard!(|| {
        let mode = match mode {
            FULMEN_MLFLOW_LOG_MODEL_OFF => LogModel::Off,
            FULMEN_MLFLOW_LOG_MODEL_AT_END => LogModel::AtEnd,
            FULMEN_MLFLOW_LOG_MODEL_ALL => LogModel::All,
            other => return Err(Error::invalid(format!("log_model {other}: expected FULMEN_MLFLOW_LOG_MODEL_*"))),
        };
        with_mlflow(logger, |l| l.set_log_model(mode))
    })
}

/// Where a new experiment keeps its artifacts (Lightning's
/// `artifact_location`; NULL or "": the server's default); unused when
/// the experiment exists. Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8; not an MLflow
/// logger), FULMEN_CODE_INVALID_STATE (the run started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_set_artifact_location(
    logger: *mut fulmen_logger,
    location: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let loc = opt_str(location, "location")?;
        with_mlflow(logger, |l| l.set_artifact_location(loc))
    })
}

/// Logs into the existing run `run_id` (Lightning's `run_id`; NULL or ""
/// to start a new run): the experiment name and run name are then unused.
/// Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8; not an MLflow
/// logger), FULMEN_CODE_INVALID_STATE (the run started); FULMEN_CODE_IO at
/// the first use if the server has no such run.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_set_run_id(
    logger: *mut fulmen_logger,
    run_id: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let id = opt_str(run_id, "run_id")?;
        with_mlflow(logger, |l| l.set_run_id(id))
    })
}

/// Copies the run's id (Lightning's `version`) into `buf` as for
/// `fulmen_model_state_dict_name`, starting the run if the logger was not
/// used yet.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not an MLflow logger),
/// FULMEN_CODE_IO (the server cannot be reached or refuses),
/// FULMEN_CODE_OUT_OF_RANGE (buf too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_run_id(
    logger: *mut fulmen_logger,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let id = with_mlflow(logger, |l| l.run_id())?;
        copy_str(&id, buf, capacity, len_out)
    })
}

/// Copies the experiment's id (Lightning's `name`) into `buf` as for
/// `fulmen_model_state_dict_name`, starting the run if the logger was not
/// used yet.
///
/// Errors: those of `fulmen_logger_mlflow_run_id`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_experiment_id(
    logger: *mut fulmen_logger,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let id = with_mlflow(logger, |l| l.experiment_id())?;
        copy_str(&id, buf, capacity, len_out)
    })
}

/// Uploads the file at `path` among the run's artifacts, in the folder
/// `artifact_path` (relative, NULL or "" for the run's root), as MLflow's
/// `log_artifact(run_id, path, artifact_path)`; starts the run if the
/// logger was not used yet. The file is streamed, not read whole.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, `artifact_path`
/// absolute or holding "..", not an MLflow logger), FULMEN_CODE_IO (no
/// such file, the server's refusal), FULMEN_CODE_UNSUPPORTED (an artifact
/// store other than the server's proxy or a local folder).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_mlflow_log_artifact(
    logger: *mut fulmen_logger,
    path: *const c_char,
    artifact_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let p = str_arg(path, "path")?;
        let dir = opt_str(artifact_path, "artifact_path")?;
        with_mlflow(logger, |l| l.log_artifact(std::path::Path::new(p), dir))
    })
}
