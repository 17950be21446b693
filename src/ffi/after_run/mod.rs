//! After a run: `fulmen_trainer_save_checkpoint` (Lightning's
//! `trainer.save_checkpoint`) and what the trainer knows of its last run
//! (`callback_metrics`, `logged_metrics`, `progress_bar_metrics`,
//! `estimated_stepping_batches`, `num_training_batches`, ...).
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out};
use crate::ffi::module::lightning_module::fulmen_lightning_module;
use crate::ffi::trainer::runs::fulmen_trainer;
use crate::ffi::value::{emit_value, fulmen_value};
use crate::nn::Value;

pub mod fit_limits;
pub mod hook_optimizers;
pub mod trainer_view;
use std::collections::BTreeMap;
use std::ffi::c_char;

/// Lightning's `trainer.save_checkpoint(path, weights_only)` after fit,
/// validate, test or predict returned. Writes at `path` (its folder made
/// if missing; a file there is replaced through a temporary file renamed
/// onto it), in the trainer's `checkpoint_format`, the weights of
/// `module` (the module of the trainer's last run) and, unless
/// `weights_only`, what the last fit left on the trainer: the optimizer
/// and scheduler states, the loop progress (epoch, global step), the
/// callbacks' states and `on_save_checkpoint` entries, the random
/// generators' states as they are now and the 16-mixed scaler's. A fit
/// given the file as `ckpt_path` continues where that fit ended (a fit
/// that ended after its last epoch resumes at the next one). The trainer
/// keeps that state, whether the fit ended or failed, until its next fit
/// or a run on another model. Weights alone need any run (Lightning needs
/// a model attached); a full checkpoint needs a fit. The callbacks' and
/// the module's `on_save_checkpoint` hooks run on the calling thread.
/// Under DDP rank 0 writes and the other ranks return at once.
///
/// Errors: FULMEN_CODE_INVALID_STATE (no run yet; a full checkpoint when no
/// fit configured optimizers on this trainer; a module without a model);
/// FULMEN_CODE_INVALID_ARGUMENT (`path` empty or not UTF-8; `module` whose
/// model is not the last run's; `on_save_checkpoint` entries too large for
/// a checkpoint); FULMEN_CODE_IO (the folder or file cannot be written);
/// FULMEN_CODE_UNSUPPORTED (a scheduler whose state Lightning's format
/// cannot carry yet); FULMEN_CODE_CALLBACK or the code a host callback
/// returned (an `on_save_checkpoint` hook failed); FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_save_checkpoint(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    path: *const c_char,
    weights_only: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let p = str_arg(path, "path")?;
        if p.is_empty() {
            return Err(Error::invalid("path is empty"));
        }
        t.inner.save_checkpoint(&mut m.inner, std::path::Path::new(p), weights_only)
    })
}

/// `metrics` as a dict value {name: float} in name order.
fn metrics_value(metrics: &BTreeMap<String, f64>) -> Value {
    Value::Dict(metrics.iter().map(|(k, v)| (Value::Str(k.clone()), Value::Double(*v))).collect())
}

/// Writes `metrics` as a new dict value {name: float} in name order.
unsafe fn emit_metrics(out: *mut *mut fulmen_value, metrics: &BTreeMap<String, f64>) -> Result<()> {
    emit_value(out, metrics_value(metrics))
}

/// Writes Lightning's `trainer.callback_metrics` of the last run as a new
/// dict value {name: float} in name order (empty before any run): the
/// latest value of every logged metric (of what validation and test
/// batches log, the epoch values only, as Lightning), what
/// ModelCheckpoint and EarlyStopping monitor. Read its entries with `fulmen_value_len`,
/// `fulmen_value_dict_entry` or `fulmen_value_dict_get`; the caller frees
/// it with `fulmen_value_free`. `fulmen_trainer_callback_metric` reads one.
///
/// Errors: the common ones; the device's error when a device value a
/// run that failed mid-epoch left unread cannot be read.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_callback_metrics(
    trainer: *const fulmen_trainer,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        emit_metrics(out, &handle::borrow(trainer, "trainer")?.inner.callback_metrics().snapshot()?)
    })
}

/// Writes Lightning's `trainer.logged_metrics` of the last run as a new
/// dict value, as `fulmen_trainer_callback_metrics`: the latest value of
/// every metric logged for the loggers (`logger` true; per step at each
/// training, validation and test batch, per epoch at each training epoch
/// and validation / test end, names ending in `_step` / `_epoch` when
/// logged both ways), whether or not a logger is active; the sanity
/// check's are not.
///
/// Errors: the common ones; the device's error when a device value a
/// run that failed mid-epoch left unread cannot be read.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_logged_metrics(
    trainer: *const fulmen_trainer,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        emit_metrics(out, &handle::borrow(trainer, "trainer")?.inner.logged_metrics().snapshot()?)
    })
}

/// Writes what the last `fulmen_trainer_validate` / `fulmen_trainer_test`
/// run returned (Lightning's return value of `trainer.validate` /
/// `trainer.test`) as a new list value with one dict {name: float} per
/// loader, in loader order: the epoch values logged for the loggers
/// (`logger` true; `x_epoch` when `x` was logged per step too, never the
/// `_step` values), each loader's own when there are several (names
/// ending in `/dataloader_idx_N` unless logged with
/// FULMEN_LOG_NO_DATALOADER_IDX), and in every dict those the stage's
/// start and epoch hooks logged. Under DDP the values are reduced over
/// ranks where logged with FULMEN_LOG_SYNC_DIST. An empty list before any
/// validate or test, after fit or predict, and when every loader's limit
/// was 0 (the run was skipped, no hook called). Read it with
/// `fulmen_value_len` and `fulmen_value_item`, each dict as for
/// `fulmen_trainer_callback_metrics`; the caller frees it with
/// `fulmen_value_free`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_eval_results(
    trainer: *const fulmen_trainer,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let t = handle::borrow(trainer, "trainer")?;
        emit_value(out, Value::List(t.inner.eval_results().iter().map(metrics_value).collect()))
    })
}

/// Writes Lightning's `trainer.progress_bar_metrics` of the last run (the
/// metrics logged with FULMEN_LOG_PROG_BAR) as a new dict value, as
/// `fulmen_trainer_callback_metrics`.
///
/// Errors: the common ones; the device's error when a device value a
/// run that failed mid-epoch left unread cannot be read.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_progress_bar_metrics(
    trainer: *const fulmen_trainer,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        emit_metrics(out, &handle::borrow(trainer, "trainer")?.inner.progress_bar_metrics().snapshot()?)
    })
}

/// Writes Lightning's `trainer.estimated_stepping_batches` for the last
/// fit's training data and this trainer's options: `ceil(batches per epoch
/// / accumulate_grad_batches) * max_epochs`, at most max_steps (this
/// rank's shard under DDP); -1 when the run is unbounded (Lightning's
/// `inf`: no max_steps, and max_epochs -1 or a source of unknown length).
///
/// Errors: FULMEN_CODE_INVALID_STATE (no fit has loaded its training data
/// on this trainer yet).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_estimated_stepping_batches(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let steps = handle::borrow(trainer, "trainer")?.inner.estimated_stepping_batches()?;
        write_out(out, "out", steps.unwrap_or(-1))
    })
}

/// Writes Lightning's `trainer.should_stop` after the last fit: whether a
/// hook, EarlyStopping or a Timer asked it to stop (false before a fit).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_should_stop(
    trainer: *const fulmen_trainer,
    out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.should_stop()) })
}

/// Writes Lightning's `trainer.num_training_batches`: the training batches
/// per epoch of the last fit after `limit_train_batches`; -1 before a fit
/// or for a source of unknown length (Lightning's `inf`).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_num_training_batches(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        let n = handle::borrow(trainer, "trainer")?.inner.num_training_batches();
        write_out(out, "out", count(n))
    })
}

/// A batch count as C reads it (-1: unknown length, Lightning's `inf`).
fn count(n: Option<usize>) -> i64 {
    n.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// Writes `n` into `out[0..capacity]` and its length to `*count_out`;
/// OUT_OF_RANGE (after writing `*count_out`) when `capacity` is smaller.
pub(super) unsafe fn write_counts(
    n: &[i64],
    out: *mut i64,
    capacity: usize,
    count_out: *mut usize,
    what: &str,
) -> Result<()> {
    check_out(count_out, "count_out")?;
    count_out.write(n.len());
    if n.len() > capacity {
        return Err(Error::new(
            ErrorCode::OutOfRange,
            format!("the trainer has {} {what}, the array holds {capacity}", n.len()),
        ));
    }
    if !n.is_empty() {
        check_out(out, "out")?;
        std::ptr::copy_nonoverlapping(n.as_ptr(), out, n.len());
    }
    Ok(())
}

/// Per-loader batch counts as C writes them (-1: unknown length).
pub(super) fn counts(batches: &[Option<usize>]) -> Vec<i64> {
    batches.iter().map(|b| count(*b)).collect()
}

/// Writes Lightning's `trainer.num_val_batches`, one count per validation
/// loader of the last fit's validation or validate run after
/// `limit_val_batches` (-1 for a loader of unknown length, Lightning's
/// `inf`), into `counts[0..capacity]`, and their number (0 before one) to
/// `*count_out`. Fails with FULMEN_CODE_OUT_OF_RANGE (and writes
/// `*count_out` only) when `capacity` is smaller than that number;
/// `counts` may be NULL when `capacity` is 0.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small, see above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_num_val_batches(
    trainer: *const fulmen_trainer,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let n = self::counts(handle::borrow(trainer, "trainer")?.inner.num_val_batches());
        write_counts(&n, counts, capacity, count_out, "validation loaders")
    })
}

/// Writes Lightning's `trainer.num_test_batches` as
/// `fulmen_trainer_num_val_batches` writes its counts: one per loader of the
/// last test run after `limit_test_batches` (none before one).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_num_test_batches(
    trainer: *const fulmen_trainer,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let n = self::counts(handle::borrow(trainer, "trainer")?.inner.num_test_batches());
        write_counts(&n, counts, capacity, count_out, "test loaders")
    })
}

/// Writes Lightning's `trainer.num_predict_batches` as
/// `fulmen_trainer_num_val_batches` writes its counts: one per loader of the
/// last predict run after `limit_predict_batches` (none before one).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_num_predict_batches(
    trainer: *const fulmen_trainer,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let n = self::counts(handle::borrow(trainer, "trainer")?.inner.num_predict_batches());
        write_counts(&n, counts, capacity, count_out, "predict loaders")
    })
}

/// Writes Lightning's `trainer.num_sanity_val_batches` as
/// `fulmen_trainer_num_val_batches` writes its counts: the batches of each
/// validation loader the last fit's sanity check ran (`num_sanity_val_steps`
/// per loader, at most the loader's; none when no sanity check ran).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_num_sanity_val_batches(
    trainer: *const fulmen_trainer,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let n = self::counts(handle::borrow(trainer, "trainer")?.inner.num_sanity_val_batches());
        write_counts(&n, counts, capacity, count_out, "sanity-checked validation loaders")
    })
}

/// Writes Lightning's `trainer.device_ids`: the index of each device a run
/// of this trainer uses on this node (-1 for a CPU device, as torch's
/// `_get_device_index(allow_cpu=True)`), as the `accelerator` and
/// `devices` options resolve, as `fulmen_trainer_num_val_batches` writes
/// its counts.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small),
/// FULMEN_CODE_UNAVAILABLE, FULMEN_CODE_INVALID_ARGUMENT (an accelerator
/// not available here, devices it cannot give).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_device_ids(
    trainer: *const fulmen_trainer,
    ids: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let n = handle::borrow(trainer, "trainer")?.inner.device_ids()?;
        write_counts(&n, ids, capacity, count_out, "devices")
    })
}

/// Writes the state of the trainer's first EarlyStopping callback
/// (Lightning's `wait_count`, `stopped_epoch` and `best_score`: the
/// evaluations without improvement since the best, the epoch it stopped
/// the fit in (0 when it did not), the best monitored value (+inf / -inf
/// before one for mode min / max)). Any out-pointer may be NULL.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the trainer has no EarlyStopping).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_early_stopping_state(
    trainer: *const fulmen_trainer,
    wait_count: *mut i64,
    stopped_epoch: *mut i64,
    best_score: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let t = handle::borrow(trainer, "trainer")?;
        let es = t.inner.early_stopping().ok_or_else(|| Error::state("the trainer has no EarlyStopping callback"))?;
        write_early_stopping(es, wait_count, stopped_epoch, best_score);
        Ok(())
    })
}

/// Writes `es` to the out-pointers that are not NULL.
pub(super) unsafe fn write_early_stopping(
    es: crate::callbacks::EarlyStoppingState,
    wait_count: *mut i64,
    stopped_epoch: *mut i64,
    best_score: *mut f64,
) {
    if !wait_count.is_null() {
        wait_count.write(es.wait_count);
    }
    if !stopped_epoch.is_null() {
        stopped_epoch.write(es.stopped_epoch);
    }
    if !best_score.is_null() {
        best_score.write(es.best_score);
    }
}

/// Writes the GradScaler's loss scale at the end of the last fit
/// (Lightning's `trainer.precision_plugin.scaler.get_scale()`, under
/// `16-mixed`).
///
/// Errors: FULMEN_CODE_INVALID_STATE (no fit yet, or a precision without a
/// GradScaler).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_grad_scale(trainer: *const fulmen_trainer, out: *mut f64) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let scale = handle::borrow(trainer, "trainer")?
            .inner
            .grad_scale()
            .ok_or_else(|| Error::state("no GradScaler: no fit yet, or a precision other than 16-mixed"))?;
        write_out(out, "out", scale)
    })
}

/// Writes Lightning's `trainer.is_last_batch` after the last fit: whether
/// the last batch it trained on was its epoch's last (false before a fit).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_is_last_batch(
    trainer: *const fulmen_trainer,
    out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.is_last_batch()) })
}

/// Writes Lightning's `trainer.num_devices`: the devices a run uses on
/// this node, the last run's, or before any run the `accelerator` and
/// `devices` options resolved as a run resolves them.
///
/// Errors: FULMEN_CODE_UNAVAILABLE, FULMEN_CODE_INVALID_ARGUMENT (before
/// any run: an accelerator not available here, devices it cannot give).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_num_devices(
    trainer: *const fulmen_trainer,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let n = handle::borrow(trainer, "trainer")?.inner.num_devices()?;
        write_out(out, "out", n)
    })
}

/// Writes Lightning's `trainer.node_rank`: this node's index in a
/// distributed job, the last run's (0 but under DDP), or before any run
/// the environment's (torchrun, SLURM, `NODE_RANK`; 0 outside a job).
///
/// Errors: FULMEN_CODE_UNAVAILABLE, FULMEN_CODE_INVALID_ARGUMENT (before
/// any run: as `fulmen_trainer_num_devices`, or launcher variables that
/// are not numbers or do not fit `devices` and `num_nodes`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_node_rank(
    trainer: *const fulmen_trainer,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let n = handle::borrow(trainer, "trainer")?.inner.node_rank()?;
        write_out(out, "out", n)
    })
}
