//! Lightning's `BasePredictionWriter` with host functions
//! (`fulmen/prediction.h`): each batch's prediction, or each loader's of
//! the epoch, as tensors or as whole values.
use crate::callbacks::prediction_writer::{
    BatchPrediction, EpochPredictions, PredictionWriter, WriteBatchFn, WriteEpochFn, WriteInterval,
};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, opt_str};
use crate::ffi::base::handle;
use crate::ffi::tensor::handle::{fulmen_tensor, new_handle, new_scoped};
use crate::ffi::trainer::runs::fulmen_trainer;
use crate::ffi::value::fulmen_value;
use crate::nn::{NodeBudget, Value};
use crate::trainer::Prediction;
use std::ffi::{c_char, c_void};
use std::rc::Rc;

/// Lightning's `write_on_batch_end`: writes one predict batch's
/// `prediction` (NULL when predict_step returned none), given the dataset
/// indices of its samples (`batch_indices[0..n_batch_indices]`; NULL and 0
/// when the loader cannot tell, a host iterator), the batch
/// (`batch[0..batch_len]`), its index in its loader and the loader's
/// index. The tensors are borrowed, released when it returns
/// (`fulmen_tensor_share` keeps one); the arrays are valid during the call.
/// Return NULL, or an error to fail predict.
pub type fulmen_prediction_batch_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        prediction: *const fulmen_tensor,
        batch_indices: *const i64,
        n_batch_indices: usize,
        batch: *const *const fulmen_tensor,
        batch_len: usize,
        batch_idx: i64,
        dataloader_idx: usize,
    ) -> *mut fulmen_error,
>;

/// Lightning's `write_on_epoch_end`, once per loader at the end of the
/// predict epoch: `predictions[0..n_batches]` are the loader's batches'
/// predictions in order (NULL for a batch that returned none), and
/// `batch_indices` the dataset indices of all their samples, batch after
/// batch, `batch_index_counts[i]` of them for batch i (NULL arrays when
/// `n_batches` is 0; `batch_indices` also NULL when the loader cannot tell,
/// its counts then 0). Borrowed as for `fulmen_prediction_batch_fn`.
/// Return NULL, or an error to fail predict.
pub type fulmen_prediction_epoch_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        dataloader_idx: usize,
        predictions: *const *const fulmen_tensor,
        n_batches: usize,
        batch_indices: *const i64,
        batch_index_counts: *const usize,
    ) -> *mut fulmen_error,
>;

/// `write_on_batch_end` with the whole prediction, as Lightning's writer
/// gets it: `prediction` is a value (`fulmen/value.h`): None (the step
/// predicted nothing), a tensor, a tuple of tensors
/// (`fulmen_step_context_add_prediction`) or a dict of named tensors
/// (`fulmen_step_context_add_named_prediction`); the other arguments as
/// for `fulmen_prediction_batch_fn`. The value is borrowed, released when
/// it returns (`fulmen_value_keep` keeps it). Return NULL, or an error to
/// fail predict.
pub type fulmen_prediction_value_batch_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        prediction: *const fulmen_value,
        batch_indices: *const i64,
        n_batch_indices: usize,
        batch: *const *const fulmen_tensor,
        batch_len: usize,
        batch_idx: i64,
        dataloader_idx: usize,
    ) -> *mut fulmen_error,
>;

/// `write_on_epoch_end` with the whole predictions: `predictions` is a
/// list value of the loader's `n_batches` batches' predictions in order
/// (each as for `fulmen_prediction_value_batch_fn`); `batch_indices` and
/// `batch_index_counts` as for `fulmen_prediction_epoch_fn`. Borrowed as
/// for the batch function. Return NULL, or an error to fail predict.
pub type fulmen_prediction_value_epoch_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        dataloader_idx: usize,
        predictions: *const fulmen_value,
        n_batches: usize,
        batch_indices: *const i64,
        batch_index_counts: *const usize,
    ) -> *mut fulmen_error,
>;

type BatchFn = unsafe extern "C" fn(
    *mut c_void,
    *const fulmen_tensor,
    *const i64,
    usize,
    *const *const fulmen_tensor,
    usize,
    i64,
    usize,
) -> *mut fulmen_error;

type EpochFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *const *const fulmen_tensor,
    usize,
    *const i64,
    *const usize,
) -> *mut fulmen_error;

type ValueBatchFn = unsafe extern "C" fn(
    *mut c_void,
    *const fulmen_value,
    *const i64,
    usize,
    *const *const fulmen_tensor,
    usize,
    i64,
    usize,
) -> *mut fulmen_error;

type ValueEpochFn =
    unsafe extern "C" fn(*mut c_void, usize, *const fulmen_value, usize, *const i64, *const usize) -> *mut fulmen_error;

/// The slice's address, NULL when it is empty.
fn ptr_or_null<T>(s: &[T]) -> *const T {
    if s.is_empty() {
        std::ptr::null()
    } else {
        s.as_ptr()
    }
}

/// A borrowed handle to `t` in the running call's tensor scope.
fn lend(t: &tch::Tensor) -> *const fulmen_tensor {
    new_handle(t.shallow_clone()).cast_const()
}

fn batch_writer(f: BatchFn, ud: Rc<Userdata>) -> WriteBatchFn {
    Box::new(move |p: &BatchPrediction<'_>| {
        let what = format!("write_on_batch_end (batch {}, dataloader {})", p.batch_idx, p.dataloader_idx);
        call_host(&what, || {
            let prediction = p.prediction.map_or(std::ptr::null(), lend);
            let batch: Vec<*const fulmen_tensor> = p.batch.iter().map(lend).collect();
            let indices = ptr_or_null(p.batch_indices);
            // SAFETY: the host's function with its own userdata and handles
            // alive until the scope call_host opened ends.
            unsafe {
                f(
                    ud.ptr(),
                    prediction,
                    indices,
                    p.batch_indices.len(),
                    ptr_or_null(&batch),
                    batch.len(),
                    p.batch_idx,
                    p.dataloader_idx,
                )
            }
        })
    })
}

fn epoch_writer(f: EpochFn, ud: Rc<Userdata>) -> WriteEpochFn {
    Box::new(move |e: &EpochPredictions<'_>| {
        let counts: Vec<usize> = e.batch_indices.iter().map(Vec::len).collect();
        let indices: Vec<i64> = e.batch_indices.concat();
        let what = format!("write_on_epoch_end (dataloader {})", e.dataloader_idx);
        call_host(&what, || {
            let predictions: Vec<*const fulmen_tensor> =
                e.predictions.iter().map(|p| p.output.as_ref().map_or(std::ptr::null(), lend)).collect();
            // SAFETY: as in batch_writer; the arrays outlive the call.
            unsafe {
                f(
                    ud.ptr(),
                    e.dataloader_idx,
                    ptr_or_null(&predictions),
                    predictions.len(),
                    ptr_or_null(&indices),
                    ptr_or_null(&counts),
                )
            }
        })
    })
}

/// A value handle lent for the running host call (released when it ends).
fn lend_value(value: Value) -> *const fulmen_value {
    new_scoped(fulmen_value { value }).cast_const()
}

fn value_batch_writer(f: ValueBatchFn, ud: Rc<Userdata>) -> WriteBatchFn {
    Box::new(move |p: &BatchPrediction<'_>| {
        let what = format!("write_on_batch_end (batch {}, dataloader {})", p.batch_idx, p.dataloader_idx);
        call_host(&what, || {
            let prediction = lend_value(p.value.to_value());
            let batch: Vec<*const fulmen_tensor> = p.batch.iter().map(lend).collect();
            // SAFETY: as in batch_writer.
            unsafe {
                f(
                    ud.ptr(),
                    prediction,
                    ptr_or_null(p.batch_indices),
                    p.batch_indices.len(),
                    ptr_or_null(&batch),
                    batch.len(),
                    p.batch_idx,
                    p.dataloader_idx,
                )
            }
        })
    })
}

fn value_epoch_writer(f: ValueEpochFn, ud: Rc<Userdata>) -> WriteEpochFn {
    Box::new(move |e: &EpochPredictions<'_>| {
        let counts: Vec<usize> = e.batch_indices.iter().map(Vec::len).collect();
        let indices: Vec<i64> = e.batch_indices.concat();
        let list = Value::List(e.predictions.iter().map(Prediction::to_value).collect());
        list.count_into(&mut NodeBudget::for_result()).map_err(|err| {
            Error::new(ErrorCode::OutOfRange, format!("the epoch's predictions to write: {}", err.message))
        })?;
        let what = format!("write_on_epoch_end (dataloader {})", e.dataloader_idx);
        call_host(&what, || {
            let predictions = lend_value(list.shallow_clone());
            // SAFETY: as in batch_writer; the arrays outlive the call.
            unsafe {
                f(
                    ud.ptr(),
                    e.dataloader_idx,
                    predictions,
                    e.predictions.len(),
                    ptr_or_null(&indices),
                    ptr_or_null(&counts),
                )
            }
        })
    })
}

/// Reads `write_interval` (NULL: "batch") and checks that the functions
/// it uses are there.
pub(crate) unsafe fn interval_of(write_interval: *const c_char, batch: bool, epoch: bool) -> Result<WriteInterval> {
    let interval = match opt_str(write_interval, "write_interval")? {
        Some(s) => WriteInterval::parse(&s)?,
        None => WriteInterval::Batch,
    };
    interval.check_writers(batch, epoch)?;
    Ok(interval)
}

/// The writer of the host's tensor functions (those `interval` uses),
/// owning `ud`; `interval` comes from [`interval_of`].
pub(crate) fn tensor_writer(
    interval: WriteInterval,
    on_batch: fulmen_prediction_batch_fn,
    on_epoch: fulmen_prediction_epoch_fn,
    ud: Userdata,
) -> PredictionWriter {
    let ud = Rc::new(ud);
    let on_batch = on_batch.filter(|_| interval.on_batch()).map(|f| batch_writer(f, ud.clone()));
    let on_epoch = on_epoch.filter(|_| interval.on_epoch()).map(|f| epoch_writer(f, ud.clone()));
    PredictionWriter::new(interval, on_batch, on_epoch)
}

/// The writer of the host's value functions (those `interval` uses),
/// owning `ud`; `interval` comes from [`interval_of`].
pub(crate) fn value_writer(
    interval: WriteInterval,
    on_batch: fulmen_prediction_value_batch_fn,
    on_epoch: fulmen_prediction_value_epoch_fn,
    ud: Userdata,
) -> PredictionWriter {
    let ud = Rc::new(ud);
    let on_batch = on_batch.filter(|_| interval.on_batch()).map(|f| value_batch_writer(f, ud.clone()));
    let on_epoch = on_epoch.filter(|_| interval.on_epoch()).map(|f| value_epoch_writer(f, ud.clone()));
    PredictionWriter::new(interval, on_batch, on_epoch)
}

/// Adds Lightning's `BasePredictionWriter` with host functions: during
/// `fulmen_trainer_predict` (and `_predict_loaders`), `write_on_batch_end`
/// gets each batch's prediction as it is made when `write_interval` is
/// "batch" (NULL: the default, Lightning's) or "batch_and_epoch", and
/// `write_on_epoch_end` gets each loader's predictions of the epoch at its
/// end when it is "epoch" or "batch_and_epoch" (once per loader in order,
/// where Lightning calls it once with all loaders' lists; a predict over
/// no batch calls it once for loader 0 with none). With a DataLoader the
/// samples' dataset indices come too (shuffled, and under DDP each rank's
/// share, as Lightning's `batch_indices`). A function the interval does
/// not use may be NULL. Both run on the thread that runs predict, one call
/// at a time, under the trainer's `callback_timeout`; a call into the
/// running trainer from inside them fails with FULMEN_CODE_INVALID_STATE
/// (the trainer is in use); their error (code kept; FULMEN_CODE_CALLBACK
/// for an invalid handle) fails predict; in C++ and Go an exception or
/// panic comes back as the error, never across fulmen. `userdata_free`
/// (may be NULL) runs once when the trainer is freed, not when this call
/// fails. The epoch writer's predictions are held (not copied) until the
/// epoch ends.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`write_interval` not "batch",
/// "epoch" or "batch_and_epoch", or not UTF-8), FULMEN_CODE_NULL_ARGUMENT
/// (a function the interval uses is NULL). At predict: the functions' own
/// errors.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_prediction_writer(
    trainer: *mut fulmen_trainer,
    write_interval: *const c_char,
    write_on_batch_end: fulmen_prediction_batch_fn,
    write_on_epoch_end: fulmen_prediction_epoch_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut fulmen_error {
    guard!(|| {
        let interval = interval_of(write_interval, write_on_batch_end.is_some(), write_on_epoch_end.is_some())?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        // Nothing fails from here on, so the destructor is armed at once.
        let ud = Userdata::new(userdata, userdata_free);
        t.inner.add_callback(Box::new(tensor_writer(interval, write_on_batch_end, write_on_epoch_end, ud)));
        Ok(())
    })
}

/// `fulmen_trainer_add_prediction_writer` with the whole predictions, as
/// Lightning's `BasePredictionWriter` gets them: a batch's prediction is a
/// value, None, its tensor, or the tuple or dict of tensors predict_step
/// made, and the epoch's a list of them (`fulmen_prediction_value_batch_fn`,
/// `fulmen_prediction_value_epoch_fn`). Everything else (intervals,
/// indices, threads, errors, `userdata_free`) as there.
///
/// Errors: as `fulmen_trainer_add_prediction_writer`; at predict,
/// FULMEN_CODE_OUT_OF_RANGE when an epoch's predictions hold more than
/// FULMEN_MAX_VALUE_NODES values.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_prediction_value_writer(
    trainer: *mut fulmen_trainer,
    write_interval: *const c_char,
    write_on_batch_end: fulmen_prediction_value_batch_fn,
    write_on_epoch_end: fulmen_prediction_value_epoch_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut fulmen_error {
    guard!(|| {
        let interval = interval_of(write_interval, write_on_batch_end.is_some(), write_on_epoch_end.is_some())?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        // Nothing fails from here on, so the destructor is armed at once.
        let ud = Userdata::new(userdata, userdata_free);
        t.inner.add_callback(Box::new(value_writer(interval, write_on_batch_end, write_on_epoch_end, ud)));
        Ok(())
    })
}
