//! Autograd from C: backward, gradients, requires_grad.
use crate::error::Error;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::tensor::handle::{emit, fulmen_tensor, tensor_arg};

/// Runs backpropagation from a one-element `tensor` (a loss), accumulating
/// gradients into the leaves that require them.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`tensor` has more or fewer than one
/// element), FULMEN_CODE_INVALID_STATE (`tensor` does not require grad),
/// FULMEN_CODE_DISTRIBUTED (a DDP all-reduce waiting on this backward failed:
/// another rank failed or timed out), FULMEN_CODE_TORCH (libtorch's backward
/// failed, e.g. the graph was already freed by an earlier backward).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_backward(tensor: *const fulmen_tensor) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        if t.numel() != 1 {
            return Err(Error::shape(format!("backward needs a one-element tensor, got shape {:?}", t.size())));
        }
        if !t.requires_grad() {
            return Err(Error::state(
                "backward: the tensor does not require grad (no parameter was used to compute it)",
            ));
        }
        crate::tensor::device::note_backward();
        t.f_backward().map_err(|e| crate::distributed::explain_backward(e.into()))
    })
}

/// Writes the accumulated gradient of `tensor` to `*out`, or NULL when it
/// has none yet. The gradient shares storage with the tensor's `.grad`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_grad(
    tensor: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check_out(out, "out")?;
        let g = tensor_arg(tensor, "tensor")?.grad();
        if g.defined() {
            emit(out, g)
        } else {
            out.write(std::ptr::null_mut());
            Ok(())
        }
    })
}

/// Turns gradient recording on or off for a leaf tensor.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not a leaf tensor),
/// FULMEN_CODE_DTYPE_MISMATCH (`requires_grad` on a non-floating tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_set_requires_grad(
    tensor: *mut fulmen_tensor,
    requires_grad: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let mut h = handle::borrow_mut(tensor, "tensor")?;
        if !h.tensor.is_leaf() {
            return Err(Error::state(
                "only leaf tensors (not results of operations) can change requires_grad; use fulmen_tensor_detach",
            ));
        }
        if requires_grad && !crate::tensor::dtype::is_floating(h.tensor.f_kind()?) {
            return Err(Error::dtype(format!("only floating tensors can require grad, got {:?}", h.tensor.kind())));
        }
        let t = h.tensor.f_set_requires_grad(requires_grad)?;
        h.tensor = t;
        Ok(())
    })
}
