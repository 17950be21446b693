//! In-place changes of existing tensors from C (parameters and buffers
//! through `fulmen_model_state_dict_get`, EMA copies): copy, fill, add,
//! multiply, clamp, random fills and host data. All run under no_grad.
use crate::error::Result;
use crate::ffi::base::error::function_name;
use crate::ffi::base::error::guard_named;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::tensor::create::host_tensor;
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use crate::tensor::inplace;

unsafe fn on(
    name: &'static str,
    t: *const fulmen_tensor,
    f: impl FnOnce(&tch::Tensor) -> Result<()>,
) -> *mut fulmen_error {
    guard_named(name, || f(&*tensor_arg(t, "tensor")?))
}

/// `tensor.copy_(src)` under no_grad: `src` broadcast to `tensor`'s shape
/// and converted to its dtype and device, written into its storage (a
/// parameter from `fulmen_model_state_dict_get` changes in the model).
///
/// Errors: FULMEN_CODE_TORCH (shapes that do not broadcast, a tensor that
/// cannot be written, e.g. an expanded view).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_copy_(
    tensor: *const fulmen_tensor,
    src: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| inplace::copy_(&*tensor_arg(tensor, "tensor")?, &*tensor_arg(src, "src")?))
}

/// Overwrites `tensor` with `nbytes` of row-major host data of the
/// `fulmen_dtype` `dtype` (converted to the tensor's dtype and device):
/// sets a parameter from a host buffer. `nbytes` must be the tensor's
/// element count times the size of `dtype`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (`nbytes` does not match),
/// FULMEN_CODE_INVALID_ARGUMENT (bool data other than 0 / 1),
/// FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_copy_from_host(
    tensor: *const fulmen_tensor,
    data: *const std::ffi::c_void,
    nbytes: usize,
    dtype: i32,
) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        inplace::copy_(&t, &host_tensor(data, nbytes, dtype, &t.size())?)
    })
}

/// `tensor.fill_(value)` under no_grad (`nn.init.constant_`; `zeros_` and
/// `ones_` are 0 and 1).
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_fill_(tensor: *const fulmen_tensor, value: f64) -> *mut fulmen_error {
    on(function_name!(), tensor, |t| inplace::fill_(t, value))
}

/// `tensor.zero_()` under no_grad.
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_zero_(tensor: *const fulmen_tensor) -> *mut fulmen_error {
    on(function_name!(), tensor, inplace::zero_)
}

/// `tensor.add_(other, alpha=alpha)` under no_grad: `tensor += alpha *
/// other`, `other` broadcast (an EMA update is `mul_scalar_(decay)` then
/// `add_(param, 1 - decay)`).
///
/// Errors: FULMEN_CODE_TORCH (shapes or dtypes that do not fit).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add_(
    tensor: *const fulmen_tensor,
    other: *const fulmen_tensor,
    alpha: f64,
) -> *mut fulmen_error {
    guard!(|| inplace::add_(&*tensor_arg(tensor, "tensor")?, &*tensor_arg(other, "other")?, alpha))
}

/// `tensor.add_(value)` under no_grad.
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add_scalar_(tensor: *const fulmen_tensor, value: f64) -> *mut fulmen_error {
    on(function_name!(), tensor, |t| inplace::add_scalar_(t, value))
}

/// `tensor.mul_(other)` under no_grad, `other` broadcast (a pruning mask).
///
/// Errors: FULMEN_CODE_TORCH (shapes or dtypes that do not fit).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul_(
    tensor: *const fulmen_tensor,
    other: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| inplace::mul_(&*tensor_arg(tensor, "tensor")?, &*tensor_arg(other, "other")?))
}

/// `tensor.mul_(value)` under no_grad.
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul_scalar_(tensor: *const fulmen_tensor, value: f64) -> *mut fulmen_error {
    on(function_name!(), tensor, |t| inplace::mul_scalar_(t, value))
}

/// `tensor.clamp_(min, max)` under no_grad; a NaN bound leaves that side open.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (min > max), FULMEN_CODE_TORCH (the
/// tensor cannot be written).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_clamp_(tensor: *const fulmen_tensor, min: f64, max: f64) -> *mut fulmen_error {
    let bound = |v: f64| if v.is_nan() { None } else { Some(v) };
    on(function_name!(), tensor, |t| inplace::clamp_(t, bound(min), bound(max)))
}

/// `tensor.uniform_(low, high)` under no_grad, from the global generator
/// (`fulmen_manual_seed`; the same seed gives PyTorch's values).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not floating),
/// FULMEN_CODE_INVALID_ARGUMENT (bounds not finite, or low > high),
/// FULMEN_CODE_TORCH (bounds the dtype cannot hold, e.g. beyond f16's range).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_uniform_(
    tensor: *const fulmen_tensor,
    low: f64,
    high: f64,
) -> *mut fulmen_error {
    on(function_name!(), tensor, |t| inplace::uniform_(t, low, high))
}

/// `tensor.normal_(mean, std)` under no_grad, from the global generator.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not floating),
/// FULMEN_CODE_INVALID_ARGUMENT (mean or std not finite, std negative).
/// Thread rules: as `fulmen_tensor_copy_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_normal_(tensor: *const fulmen_tensor, mean: f64, std: f64) -> *mut fulmen_error {
    on(function_name!(), tensor, |t| inplace::normal_(t, mean, std))
}
