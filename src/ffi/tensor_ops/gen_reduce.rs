//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `reduce` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{emit, fulmen_tensor, i64_list, tensor_arg};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::check_out;
use crate::tensor::ops;

/// Sum of all elements (a 0-dimensional tensor). The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sum(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::sum(&x)?)
    })
}

/// Mean of all elements (floating tensors only). The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mean(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::mean(&x)?)
    })
}

/// Sum over `dims[0..ndims]`, keeping them as size 1 when `keepdim`. The result
/// is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sum_dims(
    x: *const fulmen_tensor,
    dims: *const i64,
    ndims: usize,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, ndims, "dims")?;
        emit(out, ops::sum_dims(&x, dims, keepdim)?)
    })
}

/// Mean over `dims[0..ndims]`, keeping them as size 1 when `keepdim`. The
/// result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating),
/// FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mean_dims(
    x: *const fulmen_tensor,
    dims: *const i64,
    ndims: usize,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, ndims, "dims")?;
        emit(out, ops::mean_dims(&x, dims, keepdim)?)
    })
}

/// Largest element (0-dimensional). The tensor must not be empty. The result is
/// a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_max(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::max(&x)?)
    })
}

/// Smallest element (0-dimensional). The tensor must not be empty. The result
/// is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_min(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::min(&x)?)
    })
}

/// Indices (i64) of the largest values along `dim`. The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch
/// failed, e.g. a bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_argmax(
    x: *const fulmen_tensor,
    dim: i64,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::argmax(&x, dim, keepdim)?)
    })
}

/// Indices (i64) of the smallest values along `dim`. The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch
/// failed, e.g. a bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_argmin(
    x: *const fulmen_tensor,
    dim: i64,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::argmin(&x, dim, keepdim)?)
    })
}

/// Running sum along `dim` (`torch.cumsum`); integers and bools accumulate in
/// i64. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. an unsupported dtype).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_cumsum(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::cumsum(&x, dim)?)
    })
}

/// Running product along `dim` (`torch.cumprod`); integers and bools accumulate
/// in i64. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. an unsupported dtype).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_cumprod(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::cumprod(&x, dim)?)
    })
}

/// `log(sum(exp(x)))` over `dims` (all dimensions when `dims_len` is 0),
/// computed stably (`torch.logsumexp`; integer and bool input is read as f32,
/// as torch reads it). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_logsumexp(
    x: *const fulmen_tensor,
    dims: *const i64,
    dims_len: usize,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, dims_len, "dims")?;
        emit(out, ops::logsumexp(&x, dims, keepdim)?)
    })
}

/// Largest value over `dims` (all dimensions when `dims_len` is 0)
/// (`torch.amax`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice),
/// FULMEN_CODE_SHAPE_MISMATCH (a reduced dimension is empty), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_amax(
    x: *const fulmen_tensor,
    dims: *const i64,
    dims_len: usize,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, dims_len, "dims")?;
        emit(out, ops::amax(&x, dims, keepdim)?)
    })
}

/// Smallest value over `dims` (all dimensions when `dims_len` is 0)
/// (`torch.amin`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice),
/// FULMEN_CODE_SHAPE_MISMATCH (a reduced dimension is empty), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_amin(
    x: *const fulmen_tensor,
    dims: *const i64,
    dims_len: usize,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, dims_len, "dims")?;
        emit(out, ops::amin(&x, dims, keepdim)?)
    })
}

/// Variance over `dims` (all dimensions when `dims_len` is 0); `unbiased`
/// divides by N - 1 (`torch.var`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice),
/// FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating point), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_var(
    x: *const fulmen_tensor,
    dims: *const i64,
    dims_len: usize,
    unbiased: bool,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, dims_len, "dims")?;
        emit(out, ops::var(&x, dims, unbiased, keepdim)?)
    })
}

/// Standard deviation over `dims` (all dimensions when `dims_len` is 0);
/// `unbiased` divides by N - 1 (`torch.std`). The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice),
/// FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating point), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_std(
    x: *const fulmen_tensor,
    dims: *const i64,
    dims_len: usize,
    unbiased: bool,
    keepdim: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, dims_len, "dims")?;
        emit(out, ops::std(&x, dims, unbiased, keepdim)?)
    })
}

/// Whether every element is non-zero, as a 0-dimensional bool tensor
/// (`torch.all`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_all(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::all(&x)?)
    })
}

/// Whether any element is non-zero, as a 0-dimensional bool tensor
/// (`torch.any`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_any(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::any(&x)?)
    })
}
