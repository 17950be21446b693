//! The Comet logger as a `fulmen_logger` (Lightning's `CometLogger` with
//! `online=False`): made here, its own settings and readers; logging,
//! finalize, free and adding it to a trainer are the `fulmen_logger_*`
//! calls of every logger.
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out};
use crate::ffi::loggers::file_logger::{fulmen_logger, with_comet, LoggerKind};
use crate::ffi::loggers::mlflow::opt_str;
use crate::ffi::nn::model::copy_str;
use crate::loggers::{CometLogger, SharedCometLogger};
use std::ffi::c_char;

/// Creates a Comet logger in Comet's offline mode (Lightning's
/// `CometLogger(project=..., online=False, offline_directory=...)`): the
/// experiment is written as comet_ml's `OfflineExperiment` writes it, an
/// archive `<offline_directory>/<experiment key>-<6 letters>.zip` (in mode
/// "create": `<key>.zip`) holding `experiment.json` and `messages.json`,
/// which `comet upload <archive>` sends to the project `project` (NULL or
/// "": none, Comet's "Uncategorized") of the workspace set. Nothing is made
/// before the first use, which makes the working folder
/// `<archive name without .zip>.partial` in `offline_directory` (NULL or
/// "": the working directory) and writes the first messages (others:
/// `offline_experiment` true, `Name`, `Created from` "fulmen"). Each
/// `log_metrics` writes the parameters `curr_step` (and `curr_epoch`) when
/// they change, then one metric message per name, sorted, with the step
/// and epoch, as Lightning's logger through comet_ml (a metric "epoch" is
/// taken as the epoch; NaN and infinities as the strings "NaN",
/// "Infinity", "-Infinity"); hyperparameters are parameters (numbers, true
/// and false typed, other text as strings; one logged again unchanged is
/// not written twice); names longer than 100 characters and texts longer
/// than 1000 are cut as comet_ml cuts them. `finalize` makes the messages
/// durable and keeps the experiment open, as Lightning's logger; the
/// experiment ends (its archive written atomically, the working folder
/// removed) with `fulmen_logger_comet_end`, or when the logger is freed
/// and no trainer holds it. A process that dies first leaves the working
/// folder: its two files are what the archive would hold. With the logger
/// first among a trainer's loggers, the trainer's log folder is
/// `offline_directory` and ModelCheckpoint writes to
/// `offline_directory/<project, or "None">/<key>/checkpoints`, as
/// Lightning. Online streaming, assets, images, the code and environment
/// comet_ml logs by itself, and system metrics are not written. The caller
/// owns `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8; a project holding `/`
/// or `\`, or "." or "..").
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_new(
    offline_directory: *const c_char,
    project: *const c_char,
    out: *mut *mut fulmen_logger,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let dir = opt_str(offline_directory, "offline_directory")?;
        let project = opt_str(project, "project")?;
        let logger = CometLogger::new(dir, project)?;
        out.write(handle::into_raw(fulmen_logger { inner: LoggerKind::Comet(SharedCometLogger::new(logger)) }));
        Ok(())
    })
}

/// Names the experiment (Lightning's `name`); NULL or "" for none. Before
/// the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, not a Comet logger),
/// FULMEN_CODE_INVALID_STATE (the experiment started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_set_name(
    logger: *mut fulmen_logger,
    name: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let n = opt_str(name, "name")?;
        with_comet(logger, |l| l.set_name(n))
    })
}

/// Sets the workspace the upload goes to (Lightning's `workspace`); NULL
/// or "" for the account's default. Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, not a Comet logger),
/// FULMEN_CODE_INVALID_STATE (the experiment started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_set_workspace(
    logger: *mut fulmen_logger,
    workspace: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let w = opt_str(workspace, "workspace")?;
        with_comet(logger, |l| l.set_workspace(w))
    })
}

/// Sets the experiment's key (Lightning's `experiment_key`): 32 to 50 ASCII
/// letters and digits, as Comet requires (NULL or "" for a new random key
/// of 32 hexadecimal digits, as comet_ml makes them). With a key given,
/// the upload resumes the experiment of that key according to the mode.
/// Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (another length or character, not
/// a Comet logger), FULMEN_CODE_INVALID_STATE (the experiment started);
/// at the first use FULMEN_CODE_IO in mode "create" if that key's archive
/// exists in the offline directory.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_set_experiment_key(
    logger: *mut fulmen_logger,
    key: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let k = opt_str(key, "key")?;
        with_comet(logger, |l| l.set_experiment_key(k))
    })
}

/// Sets how `comet upload` treats the experiment (Lightning's `mode`, the
/// archive's resume strategy): "get_or_create" (NULL or "", the default:
/// continue the experiment of the given key if the server has it, else
/// create it), "get" (continue it) or "create" (a new one; the archive is
/// then named `<key>.zip`). Before the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (another mode, not UTF-8, not a
/// Comet logger), FULMEN_CODE_INVALID_STATE (the experiment started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_set_mode(
    logger: *mut fulmen_logger,
    mode: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let m = opt_str(mode, "mode")?;
        with_comet(logger, |l| l.set_mode(m))
    })
}

/// Adds a tag of the experiment (one given twice is kept once). Before
/// the first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (empty, not UTF-8, not a Comet
/// logger), FULMEN_CODE_INVALID_STATE (the experiment started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_add_tag(
    logger: *mut fulmen_logger,
    tag: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let t = str_arg(tag, "tag")?;
        with_comet(logger, |l| l.add_tag(t))
    })
}

/// Copies the experiment's key (Lightning's `version`) into `buf` as for
/// `fulmen_model_state_dict_name`, starting the experiment if the logger
/// was not used yet.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a Comet logger), FULMEN_CODE_IO
/// (the working folder cannot be made), FULMEN_CODE_OUT_OF_RANGE (buf too
/// small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_experiment_key(
    logger: *mut fulmen_logger,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let key = with_comet(logger, |l| l.experiment_key())?;
        copy_str(&key, buf, capacity, len_out)
    })
}

/// Copies the path of the experiment's archive (what `comet upload` takes;
/// it exists once the experiment ended) into `buf` as for
/// `fulmen_model_state_dict_name`, starting the experiment if the logger
/// was not used yet.
///
/// Errors: those of `fulmen_logger_comet_experiment_key`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_archive_path(
    logger: *mut fulmen_logger,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let path = with_comet(logger, |l| l.archive_path())?;
        copy_str(&path.to_string_lossy(), buf, capacity, len_out)
    })
}

/// Ends the experiment now (comet_ml's `end()`): writes its archive (the
/// stop time, the messages) atomically and removes the working folder;
/// later logging fails with FULMEN_CODE_INVALID_STATE, a second end does
/// nothing. A logger never used starts and ends an empty experiment. After
/// a failed end the working folder stays as it is, and another end may
/// succeed.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a Comet logger),
/// FULMEN_CODE_IO (the archive cannot be written, or a message failed to
/// be written earlier).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_comet_end(logger: *mut fulmen_logger) -> *mut fulmen_error {
    guard!(|| with_comet(logger, |l| l.end().map(|_| ())))
}
