//! Elementwise arithmetic with broadcasting, matrix products, activations.
use crate::error::{Error, Result};
use crate::ffi::base::error::fulmen_error;
use crate::ffi::base::error::function_name;
use crate::ffi::tensor::handle::{binary, check_broadcast, fulmen_tensor, unary};
use tch::Tensor;

fn broadcasting(
    a: &Tensor,
    b: &Tensor,
    op: fn(&Tensor, &Tensor) -> std::result::Result<Tensor, tch::TchError>,
) -> Result<Tensor> {
    check_broadcast(a, b)?;
    Ok(op(a, b)?)
}

/// `out = a + b`, broadcasting as PyTorch does.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), a, b, out, |a, b| broadcasting(a, b, Tensor::f_add))
}

/// `out = a - b`, broadcasting.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices or two
/// bool tensors).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sub(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), a, b, out, |a, b| broadcasting(a, b, Tensor::f_sub))
}

/// `out = a * b` elementwise, broadcasting.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), a, b, out, |a, b| broadcasting(a, b, Tensor::f_mul))
}

/// `out = a / b` elementwise (true division), broadcasting.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_div(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), a, b, out, |a, b| broadcasting(a, b, Tensor::f_div))
}

/// `out = a ^ b` elementwise, broadcasting.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices or
/// integers to negative integer powers).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_pow(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), a, b, out, |a, b| broadcasting(a, b, Tensor::f_pow))
}

/// `out = x + value`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add_scalar(
    x: *const fulmen_tensor,
    value: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_add_scalar(value)?))
}

/// `out = x * value`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul_scalar(
    x: *const fulmen_tensor,
    value: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_mul_scalar(value)?))
}

/// `out = x ^ exponent`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_pow_scalar(
    x: *const fulmen_tensor,
    exponent: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_pow_tensor_scalar(exponent)?))
}

/// `out = clamp(x, min, max)`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`min` or `max` is NaN, or `min` >
/// `max`), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_clamp(
    x: *const fulmen_tensor,
    min: f64,
    max: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| {
        if min.is_nan() || max.is_nan() {
            return Err(Error::invalid("clamp: min and max must not be NaN"));
        }
        if min > max {
            return Err(Error::invalid(format!("clamp: min {min} > max {max}")));
        }
        Ok(x.f_clamp(min, max)?)
    })
}

/// `out = -x`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_neg(x: *const fulmen_tensor, out: *mut *mut fulmen_tensor) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_neg()?))
}

/// `out = exp(x)`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_exp(x: *const fulmen_tensor, out: *mut *mut fulmen_tensor) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_exp()?))
}

/// `out = ln(x)`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_log(x: *const fulmen_tensor, out: *mut *mut fulmen_tensor) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_log()?))
}

/// `out = sqrt(x)`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sqrt(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_sqrt()?))
}

/// `out = |x|`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_abs(x: *const fulmen_tensor, out: *mut *mut fulmen_tensor) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_abs()?))
}

/// Matrix product with `torch.matmul` semantics (vectors, matrices,
/// batched). The inner dimensions must agree.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (the dtypes differ, or i64/i32 where
/// libtorch has no kernel, e.g. on CUDA), FULMEN_CODE_SHAPE_MISMATCH (a
/// 0-dimensional tensor, inner dimensions that differ, or batch dimensions that
/// do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on
/// different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_matmul(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary(function_name!(), a, b, out, |a, b| {
        let (ka, kb) = (a.f_kind()?, b.f_kind()?);
        if ka != kb {
            return Err(Error::dtype(format!("matmul of {ka:?} and {kb:?}: both tensors need the same dtype")));
        }
        let (sa, sb) = (a.size(), b.size());
        if sa.is_empty() || sb.is_empty() {
            return Err(Error::shape(format!("matmul needs tensors of at least 1 dimension, got {sa:?} and {sb:?}")));
        }
        let k_a = sa[sa.len() - 1];
        let k_b = if sb.len() == 1 { sb[0] } else { sb[sb.len() - 2] };
        if k_a != k_b {
            return Err(Error::shape(format!("matmul of {sa:?} and {sb:?}: inner dimensions {k_a} and {k_b} differ")));
        }
        Ok(a.f_matmul(b)?)
    })
}

/// `out = max(x, 0)`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_relu(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_relu()?))
}

/// `out = x if x > 0 else slope * x`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_leaky_relu(
    x: *const fulmen_tensor,
    slope: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| crate::tensor::functional::leaky_relu(x, slope))
}

/// Logistic sigmoid.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sigmoid(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_sigmoid()?))
}

/// Hyperbolic tangent.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_tanh(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_tanh()?))
}

/// GELU (exact, erf form).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (an i64 or i32 tensor), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. another integer or bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_gelu(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_gelu("none")?))
}

/// SiLU (swish): `x * sigmoid(x)`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (an i64 or i32 tensor), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. another integer or bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_silu(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_silu()?))
}

/// Softmax along `dim` (negative counts from the end).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch
/// failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_softmax(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_softmax(floating_dim(x, dim, "softmax")?, None)?))
}

/// Log-softmax along `dim` (negative counts from the end).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch
/// failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_log_softmax(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), x, out, |x| Ok(x.f_log_softmax(floating_dim(x, dim, "log_softmax")?, None)?))
}

/// Checks that `x` is floating and normalises `dim`.
fn floating_dim(x: &Tensor, dim: i64, what: &str) -> Result<i64> {
    if !crate::tensor::dtype::is_floating(x.f_kind()?) {
        return Err(Error::dtype(format!("{what} needs a floating tensor, got {:?}", x.kind())));
    }
    crate::ffi::tensor_ops::shape::check_dim(x, dim)
}
