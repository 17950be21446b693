//! `fulmen_metric`: torchmetrics-style metrics that accumulate over an
//! epoch (accuracy, precision, recall, F1, AUROC, MAE, MSE, RMSE).
//! `gen_options` is generated from `src/ffi/options_table.rs`.
#[rustfmt::skip]
pub mod gen_options;

use crate::error::{Error, ErrorCode};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::metrics::gen_options::fulmen_metric_options;
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use crate::metrics::{self, Metric, MetricOptions};

/// A metric's state. Free with `fulmen_metric_free`.
pub struct fulmen_metric {
    pub(crate) inner: Box<dyn Metric>,
}

impl Handle for fulmen_metric {
    const C_NAME: &'static str = "fulmen_metric";
}

/// Creates a metric with an empty state. Its state lives on the device of
/// the first predictions it sees.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (`kind`
/// or `average` not one of their enums, `num_classes` neither 0 nor in
/// [2, 4096], a threshold outside [0, 1], `thresholds` neither 0 nor in
/// [2, 100000] or too many histogram cells, a micro-averaged multiclass
/// AUROC).
#[no_mangle]
pub unsafe extern "C" fn fulmen_metric_new(
    options: *const fulmen_metric_options,
    out: *mut *mut fulmen_metric,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
        let opts = MetricOptions::try_from(*o)?;
        out.write(handle::into_raw(fulmen_metric { inner: metrics::build(opts)? }));
        Ok(())
    })
}

/// Adds a batch: `preds` (scores, probabilities or labels) and `target`
/// (class indices, 0/1, or values for regression), not changed or kept
/// beyond the call except by an exact AUROC, which keeps a detached copy
/// of the probabilities. Runs without autograd.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_INVALID_STATE (the metric in use by another call),
/// FULMEN_CODE_INVALID_ARGUMENT (shapes that do not fit, a target class
/// outside [0, num_classes) or not a whole number, integer scores for
/// AUROC), FULMEN_CODE_TORCH.
#[no_mangle]
pub unsafe extern "C" fn fulmen_metric_update(
    metric: *mut fulmen_metric,
    preds: *const fulmen_tensor,
    target: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let mut m = handle::borrow_mut(metric, "metric")?;
        let p = tensor_arg(preds, "preds")?;
        let t = tensor_arg(target, "target")?;
        m.inner.update(&p, &t)
    })
}

/// Writes the value over everything updated since the last reset to
/// `*out`. In a distributed job of several ranks (the trainer's DDP, or a
/// host loop's `fulmen_distributed_join`) with `sync_on_compute`, the
/// states of all ranks are summed first: a collective, which every rank
/// must call in the same order.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_INVALID_STATE (no update yet, or the metric in use),
/// FULMEN_CODE_UNSUPPORTED (an exact AUROC syncing over ranks: bin it or
/// turn sync_on_compute off), FULMEN_CODE_DISTRIBUTED (the collective
/// failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_metric_compute(metric: *mut fulmen_metric, out: *mut f64) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let m = handle::borrow_mut(metric, "metric")?;
        out.write(metrics::compute_in_job(m.inner.as_ref())?);
        Ok(())
    })
}

/// Forgets the accumulated state (as at creation), as Lightning does at
/// the end of each epoch for a logged metric.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_INVALID_STATE (the metric in use by another call).
#[no_mangle]
pub unsafe extern "C" fn fulmen_metric_reset(metric: *mut fulmen_metric) -> *mut fulmen_error {
    guard!(|| {
        handle::borrow_mut(metric, "metric")?.inner.reset();
        Ok(())
    })
}

/// Frees a metric. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_metric_free(metric: *mut fulmen_metric) {
    handle::free(metric);
}
