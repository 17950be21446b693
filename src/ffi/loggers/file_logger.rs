//! `fulmen_logger`: Lightning's `CSVLogger`, `TensorBoardLogger`,
//! `MLFlowLogger` (made in `mlflow.rs`), `WandbLogger` (in `wandb.rs`) and
//! `CometLogger` (in `comet.rs`) as handles, for a host loop
//! without a trainer and as loggers added to a trainer
//! (`fulmen_trainer_add_file_logger`).
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle};
use crate::ffi::loggers::media_args::{histogram_args, image_args, text_args};
use crate::ffi::nn::model::copy_str;
use crate::ffi::tensor::handle::{fulmen_tensor, slice_arg};
use crate::ffi::trainer::runs::fulmen_trainer;
use crate::loggers::{
    CometLogger, FileLogger, FileLoggerKind, Logger, MlflowLogger, SharedCometLogger, SharedFileLogger,
    SharedMlflowLogger, SharedWandbLogger, Version, WandbLogger,
};
use std::collections::BTreeMap;
use std::ffi::c_char;

/// A CSV, TensorBoard, MLflow, W&B or Comet logger (Lightning's
/// `CSVLogger` / `TensorBoardLogger` / `MLFlowLogger` / `WandbLogger` /
/// `CometLogger`). A file logger's
/// folder, `save_dir/name/version_N`, is made on first use (the version
/// resolved then, as Lightning's next free number); an MLflow logger
/// reaches its server on first use; a W&B logger starts its offline run
/// folder on first use, a Comet logger its offline experiment's working
/// folder. The `fulmen_logger_set_*` settings apply before
/// that. Calls on one handle run one at a time (another call meanwhile
/// fails with FULMEN_CODE_INVALID_STATE), from any thread. Free with
/// `fulmen_logger_free`; a trainer it was added to keeps logging to it.
/// A call or setting of the file loggers (name, version, log_dir,
/// media...) on an MLflow, W&B or Comet logger, and
/// `fulmen_logger_mlflow_*` / `fulmen_logger_wandb_*` /
/// `fulmen_logger_comet_*` on another kind,
/// fail with FULMEN_CODE_INVALID_ARGUMENT. An MLflow logger's first
/// use (any logging call, `fulmen_logger_mlflow_run_id`) may also fail with
/// FULMEN_CODE_INVALID_ARGUMENT (no tracking URI given or in
/// MLFLOW_TRACKING_URI; credentials holding a line break) or
/// FULMEN_CODE_INVALID_STATE (the experiment is deleted). A W&B logger's
/// first use may fail with FULMEN_CODE_IO (its run folder or file cannot
/// be made), and its logging calls once its run is finished
/// (`fulmen_logger_wandb_finish`) with FULMEN_CODE_INVALID_STATE; a
/// Comet logger's likewise (its folder; after `fulmen_logger_comet_end`).
pub struct fulmen_logger {
    pub(crate) inner: LoggerKind,
}

/// The logger behind a `fulmen_logger`.
#[derive(Clone)]
pub(crate) enum LoggerKind {
    /// CSV or TensorBoard files.
    File(SharedFileLogger),
    /// An MLflow run.
    Mlflow(SharedMlflowLogger),
    /// A W&B offline run.
    Wandb(SharedWandbLogger),
    /// A Comet offline experiment.
    Comet(SharedCometLogger),
}

impl LoggerKind {
    /// The kind's name, with its article, in error messages.
    fn kind_name(&self) -> &'static str {
        match self {
            LoggerKind::File(shared) if shared.name() == "csv" => "a CSV",
            LoggerKind::File(_) => "a TensorBoard",
            LoggerKind::Mlflow(_) => "an MLflow",
            LoggerKind::Wandb(_) => "a W&B",
            LoggerKind::Comet(_) => "a Comet",
        }
    }
}

impl Handle for fulmen_logger {
    const C_NAME: &'static str = "fulmen_logger";
}

/// Makes a logger of `kind` under `save_dir` into `*out`.
unsafe fn new_logger(kind: FileLoggerKind, save_dir: *const c_char, out: *mut *mut fulmen_logger) -> Result<()> {
    check_out(out, "out")?;
    let dir = str_arg(save_dir, "save_dir")?;
    let logger = FileLogger::new(kind, dir)?;
    out.write(handle::into_raw(fulmen_logger { inner: LoggerKind::File(SharedFileLogger::new(logger)) }));
    Ok(())
}

/// Runs `f` on the CSV or TensorBoard logger behind `logger` (pinned for
/// the call, locked); an MLflow logger is `InvalidArgument`.
unsafe fn with_logger<T>(logger: *mut fulmen_logger, f: impl FnOnce(&mut FileLogger) -> Result<T>) -> Result<T> {
    let l = handle::borrow_mut(logger, "logger")?;
    match &l.inner {
        LoggerKind::File(shared) => f(&mut shared.lock()),
        other => Err(Error::invalid(format!(
            "this is a setting or call of the CSV and TensorBoard loggers; the logger is {} logger",
            other.kind_name()
        ))),
    }
}

/// Runs `f` on the MLflow logger behind `logger`; another kind is
/// `InvalidArgument`.
pub(crate) unsafe fn with_mlflow<T>(
    logger: *mut fulmen_logger,
    f: impl FnOnce(&mut MlflowLogger) -> Result<T>,
) -> Result<T> {
    let l = handle::borrow_mut(logger, "logger")?;
    match &l.inner {
        LoggerKind::Mlflow(shared) => f(&mut shared.lock()),
        other => Err(Error::invalid(format!(
            "this is a setting or call of the MLflow logger; the logger is {} logger",
            other.kind_name()
        ))),
    }
}

/// Runs `f` on the W&B logger behind `logger`; another kind is
/// `InvalidArgument`.
pub(crate) unsafe fn with_wandb<T>(
    logger: *mut fulmen_logger,
    f: impl FnOnce(&mut WandbLogger) -> Result<T>,
) -> Result<T> {
    let l = handle::borrow_mut(logger, "logger")?;
    match &l.inner {
        LoggerKind::Wandb(shared) => f(&mut shared.lock()),
        other => Err(Error::invalid(format!(
            "this is a setting or call of the W&B logger; the logger is {} logger",
            other.kind_name()
        ))),
    }
}

/// Runs `f` on the Comet logger behind `logger`; another kind is
/// `InvalidArgument`.
pub(crate) unsafe fn with_comet<T>(
    logger: *mut fulmen_logger,
    f: impl FnOnce(&mut CometLogger) -> Result<T>,
) -> Result<T> {
    let l = handle::borrow_mut(logger, "logger")?;
    match &l.inner {
        LoggerKind::Comet(shared) => f(&mut shared.lock()),
        other => Err(Error::invalid(format!(
            "this is a setting or call of the Comet logger; the logger is {} logger",
            other.kind_name()
        ))),
    }
}

/// Runs `f` on whichever logger is behind `logger`.
unsafe fn with_any<T>(logger: *mut fulmen_logger, f: impl FnOnce(Either<'_>) -> Result<T>) -> Result<T> {
    let l = handle::borrow_mut(logger, "logger")?;
    match &l.inner {
        LoggerKind::File(shared) => f(Either::File(&mut shared.lock())),
        LoggerKind::Mlflow(shared) => f(Either::Mlflow(&mut shared.lock())),
        LoggerKind::Wandb(shared) => f(Either::Wandb(&mut shared.lock())),
        LoggerKind::Comet(shared) => f(Either::Comet(&mut shared.lock())),
    }
}

/// A locked logger of either kind.
enum Either<'a> {
    File(&'a mut FileLogger),
    Mlflow(&'a mut MlflowLogger),
    Wandb(&'a mut WandbLogger),
    Comet(&'a mut CometLogger),
}

impl Either<'_> {
    fn logger(&mut self) -> &mut dyn Logger {
        match self {
            Either::File(l) => *l,
            Either::Mlflow(l) => *l,
            Either::Wandb(l) => *l,
            Either::Comet(l) => *l,
        }
    }
}

/// Reads `n` names and `n` values (NULL arrays allowed when `n` is 0).
unsafe fn metrics_arg(names: *const *const c_char, values: *const f64, n: usize) -> Result<BTreeMap<String, f64>> {
    let names = slice_arg(names, n, "names")?;
    let values = slice_arg(values, n, "values")?;
    let mut out = BTreeMap::new();
    for (i, (p, v)) in names.iter().zip(values).enumerate() {
        let name = str_arg(*p, &format!("names[{i}]"))?;
        if name.is_empty() || name.contains(['\n', '\r']) {
            return Err(Error::invalid(format!("names[{i}] {name:?} is empty or holds a line break")));
        }
        out.insert(name.to_string(), *v);
    }
    Ok(out)
}

/// Creates a CSV logger writing `metrics.csv` and `hparams.yaml` under
/// `save_dir` (Lightning's `CSVLogger(save_dir)`: name "lightning_logs",
/// the next free version, no prefix, rows written every 100 steps). Nothing
/// is made on disk before the first use. The caller owns `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`save_dir` empty or not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_csv_new(
    save_dir: *const c_char,
    out: *mut *mut fulmen_logger,
) -> *mut fulmen_error {
    guard!(|| new_logger(FileLoggerKind::Csv, save_dir, out))
}

/// Creates a TensorBoard logger writing event files (and `hparams.yaml`
/// when it saves) under `save_dir` (Lightning's
/// `TensorBoardLogger(save_dir)`: name "lightning_logs", the next free
/// version, no prefix, `default_hp_metric` on). Nothing is made on disk
/// before the first use. The caller owns `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`save_dir` empty or not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_tensorboard_new(
    save_dir: *const c_char,
    out: *mut *mut fulmen_logger,
) -> *mut fulmen_error {
    guard!(|| new_logger(FileLoggerKind::TensorBoard, save_dir, out))
}

/// Sets the experiment name (Lightning's `name`): the folder between
/// `save_dir` and the version; NULL or "" puts the versions directly in
/// `save_dir`. Before the logger's first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, absolute, or holding
/// a ".." component), FULMEN_CODE_INVALID_STATE (the folder exists).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_set_name(logger: *mut fulmen_logger, name: *const c_char) -> *mut fulmen_error {
    guard!(|| {
        let n = if name.is_null() { None } else { Some(str_arg(name, "name")?) };
        with_logger(logger, |l| l.set_name(n))
    })
}

/// Sets the version to `version_<version>` (Lightning's `version=N`), or
/// with -1 back to the next free number (`version=None`). A folder that
/// exists is written into (a CSV logger replaces its `metrics.csv`, as
/// Lightning). Before the logger's first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`version` below -1),
/// FULMEN_CODE_INVALID_STATE (the folder exists).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_set_version(logger: *mut fulmen_logger, version: i64) -> *mut fulmen_error {
    guard!(|| {
        let v = match version {
            -1 => Version::Next,
            v => Version::Number(
                u64::try_from(v).map_err(|_| Error::invalid(format!("version {v}: use -1 or a number >= 0")))?,
            ),
        };
        with_logger(logger, |l| l.set_version(v))
    })
}

/// Sets the version folder's name itself (Lightning's `version="name"`):
/// `save_dir/name/<version>`. Before the logger's first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8, absolute, or holding a
/// ".." component), FULMEN_CODE_INVALID_STATE (the folder exists).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_set_version_name(
    logger: *mut fulmen_logger,
    version: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let v = str_arg(version, "version")?.to_string();
        with_logger(logger, |l| l.set_version(Version::Name(v)))
    })
}

/// Sets the prefix put before every metric name with '-' (Lightning's
/// `prefix`; "" for none): `prefix-loss` (Comet: with '_', as comet_ml
/// joins it). CSV's `step` column and
/// TensorBoard's images, histograms and texts are not prefixed. Any kind
/// of logger; before its first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not UTF-8),
/// FULMEN_CODE_INVALID_STATE (the folder exists, or the MLflow or W&B
/// run or the Comet experiment started).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_set_prefix(
    logger: *mut fulmen_logger,
    prefix: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let p = str_arg(prefix, "prefix")?.to_string();
        with_any(logger, |l| match l {
            Either::File(l) => l.set_prefix(&p),
            Either::Mlflow(l) => l.set_prefix(&p),
            Either::Wandb(l) => l.set_prefix(&p),
            Either::Comet(l) => l.set_prefix(&p),
        })
    })
}

/// CSV: writes the rows kept in memory whenever a row's `step + 1` is a
/// multiple of `n` (Lightning's `flush_logs_every_n_steps`, default 100;
/// also at `fulmen_logger_save`, `fulmen_logger_finalize` and free).
/// Before the logger's first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n` below 1, or a TensorBoard
/// logger), FULMEN_CODE_INVALID_STATE (the folder exists).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_set_flush_logs_every_n_steps(
    logger: *mut fulmen_logger,
    n: i64,
) -> *mut fulmen_error {
    guard!(|| with_logger(logger, |l| l.set_flush_logs_every_n_steps(n)))
}

/// TensorBoard: whether `fulmen_logger_log_hyperparams` also logs
/// `hp_metric` = -1 at step 0 as the hparams table's metric (Lightning's
/// `default_hp_metric`, default true); when false, the hyperparameters go
/// only to `hparams.yaml`, as in Lightning. Before the logger's first use
/// only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a CSV logger),
/// FULMEN_CODE_INVALID_STATE (the folder exists).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_set_default_hp_metric(
    logger: *mut fulmen_logger,
    on: bool,
) -> *mut fulmen_error {
    guard!(|| with_logger(logger, |l| l.set_default_hp_metric(on)))
}

/// TensorBoard: writes the event files and `hparams.yaml` to `sub_dir`
/// below the run's folder (Lightning's `sub_dir`:
/// `save_dir/name/version_N/sub_dir`, which `fulmen_logger_log_dir` then
/// gives); NULL or "" for none. A trainer's ModelCheckpoint still writes
/// to `save_dir/name/version_N/checkpoints`, as Lightning's. Before the
/// logger's first use only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a CSV logger; not UTF-8,
/// absolute, or holding a ".." component), FULMEN_CODE_INVALID_STATE (the
/// folder exists).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_set_sub_dir(
    logger: *mut fulmen_logger,
    sub_dir: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let d = if sub_dir.is_null() { None } else { Some(str_arg(sub_dir, "sub_dir")?) };
        with_logger(logger, |l| l.set_sub_dir(d))
    })
}

/// Copies the run's folder (`save_dir/name/version_N`, with the
/// TensorBoard `sub_dir` below it when set: Lightning's
/// `log_dir`) into `buf` as for `fulmen_model_state_dict_name`, making it
/// (and resolving the version) if the logger was not used yet.
///
/// Errors: FULMEN_CODE_IO (the folder cannot be made),
/// FULMEN_CODE_OUT_OF_RANGE (buf too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_log_dir(
    logger: *mut fulmen_logger,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let dir = with_logger(logger, |l| l.folder())?;
        copy_str(&dir.to_string_lossy(), buf, capacity, len_out)
    })
}

/// Writes the version number to `*out` (Lightning's `version`), resolving
/// it (and making the folder) if the logger was not used yet; -1 for a
/// version given by name.
///
/// Errors: FULMEN_CODE_IO (the folder cannot be made).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_version(logger: *mut fulmen_logger, out: *mut i64) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let v = with_logger(logger, |l| l.version())?;
        let n = match v {
            Version::Number(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Version::Name(_) | Version::Next => -1,
        };
        write_out(out, "out", n)
    })
}

/// Logs `n` metrics (`names[i]` = `values[i]`) at `step`, as Lightning's
/// `logger.log_metrics(metrics, step)`: CSV, one row with a `step` column
/// (kept in memory, written when `(step + 1)` is a multiple of
/// flush_logs_every_n_steps, at save, finalize and free), every column
/// sorted as Lightning sorts them, floats as Python writes them;
/// TensorBoard, one scalar per name at `step`; MLflow, one `log-batch`
/// request (names without the characters Lightning strips: all but
/// letters, digits, `_ / . -` and space; NaN and infinities as MLflow's
/// client sends them); W&B, one history row and summary update with
/// `trainer/global_step` = `step`; Comet, `curr_step` = `step` when it
/// changes and one metric message per name. Names get the prefix. No `epoch` is
/// added (the trainer adds it to what it logs). `n` may be 0 (CSV: a row with only
/// the step). The arrays are read during the call only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a name empty, not UTF-8 or
/// holding a line break), FULMEN_CODE_IO (the folder or file cannot be
/// written; the MLflow server cannot be reached, or refuses, with its
/// answer), FULMEN_CODE_INVALID_STATE (a finished W&B run, an ended Comet
/// experiment).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_log_metrics(
    logger: *mut fulmen_logger,
    names: *const *const c_char,
    values: *const f64,
    n: usize,
    step: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let metrics = metrics_arg(names, values, n)?;
        with_any(logger, |l| match l {
            Either::File(l) => l.log_metrics_at(&metrics, step),
            Either::Mlflow(l) => l.log_metrics_at(&metrics, step),
            Either::Wandb(l) => l.log_metrics_at(&metrics, None, step),
            Either::Comet(l) => l.log_metrics_at(&metrics, None, step),
        })
    })
}

/// Logs `n` hyperparameters as text (`keys[i]` = `values[i]`), as
/// Lightning's `logger.log_hyperparams(params)`: merged into those logged
/// before; CSV rewrites `hparams.yaml` with them all (numbers, true and
/// false plain, other text quoted); TensorBoard writes the hparams plugin's
/// summaries (numbers, booleans and strings typed as torch types them) with
/// `hp_metric` = -1 unless default_hp_metric is off, and keeps them for the
/// `hparams.yaml` it writes when it saves; MLflow logs them as the run's
/// params, each value cut to 250 characters as Lightning cuts them (MLflow
/// refuses a param changed to another value); W&B writes them into the
/// run's config (numbers and booleans typed, other text as strings);
/// Comet writes them as the experiment's parameters (typed likewise). The
/// arrays are read during the call only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a key or value not UTF-8),
/// FULMEN_CODE_IO (the folder or file cannot be written; the MLflow
/// server's refusal), FULMEN_CODE_INVALID_STATE (a finished W&B run, an
/// ended Comet experiment).
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_log_hyperparams(
    logger: *mut fulmen_logger,
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let keys = slice_arg(keys, n, "keys")?;
        let values = slice_arg(values, n, "values")?;
        let mut params = BTreeMap::new();
        for (i, (k, v)) in keys.iter().zip(values).enumerate() {
            params.insert(
                str_arg(*k, &format!("keys[{i}]"))?.to_string(),
                str_arg(*v, &format!("values[{i}]"))?.to_string(),
            );
        }
        with_any(logger, |mut l| l.logger().log_hyperparams(&params))
    })
}

/// TensorBoard: logs `image` under `tag` at `step`, as torch's
/// `SummaryWriter.add_image(tag, img, step, dataformats)` (what Lightning
/// users call through `logger.experiment`): `dataformats` "CHW" (NULL),
/// "HWC", "HW" or another order of those letters; 1 (repeated to RGB), 3
/// or 4 channels; a uint8 tensor is taken as 0..255, any other as 0..1
/// (scaled by 255, clipped). Written as PNG. The tensor is read during the
/// call only, on any device.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a CSV logger, `tag` empty,
/// `dataformats` not an order of "CHW" or "HW", or 4-D),
/// FULMEN_CODE_SHAPE_MISMATCH (dimensions not those of `dataformats`,
/// channels not 1, 3 or 4, no pixel), FULMEN_CODE_IO.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_add_image(
    logger: *mut fulmen_logger,
    tag: *const c_char,
    image: *const fulmen_tensor,
    step: i64,
    dataformats: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (tag, m) = image_args(tag, image, dataformats)?;
        with_logger(logger, |l| l.add_media_at(tag, &m, step))
    })
}

/// TensorBoard: logs a histogram of every value of `values` under `tag` at
/// `step`, as torch's `SummaryWriter.add_histogram(tag, values, step)`
/// (its default "tensorflow" buckets: ±1e-12 growing by 1.1 to 1e20, and
/// 0). NaN and values beyond ±1e20 are not counted in the buckets (min,
/// max and sums then are NaN or infinite, as torch writes them). The
/// tensor is read during the call only, on any device.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a CSV logger, `tag` empty, no
/// value, or no value within the buckets), FULMEN_CODE_IO.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_add_histogram(
    logger: *mut fulmen_logger,
    tag: *const c_char,
    values: *const fulmen_tensor,
    step: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let (tag, m) = histogram_args(tag, values)?;
        with_logger(logger, |l| l.add_media_at(tag, &m, step))
    })
}

/// TensorBoard: logs `text` (markdown) under `tag` at `step`, as torch's
/// `SummaryWriter.add_text(tag, text, step)`: stored under
/// "<tag>/text_summary" for the text dashboard.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a CSV logger, `tag` empty, a
/// string not UTF-8), FULMEN_CODE_IO.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_add_text(
    logger: *mut fulmen_logger,
    tag: *const c_char,
    text: *const c_char,
    step: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let (tag, m) = text_args(tag, text)?;
        with_logger(logger, |l| l.add_media_at(tag, &m, step))
    })
}

/// Makes what was logged durable (Lightning's `logger.save()`): CSV writes
/// the rows kept in memory; TensorBoard flushes its event file and writes
/// `hparams.yaml` if the folder has none. Makes the folder if the logger
/// was not used yet, as Lightning. MLflow: nothing (every call is sent at
/// once). W&B: hands the run's file to the OS (nothing for a logger not
/// used yet or a finished run); Comet likewise for its messages.
///
/// Errors: FULMEN_CODE_IO.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_save(logger: *mut fulmen_logger) -> *mut fulmen_error {
    guard!(|| with_any(logger, |mut l| l.logger().save()))
}

/// Ends the run (Lightning's `logger.finalize(status)`, `status` such as
/// "success" or "failed"): CSV saves (a logger never used does nothing);
/// TensorBoard closes its event file (logging later opens a new one, as
/// torch's SummaryWriter) and on "success" saves; MLflow uploads the
/// checkpoints kept for the end (`FULMEN_MLFLOW_LOG_MODEL_AT_END`), then
/// ends the run: "success" and "finished" FINISHED, "failed" FAILED,
/// "killed" KILLED (a logger never used does nothing; logging later goes
/// on in the same run, as Lightning's); W&B makes the run's file durable
/// and keeps the run open, as Lightning's WandbLogger, its exit code (1
/// after "failed" or "killed", else 0) for when the run ends; Comet makes
/// the messages durable and keeps the experiment open, as Lightning's
/// CometLogger.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`status` not UTF-8; for MLflow,
/// W&B and Comet not one of those four), FULMEN_CODE_IO.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_finalize(
    logger: *mut fulmen_logger,
    status: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let s = str_arg(status, "status")?.to_string();
        with_any(logger, |mut l| l.logger().finalize(&s))
    })
}

/// Adds `logger` to the trainer's loggers (Lightning's
/// `Trainer(logger=[CSVLogger(...), MLFlowLogger(...)])`), next to
/// the file loggers of the `logger` option (set it to "false" to use only
/// yours) and host loggers: on rank 0 it gets every metric with `epoch`,
/// the module's hyperparameters, the images, histograms and texts of
/// `fulmen_hook_context_add_*` (TensorBoard), each checkpoint
/// ModelCheckpoint saves (MLflow's `log_model`), saves at epoch ends and
/// finalize at the end of each run. Without a file logger of the `logger`
/// option, the first added logger's folder is the run's log folder
/// (`fulmen_trainer_log_dir`; the default ModelCheckpoint writes under
/// it). The trainer shares the logger: the handle stays the caller's,
/// usable meanwhile (also from hooks) and freeable at any time.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the trainer or logger in use).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_file_logger(
    trainer: *mut fulmen_trainer,
    logger: *const fulmen_logger,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let shared = handle::borrow(logger, "logger")?.inner.clone();
        match shared {
            LoggerKind::File(l) => t.inner.add_logger(Box::new(l)),
            LoggerKind::Mlflow(l) => t.inner.add_logger(Box::new(l)),
            LoggerKind::Wandb(l) => t.inner.add_logger(Box::new(l)),
            LoggerKind::Comet(l) => t.inner.add_logger(Box::new(l)),
        }
        Ok(())
    })
}

/// Frees a logger (a CSV logger first writes the rows kept in memory,
/// errors dropped: call `fulmen_logger_finalize` to see them). A trainer
/// it was added to keeps it. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_logger_free(logger: *mut fulmen_logger) {
    handle::free(logger);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::ffi::base::error::fulmen_error_code;
    use crate::test_dirs::TempDir;
    use std::ffi::CString;

    unsafe fn code(e: *mut fulmen_error) -> i32 {
        let c = fulmen_error_code(e);
        crate::ffi::base::error::fulmen_error_free(e);
        c
    }

    #[test]
    fn csv_handle_round_trip() {
        let d = TempDir::new("ffi-logger");
        let dir = CString::new(d.to_str().unwrap()).unwrap();
        unsafe {
            let mut l: *mut fulmen_logger = std::ptr::null_mut();
            assert!(fulmen_logger_csv_new(dir.as_ptr(), &mut l).is_null());
            assert!(fulmen_logger_set_version(l, 2).is_null());
            assert_eq!(code(fulmen_logger_set_version(l, -2)), ErrorCode::InvalidArgument as i32);
            assert_eq!(code(fulmen_logger_set_default_hp_metric(l, false)), ErrorCode::InvalidArgument as i32);
            let names = [c"loss".as_ptr(), c"acc".as_ptr()];
            let values = [0.5, 1.0];
            assert!(fulmen_logger_log_metrics(l, names.as_ptr(), values.as_ptr(), 2, 3).is_null());
            assert_eq!(
                code(fulmen_logger_log_metrics(l, std::ptr::null(), values.as_ptr(), 1, 3)),
                ErrorCode::NullArgument as i32
            );
            let bad = [c"".as_ptr()];
            assert_eq!(
                code(fulmen_logger_log_metrics(l, bad.as_ptr(), values.as_ptr(), 1, 3)),
                ErrorCode::InvalidArgument as i32
            );
            let mut v = 0i64;
            assert!(fulmen_logger_version(l, &mut v).is_null());
            assert_eq!(v, 2);
            assert_eq!(code(fulmen_logger_set_prefix(l, c"p".as_ptr())), ErrorCode::InvalidState as i32);
            assert!(fulmen_logger_finalize(l, c"success".as_ptr()).is_null());
            fulmen_logger_free(l);
            fulmen_logger_free(l);
        }
        let text = std::fs::read_to_string(d.join("lightning_logs/version_2/metrics.csv")).unwrap();
        assert_eq!(text, "acc,loss,step\r\n1.0,0.5,3\r\n");
    }
}
