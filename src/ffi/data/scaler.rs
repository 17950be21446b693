//! `fulmen_scaler`: feature scaling fitted on one dataset (the training
//! split) and applied to others, with its statistics readable.
use crate::data::{Scaler, ScalerKind};
use crate::error::Error;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::data::datasets::{dataset_arg, emit_dataset, fulmen_dataset};
use crate::ffi::tensor::handle::{emit, fulmen_tensor};
use std::sync::Arc;

/// What a scaler computes per feature (`fulmen_scaler_kind`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalerKindCode {
    /// `(x - mean) / std` with the population std (scikit-learn's
    /// StandardScaler); a constant feature becomes 0.
    Standardize = 0,
    /// `(x - min) / (max - min)`; a constant feature becomes 0.
    MinMax = 1,
}

/// A scaling fitted on one column of a dataset. Free with
/// `fulmen_scaler_free`; any thread may use it.
pub struct fulmen_scaler {
    pub(crate) inner: Arc<Scaler>,
}

impl Handle for fulmen_scaler {
    const C_NAME: &'static str = "fulmen_scaler";
}

/// Fits a `fulmen_scaler_kind` on column `column` (floating-point
/// features) of `dataset`, every sample read once (twice to standardize):
/// per feature, the mean and population std, or the min and max. A host
/// data source's callbacks run on the calling thread. `*out` is a new
/// scaler.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown kind, an empty dataset,
/// no such column), FULMEN_CODE_DTYPE_MISMATCH (the column is not
/// floating-point), and what reading the dataset gives.
#[no_mangle]
pub unsafe extern "C" fn fulmen_scaler_fit(
    dataset: *const fulmen_dataset,
    column: usize,
    kind: i32,
    out: *mut *mut fulmen_scaler,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let kind = match kind {
            0 => ScalerKind::Standardize,
            1 => ScalerKind::MinMax,
            k => return Err(Error::invalid(format!("{k} is not a fulmen_scaler_kind (0 or 1)"))),
        };
        let ds = dataset_arg(dataset, "dataset")?.clone();
        let scaler = Scaler::fit(ds.as_ref(), column, kind)?;
        out.write(handle::into_raw(fulmen_scaler { inner: Arc::new(scaler) }));
        Ok(())
    })
}

/// The statistics the scaler was fitted to, as new float64 tensors shaped
/// as one sample's column: the mean (`*first_out`) and std
/// (`*second_out`), or the min and max.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE.
#[no_mangle]
pub unsafe extern "C" fn fulmen_scaler_stats(
    scaler: *const fulmen_scaler,
    first_out: *mut *mut fulmen_tensor,
    second_out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(first_out, "first_out")?;
        check_out(second_out, "second_out")?;
        let (first, second) = handle::borrow(scaler, "scaler")?.inner.stats()?;
        emit(first_out, first)?;
        emit(second_out, second)
    })
}

/// `dataset` with the scaler's column scaled by the fitted statistics, as
/// it is read (the dtype kept; other columns untouched). `*out` is a new
/// dataset that keeps `dataset` and the scaler's statistics.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE; reading
/// the new dataset fails with FULMEN_CODE_SHAPE_MISMATCH or
/// FULMEN_CODE_DTYPE_MISMATCH when its column differs from the fitted one.
#[no_mangle]
pub unsafe extern "C" fn fulmen_scaler_apply(
    scaler: *const fulmen_scaler,
    dataset: *const fulmen_dataset,
    out: *mut *mut fulmen_dataset,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let s = Arc::clone(&handle::borrow(scaler, "scaler")?.inner);
        let ds = dataset_arg(dataset, "dataset")?.clone();
        emit_dataset(out, Arc::new(s.apply(ds)))
    })
}

/// Frees a scaler (datasets it scales keep its statistics). NULL or an
/// already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_scaler_free(scaler: *mut fulmen_scaler) {
    handle::free(scaler);
}
