//! Batches at the boundary: the read-only batch a step callback receives,
//! and the builder a host data source fills.
use crate::error::{Error, ErrorCode};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, write_out, Handle};
use crate::ffi::tensor::handle::{emit, fulmen_tensor, tensor_arg};
use tch::Tensor;

/// A batch given to a step callback: an ordered list of tensors (for
/// example inputs then targets). Borrowed: valid only during the callback.
pub struct fulmen_batch {
    pub(crate) tensors: Vec<Tensor>,
}

impl Handle for fulmen_batch {
    const C_NAME: &'static str = "fulmen_batch";
}

/// Writes the number of tensors in the batch.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_batch_len(batch: *const fulmen_batch, out: *mut usize) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", handle::borrow(batch, "batch")?.tensors.len()))
}

/// Writes a handle to tensor `index` of the batch. Inside a callback it is
/// released when the callback returns unless kept with `fulmen_tensor_keep`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`index` past the batch).
#[no_mangle]
pub unsafe extern "C" fn fulmen_batch_get(
    batch: *const fulmen_batch,
    index: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check_out(out, "out")?;
        let b = handle::borrow(batch, "batch")?;
        let t = b.tensors.get(index).ok_or_else(|| {
            Error::new(ErrorCode::OutOfRange, format!("batch has {} tensors, index {index} asked", b.tensors.len()))
        })?;
        emit(out, t.shallow_clone())
    })
}

/// A batch under construction, filled by a host data-source callback with
/// `fulmen_batch_builder_push`. Borrowed: valid only during the callback.
pub struct fulmen_batch_builder {
    pub(crate) tensors: Vec<Tensor>,
}

impl Handle for fulmen_batch_builder {
    const C_NAME: &'static str = "fulmen_batch_builder";
}

/// Appends a tensor to the batch being built. The builder shares the
/// tensor; the host still owns (or the callback scope releases) `tensor`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_batch_builder_push(
    builder: *mut fulmen_batch_builder,
    tensor: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let mut b = handle::borrow_mut(builder, "builder")?;
        let t = tensor_arg(tensor, "tensor")?;
        b.tensors.push(t.shallow_clone());
        Ok(())
    })
}

/// Runs `f` with a temporary handle to `value`, which is unregistered after
/// the call so the host cannot keep using it. Returns the value back.
pub(crate) fn with_temp_handle<T: Handle, R>(value: T, f: impl FnOnce(*mut T) -> R) -> (T, R) {
    let p = handle::into_raw(value);
    let r = f(p);
    // SAFETY: `p` was created just above; the borrowed types have no free
    // function, and calls still using it on other threads finish first.
    let v = unsafe { handle::revoke(p) }.expect("temporary handle taken twice");
    (v, r)
}

/// Makes sure all tensors of a host batch have a sample dimension.
pub(crate) fn check_batch(tensors: &[Tensor], what: &str) -> crate::error::Result<()> {
    if tensors.is_empty() {
        return Err(Error::invalid(format!("{what} produced an empty batch (no tensor pushed)")));
    }
    Ok(())
}
