//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `inplace` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::tensor::create::host_tensor;
use crate::tensor::ops;
use std::ffi::c_void;

/// `tensor.copy_(src)` under no_grad: `src` broadcast to `tensor`'s shape and
/// converted to its dtype and device, written into its storage (a parameter
/// from `fulmen_model_state_dict_get` changes in the model). `tensor` is
/// changed in place; nothing new is made. A meta tensor records the change for
/// when its model is materialized (`fulmen_meta_init_begin`):
/// FULMEN_CODE_INVALID_STATE for a change of part of one with no values
/// recorded, FULMEN_CODE_UNSUPPORTED for a view of one or a meta operand.
///
/// Errors: FULMEN_CODE_TORCH (shapes that do not broadcast, a tensor that
/// cannot be written, e.g. an expanded view).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_copy_(
    tensor: *const fulmen_tensor,
    src: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        let src = tensor_arg(src, "src")?;
        ops::copy_(&tensor, &src)
    })
}

/// Overwrites `tensor` with `nbytes` of row-major host data of the
/// `fulmen_dtype` `dtype` (converted to the tensor's dtype and device): sets a
/// parameter from a host buffer. `nbytes` must be the tensor's element count
/// times the size of `dtype`. `tensor` is changed in place; nothing new is
/// made. A meta tensor records the change for when its model is materialized
/// (`fulmen_meta_init_begin`): FULMEN_CODE_INVALID_STATE for a change of part
/// of one with no values recorded, FULMEN_CODE_UNSUPPORTED for a view of one or
/// a meta operand.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (`nbytes` does not match),
/// FULMEN_CODE_INVALID_ARGUMENT (bool data other than 0 / 1), FULMEN_CODE_TORCH
/// (the tensor cannot be written).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_copy_from_host(
    tensor: *const fulmen_tensor,
    data: *const c_void,
    nbytes: usize,
    dtype: i32,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        let data = host_tensor(data, nbytes, dtype, &tensor.size())?;
        ops::copy_from_host(&tensor, &data)
    })
}

/// `tensor.fill_(value)` under no_grad (`nn.init.constant_`; `zeros_` and
/// `ones_` are 0 and 1). `tensor` is changed in place; nothing new is made. A
/// meta tensor records the change for when its model is materialized
/// (`fulmen_meta_init_begin`): FULMEN_CODE_INVALID_STATE for a change of part
/// of one with no values recorded, FULMEN_CODE_UNSUPPORTED for a view of one or
/// a meta operand.
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_fill_(
    tensor: *const fulmen_tensor,
    value: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        ops::fill_(&tensor, value)
    })
}

/// `tensor.zero_()` under no_grad. `tensor` is changed in place; nothing new is
/// made. A meta tensor records the change for when its model is materialized
/// (`fulmen_meta_init_begin`): FULMEN_CODE_INVALID_STATE for a change of part
/// of one with no values recorded, FULMEN_CODE_UNSUPPORTED for a view of one or
/// a meta operand.
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_zero_(
    tensor: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        ops::zero_(&tensor)
    })
}

/// `tensor.add_(other, alpha=alpha)` under no_grad: `tensor += alpha * other`,
/// `other` broadcast (an EMA update is `mul_scalar_(decay)`, then `add_(param,
/// 1 - decay)`). `tensor` is changed in place; nothing new is made. A meta
/// tensor records the change for when its model is materialized
/// (`fulmen_meta_init_begin`): FULMEN_CODE_INVALID_STATE for a change of part
/// of one with no values recorded, FULMEN_CODE_UNSUPPORTED for a view of one or
/// a meta operand.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes that do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. dtypes that do not fit).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add_(
    tensor: *const fulmen_tensor,
    other: *const fulmen_tensor,
    alpha: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        let other = tensor_arg(other, "other")?;
        ops::add_(&tensor, &other, alpha)
    })
}

/// `tensor.add_(value)` under no_grad. `tensor` is changed in place; nothing
/// new is made. A meta tensor records the change for when its model is
/// materialized (`fulmen_meta_init_begin`): FULMEN_CODE_INVALID_STATE for a
/// change of part of one with no values recorded, FULMEN_CODE_UNSUPPORTED for a
/// view of one or a meta operand.
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add_scalar_(
    tensor: *const fulmen_tensor,
    value: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        ops::add_scalar_(&tensor, value)
    })
}

/// `tensor.mul_(other)` under no_grad, `other` broadcast (a pruning mask).
/// `tensor` is changed in place; nothing new is made. A meta tensor records the
/// change for when its model is materialized (`fulmen_meta_init_begin`):
/// FULMEN_CODE_INVALID_STATE for a change of part of one with no values
/// recorded, FULMEN_CODE_UNSUPPORTED for a view of one or a meta operand.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes that do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. dtypes that do not fit).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul_(
    tensor: *const fulmen_tensor,
    other: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        let other = tensor_arg(other, "other")?;
        ops::mul_(&tensor, &other)
    })
}

/// `tensor.mul_(value)` under no_grad. `tensor` is changed in place; nothing
/// new is made. A meta tensor records the change for when its model is
/// materialized (`fulmen_meta_init_begin`): FULMEN_CODE_INVALID_STATE for a
/// change of part of one with no values recorded, FULMEN_CODE_UNSUPPORTED for a
/// view of one or a meta operand.
///
/// Errors: FULMEN_CODE_TORCH (the tensor cannot be written).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul_scalar_(
    tensor: *const fulmen_tensor,
    value: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        ops::mul_scalar_(&tensor, value)
    })
}

/// `tensor.clamp_(min, max)` under no_grad; a NaN bound leaves that side open.
/// `tensor` is changed in place; nothing new is made. A meta tensor records the
/// change for when its model is materialized (`fulmen_meta_init_begin`):
/// FULMEN_CODE_INVALID_STATE for a change of part of one with no values
/// recorded, FULMEN_CODE_UNSUPPORTED for a view of one or a meta operand.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (min > max), FULMEN_CODE_TORCH (the
/// tensor cannot be written).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_clamp_(
    tensor: *const fulmen_tensor,
    min: f64,
    max: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        ops::clamp_(&tensor, min, max)
    })
}

/// `tensor.uniform_(low, high)` under no_grad, from the global generator
/// (`fulmen_manual_seed`; the same seed gives PyTorch's values). `tensor` is
/// changed in place; nothing new is made. A meta tensor records the change for
/// when its model is materialized (`fulmen_meta_init_begin`):
/// FULMEN_CODE_INVALID_STATE for a change of part of one with no values
/// recorded, FULMEN_CODE_UNSUPPORTED for a view of one or a meta operand.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not floating),
/// FULMEN_CODE_INVALID_ARGUMENT (bounds not finite, or low > high),
/// FULMEN_CODE_TORCH (bounds the dtype cannot hold, e.g. beyond f16's range).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_uniform_(
    tensor: *const fulmen_tensor,
    low: f64,
    high: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        ops::uniform_(&tensor, low, high)
    })
}

/// `tensor.normal_(mean, std)` under no_grad, from the global generator.
/// `tensor` is changed in place; nothing new is made. A meta tensor records the
/// change for when its model is materialized (`fulmen_meta_init_begin`):
/// FULMEN_CODE_INVALID_STATE for a change of part of one with no values
/// recorded, FULMEN_CODE_UNSUPPORTED for a view of one or a meta operand.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not floating),
/// FULMEN_CODE_INVALID_ARGUMENT (mean or std not finite, std negative).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_normal_(
    tensor: *const fulmen_tensor,
    mean: f64,
    std: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let tensor = tensor_arg(tensor, "tensor")?;
        ops::normal_(&tensor, mean, std)
    })
}
