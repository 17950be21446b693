//! Indexing and comparisons: index_select, gather, elementwise compares.
use crate::error::{Error, Result};
use crate::ffi::base::error::fulmen_error;
use crate::ffi::base::error::function_name;
use crate::ffi::tensor::handle::{binary, check_broadcast, fulmen_tensor, unary};
use crate::tensor::ops::checks::{check_dim, check_index};
use tch::{Kind, Tensor};

/// Selects entries along `dim` at the positions in the 1-D i64/i32 tensor
/// `index` (`torch.index_select`).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or an index value
/// outside [0, size of `dim`)), FULMEN_CODE_SHAPE_MISMATCH (`index` is not
/// 1-D), FULMEN_CODE_DTYPE_MISMATCH (`index` is not i64 or i32),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_index_select(
    x: *const fulmen_tensor,
    dim: i64,
    index: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), x, index, out, |x, index| {
        let d = check_dim(x, dim)?;
        if index.dim() > 1 {
            return Err(Error::shape(format!("index_select: index must be 1-D, got shape {:?}", index.size())));
        }
        check_index(index, x.size().get(d as usize).copied().unwrap_or(1), "index_select")?;
        Ok(x.f_index_select(d, &index.f_to_kind(Kind::Int64)?)?)
    })
}

/// Gathers values along `dim` (`torch.gather`): `index` has as many
/// dimensions as `x` and holds positions along `dim`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or an index value
/// outside [0, size of `dim`)), FULMEN_CODE_SHAPE_MISMATCH (`index` and `x`
/// differ in rank), FULMEN_CODE_DTYPE_MISMATCH (`index` is not i64 or i32),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. `index` larger than `x` in another
/// dimension, or tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_gather(
    x: *const fulmen_tensor,
    dim: i64,
    index: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), x, index, out, |x, index| {
        let d = check_dim(x, dim)?;
        if index.dim() != x.dim() {
            return Err(Error::shape(format!(
                "gather: index shape {:?} and input shape {:?} differ in rank",
                index.size(),
                x.size()
            )));
        }
        check_index(index, x.size().get(d as usize).copied().unwrap_or(1), "gather")?;
        Ok(x.f_gather(d, &index.f_to_kind(Kind::Int64)?, false)?)
    })
}

/// Elementwise comparison ops of the C API (`fulmen_compare`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// `a == b`
    Eq = 0,
    /// `a != b`
    Ne = 1,
    /// `a < b`
    Lt = 2,
    /// `a <= b`
    Le = 3,
    /// `a > b`
    Gt = 4,
    /// `a >= b`
    Ge = 5,
}

fn compare(a: &Tensor, b: &Tensor, op: i32) -> Result<Tensor> {
    check_broadcast(a, b)?;
    Ok(match op {
        0 => a.f_eq_tensor(b)?,
        1 => a.f_ne_tensor(b)?,
        2 => a.f_lt_tensor(b)?,
        3 => a.f_le_tensor(b)?,
        4 => a.f_gt_tensor(b)?,
        5 => a.f_ge_tensor(b)?,
        _ => return Err(Error::invalid(format!("{op} is not a fulmen_compare (0..=5)"))),
    })
}

/// Elementwise comparison `a <op> b` with broadcasting; `op` is a
/// `fulmen_compare`. The result is a bool tensor.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_INVALID_ARGUMENT (`op` is not a fulmen_compare),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_compare(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    op: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), a, b, out, |a, b| compare(a, b, op))
}

/// Elementwise comparison of `x` with a scalar; `op` is a `fulmen_compare`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`op` is not a fulmen_compare),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_compare_scalar(
    x: *const fulmen_tensor,
    value: f64,
    op: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        let s = crate::tensor::device::to_device_of(
            &Tensor::f_full([0i64; 0].as_slice(), value, (Kind::Double, tch::Device::Cpu))?,
            x,
        )?;
        compare(x, &s, op)
    })
}
