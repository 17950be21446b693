//! Reshaping and joining: reshape, view, flatten, permute, transpose,
//! squeeze / unsqueeze, narrow, cat, stack.
use crate::error::{Error, Result};
use crate::ffi::base::error::fulmen_error;
use crate::ffi::base::error::function_name;
use crate::ffi::base::error::guard_named;
use crate::ffi::tensor::handle::{emit, fulmen_tensor, i64_list, tensor_list, unary};
use tch::Tensor;

pub use crate::tensor::ops::checks::check_dim;

fn check_numel(x: &Tensor, shape: &[i64]) -> Result<()> {
    let inferred = shape.iter().filter(|d| **d == -1).count();
    if inferred > 1 || shape.iter().any(|d| *d < -1) {
        return Err(Error::shape(format!("shape {shape:?}: at most one -1 and no other negative size")));
    }
    let known: i64 = shape.iter().filter(|d| **d != -1).product();
    let numel = x.numel() as i64;
    let ok = if inferred == 1 { known != 0 && numel % known == 0 } else { known == numel };
    if !ok {
        return Err(Error::shape(format!(
            "cannot reshape a tensor of shape {:?} ({numel} elements) to {shape:?}",
            x.size()
        )));
    }
    Ok(())
}

/// Same elements in a new shape (`-1` infers one size); copies if needed.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the element count does not fit `shape`,
/// or more than one -1 or another negative size), FULMEN_CODE_TORCH (libtorch
/// failed) or FULMEN_CODE_OUT_OF_MEMORY (copying).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_reshape(
    x: *const fulmen_tensor,
    shape: *const i64,
    ndim: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        let s = i64_list(shape, ndim, "shape")?;
        check_numel(x, s)?;
        Ok(x.f_reshape(s)?)
    })
}

/// Same storage in a new shape; fails when the layout does not allow a view.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the element count does not fit `shape`,
/// or more than one -1 or another negative size), FULMEN_CODE_TORCH (the layout
/// does not allow a view).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_view(
    x: *const fulmen_tensor,
    shape: *const i64,
    ndim: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        let s = i64_list(shape, ndim, "shape")?;
        check_numel(x, s)?;
        Ok(x.f_view(s)?)
    })
}

/// Flattens dimensions `start_dim..=end_dim` into one.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`start_dim` or `end_dim` out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (`start_dim` comes after `end_dim`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_flatten(
    x: *const fulmen_tensor,
    start_dim: i64,
    end_dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        let (s, e) = (check_dim(x, start_dim)?, check_dim(x, end_dim)?);
        if s > e && x.dim() > 0 {
            return Err(Error::invalid(format!("flatten: start_dim {start_dim} comes after end_dim {end_dim}")));
        }
        Ok(x.f_flatten(s, e)?)
    })
}

/// Reorders dimensions: `dims` is a permutation of `0..ndim`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`ndims` is not the tensor's number of
/// dimensions), FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_permute(
    x: *const fulmen_tensor,
    dims: *const i64,
    ndims: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        let d = i64_list(dims, ndims, "dims")?;
        if d.len() != x.dim() {
            return Err(Error::shape(format!("permute of a {}-d tensor needs {} dims, got {d:?}", x.dim(), x.dim())));
        }
        let mut norm: Vec<i64> = d.iter().map(|v| check_dim(x, *v)).collect::<Result<_>>()?;
        let perm = norm.clone();
        norm.sort_unstable();
        if norm.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::invalid(format!("permute: {d:?} repeats a dimension")));
        }
        Ok(x.f_permute(perm.as_slice())?)
    })
}

/// Swaps dimensions `dim0` and `dim1`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim0` or `dim1` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_transpose(
    x: *const fulmen_tensor,
    dim0: i64,
    dim1: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_transpose(check_dim(x, dim0)?, check_dim(x, dim1)?)?))
}

/// Removes dimension `dim` if its size is 1 (otherwise returns the same shape).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_squeeze(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_squeeze_dim(check_dim(x, dim)?)?))
}

/// Inserts a dimension of size 1 at `dim` (`-1` appends).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_unsqueeze(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        let n = x.dim() as i64 + 1;
        if dim < -n || dim >= n {
            return Err(Error::new(
                crate::error::ErrorCode::OutOfRange,
                format!("unsqueeze: dimension {dim} out of range for shape {:?}", x.size()),
            ));
        }
        Ok(x.f_unsqueeze(if dim < 0 { dim + n } else { dim })?)
    })
}

/// The slice `start..start+length` of dimension `dim` (a view).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or the slice does not
/// lie inside the dimension), FULMEN_CODE_SHAPE_MISMATCH (a 0-dimensional tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_narrow(
    x: *const fulmen_tensor,
    dim: i64,
    start: i64,
    length: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        if x.dim() == 0 {
            return Err(Error::shape("narrow needs a tensor with at least one dimension, got a scalar"));
        }
        let d = check_dim(x, dim)?;
        let size = x.size().get(d as usize).copied().unwrap_or(1);
        if start < 0 || length < 0 || start.checked_add(length).is_none_or(|end| end > size) {
            return Err(Error::new(
                crate::error::ErrorCode::OutOfRange,
                format!("narrow({dim}, {start}, {length}) on shape {:?}", x.size()),
            ));
        }
        Ok(x.f_narrow(d, start, length)?)
    })
}

unsafe fn join(
    func: &'static str,
    tensors: *const *const fulmen_tensor,
    n: usize,
    dim: i64,
    out: *mut *mut fulmen_tensor,
    stack: bool,
) -> *mut fulmen_error {
    guard_named(func, || {
        crate::ffi::base::handle::check_out(out, "out")?;
        let list = tensor_list(tensors, n, "tensors")?;
        let first = list.first().ok_or_else(|| Error::invalid("needs at least one tensor"))?;
        let s0 = first.size();
        for (i, t) in list.iter().enumerate() {
            let s = t.size();
            let same = if stack {
                s == s0
            } else {
                s.len() == s0.len() && {
                    let d = check_dim(first, dim)? as usize;
                    s.iter().zip(&s0).enumerate().all(|(k, (a, b))| k == d || a == b)
                }
            };
            if !same {
                return Err(Error::shape(format!("tensors[{i}] has shape {s:?}, tensors[0] has {s0:?}")));
            }
        }
        let refs: Vec<&Tensor> = list.iter().map(|t| &**t).collect();
        let y = if stack {
            let n = s0.len() as i64 + 1;
            if dim < -n || dim >= n {
                return Err(Error::new(
                    crate::error::ErrorCode::OutOfRange,
                    format!("stack: dimension {dim} out of range"),
                ));
            }
            Tensor::f_stack(&refs, dim)?
        } else {
            Tensor::f_cat(&refs, check_dim(first, dim)?)?
        };
        emit(out, y)
    })
}

/// Concatenates `tensors[0..n]` along the existing dimension `dim`; all
/// other dimensions must match.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n` is 0), FULMEN_CODE_SHAPE_MISMATCH
/// (ranks, or sizes outside `dim`, differ), FULMEN_CODE_OUT_OF_RANGE (`dim` out
/// of range), FULMEN_CODE_TORCH (libtorch failed, e.g. 0-dimensional tensors or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_cat(
    tensors: *const *const fulmen_tensor,
    n: usize,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    join(function_name!(), tensors, n, dim, out, false)
}

/// Stacks `tensors[0..n]` (all of one shape) along a new dimension `dim`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n` is 0), FULMEN_CODE_SHAPE_MISMATCH
/// (shapes differ), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_stack(
    tensors: *const *const fulmen_tensor,
    n: usize,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    join(function_name!(), tensors, n, dim, out, true)
}
