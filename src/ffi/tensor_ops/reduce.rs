//! Reductions: sums, means, extrema, arg-extrema.
use crate::error::{Error, Result};
use crate::ffi::base::error::fulmen_error;
use crate::ffi::base::error::function_name;
use crate::ffi::tensor::handle::{fulmen_tensor, i64_list, unary};
use crate::ffi::tensor_ops::shape::check_dim;
use tch::Tensor;

fn dims_checked(x: &Tensor, dims: &[i64]) -> Result<Vec<i64>> {
    let mut seen = Vec::with_capacity(dims.len());
    for d in dims {
        let d = check_dim(x, *d)?;
        if seen.contains(&d) {
            return Err(Error::invalid(format!("dimension {d} appears twice in {dims:?}")));
        }
        seen.push(d);
    }
    Ok(seen)
}

/// Sum of all elements (a 0-dimensional tensor).
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sum(x: *const fulmen_tensor, out: *mut *mut fulmen_tensor) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_sum(None)?))
}

/// Mean of all elements (floating tensors only).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mean(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        if !crate::tensor::dtype::is_floating(x.f_kind()?) {
            return Err(Error::dtype(format!("mean needs a floating tensor, got {:?}", x.kind())));
        }
        Ok(x.f_mean(None)?)
    })
}

/// Sum over `dims[0..ndims]`, keeping them as size 1 when `keepdim`.
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
    unary(function_name!(), x, out, |x| {
        let d = dims_checked(x, i64_list(dims, ndims, "dims")?)?;
        Ok(x.f_sum_dim_intlist(d.as_slice(), keepdim, None)?)
    })
}

/// Mean over `dims[0..ndims]`, keeping them as size 1 when `keepdim`.
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
    unary(function_name!(), x, out, |x| {
        if !crate::tensor::dtype::is_floating(x.f_kind()?) {
            return Err(Error::dtype(format!("mean needs a floating tensor, got {:?}", x.kind())));
        }
        let d = dims_checked(x, i64_list(dims, ndims, "dims")?)?;
        Ok(x.f_mean_dim(d.as_slice(), keepdim, None)?)
    })
}

fn nonempty(x: &Tensor, what: &str) -> Result<()> {
    if x.numel() == 0 {
        return Err(Error::shape(format!("{what} of an empty tensor (shape {:?})", x.size())));
    }
    Ok(())
}

/// Largest element (0-dimensional). The tensor must not be empty.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_max(x: *const fulmen_tensor, out: *mut *mut fulmen_tensor) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        nonempty(x, "max")?;
        Ok(x.f_max()?)
    })
}

/// Smallest element (0-dimensional). The tensor must not be empty.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty), FULMEN_CODE_TORCH
/// (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_min(x: *const fulmen_tensor, out: *mut *mut fulmen_tensor) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        nonempty(x, "min")?;
        Ok(x.f_min()?)
    })
}

/// Indices (i64) of the largest values along `dim`.
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
    unary(function_name!(), x, out, |x| {
        nonempty(x, "argmax")?;
        Ok(x.f_argmax(check_dim(x, dim)?, keepdim)?)
    })
}

/// Indices (i64) of the smallest values along `dim`.
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
    unary(function_name!(), x, out, |x| {
        nonempty(x, "argmin")?;
        Ok(x.f_argmin(check_dim(x, dim)?, keepdim)?)
    })
}
