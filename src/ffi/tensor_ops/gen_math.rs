//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `math` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{emit, fulmen_tensor, tensor_arg, tensor_list};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::check_out;
use crate::tensor::ops;
use crate::tensor::DType;
use std::ffi::c_char;
use tch::Tensor;

/// `out = a + b`, broadcasting as PyTorch does. The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let a = tensor_arg(a, "a")?;
        let b = tensor_arg(b, "b")?;
        emit(out, ops::add(&a, &b)?)
    })
}

/// `out = a - b`, broadcasting. The result is a new tensor written to `*out`.
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
    guard!(|| {
        check_out(out, "out")?;
        let a = tensor_arg(a, "a")?;
        let b = tensor_arg(b, "b")?;
        emit(out, ops::sub(&a, &b)?)
    })
}

/// `out = a * b` elementwise, broadcasting. The result is a new tensor written
/// to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let a = tensor_arg(a, "a")?;
        let b = tensor_arg(b, "b")?;
        emit(out, ops::mul(&a, &b)?)
    })
}

/// `out = a / b` elementwise (true division), broadcasting. The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_div(
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let a = tensor_arg(a, "a")?;
        let b = tensor_arg(b, "b")?;
        emit(out, ops::div(&a, &b)?)
    })
}

/// `out = a ^ b` elementwise, broadcasting. The result is a new tensor written
/// to `*out`.
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
    guard!(|| {
        check_out(out, "out")?;
        let a = tensor_arg(a, "a")?;
        let b = tensor_arg(b, "b")?;
        emit(out, ops::pow(&a, &b)?)
    })
}

/// `out = x + value`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_add_scalar(
    x: *const fulmen_tensor,
    value: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::add_scalar(&x, value)?)
    })
}

/// `out = x * value`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mul_scalar(
    x: *const fulmen_tensor,
    value: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::mul_scalar(&x, value)?)
    })
}

/// `out = x ^ exponent`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_pow_scalar(
    x: *const fulmen_tensor,
    exponent: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::pow_scalar(&x, exponent)?)
    })
}

/// `out = clamp(x, min, max)`. The result is a new tensor written to `*out`.
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
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::clamp(&x, min, max)?)
    })
}

/// `out = -x`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_neg(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::neg(&x)?)
    })
}

/// `out = exp(x)`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_exp(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::exp(&x)?)
    })
}

/// `out = ln(x)`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_log(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::log(&x)?)
    })
}

/// `out = sqrt(x)`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sqrt(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::sqrt(&x)?)
    })
}

/// `out = |x|`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_abs(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::abs(&x)?)
    })
}

/// Matrix product with `torch.matmul` semantics (vectors, matrices, batched).
/// The inner dimensions must agree. The result is a new tensor written to
/// `*out`.
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
    guard!(|| {
        check_out(out, "out")?;
        let a = tensor_arg(a, "a")?;
        let b = tensor_arg(b, "b")?;
        emit(out, ops::matmul(&a, &b)?)
    })
}

/// Sine, elementwise. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sin(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::sin(&x)?)
    })
}

/// Cosine, elementwise. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_cos(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::cos(&x)?)
    })
}

/// `1 / sqrt(x)`, elementwise. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_rsqrt(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::rsqrt(&x)?)
    })
}

/// `1 / x`, elementwise. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_reciprocal(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::reciprocal(&x)?)
    })
}

/// Rounds down, elementwise. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_floor(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::floor(&x)?)
    })
}

/// Rounds up, elementwise. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_ceil(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::ceil(&x)?)
    })
}

/// Rounds to the nearest integer, halves to even, elementwise. The result is a
/// new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_round(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::round(&x)?)
    })
}

/// -1, 0 or 1 by the sign of each element. The result is a new tensor written
/// to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sign(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::sign(&x)?)
    })
}

/// `log(1 + x)`, accurate near 0, elementwise. The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_log1p(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::log1p(&x)?)
    })
}

/// `exp(x) - 1`, accurate near 0, elementwise. The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_expm1(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::expm1(&x)?)
    })
}

/// Gauss error function, elementwise. The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_erf(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::erf(&x)?)
    })
}

/// `x * x`, elementwise. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_square(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::square(&x)?)
    })
}

/// Elementwise logical and (non-zero is true) as a bool tensor, broadcasting.
/// The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on
/// different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_logical_and(
    x: *const fulmen_tensor,
    other: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let other = tensor_arg(other, "other")?;
        emit(out, ops::logical_and(&x, &other)?)
    })
}

/// Elementwise logical or (non-zero is true) as a bool tensor, broadcasting.
/// The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on
/// different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_logical_or(
    x: *const fulmen_tensor,
    other: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let other = tensor_arg(other, "other")?;
        emit(out, ops::logical_or(&x, &other)?)
    })
}

/// Elementwise logical exclusive or (non-zero is true) as a bool tensor,
/// broadcasting. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on
/// different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_logical_xor(
    x: *const fulmen_tensor,
    other: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let other = tensor_arg(other, "other")?;
        emit(out, ops::logical_xor(&x, &other)?)
    })
}

/// Elementwise logical not (non-zero is true) as a bool tensor. The result is a
/// new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_logical_not(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::logical_not(&x)?)
    })
}

/// Einstein summation of `tensors[0..tensors_len]` by `equation`, e.g.
/// "bij,bjk->bik" (`torch.einsum`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (no tensors, or `equation` not UTF-8 or
/// holding other characters than letters, ',', '->' and '...'),
/// FULMEN_CODE_TORCH (libtorch refused the equation or the shapes).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_einsum(
    equation: *const c_char,
    tensors: *const *const fulmen_tensor,
    tensors_len: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let equation = str_arg(equation, "equation")?;
        let tensors = tensor_list(tensors, tensors_len, "tensors")?;
        let tensors: Vec<&Tensor> = tensors.iter().map(|t| &**t).collect();
        emit(out, ops::einsum(equation, &tensors)?)
    })
}

/// `steps` evenly spaced CPU values from `start` to `end`, both included
/// (`torch.linspace`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_INVALID_ARGUMENT (non-finite bounds or negative `steps`),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. a bool dtype) or
/// FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_linspace(
    start: f64,
    end: f64,
    steps: i64,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let dtype = DType::from_i32(dtype)?;
        emit(out, ops::linspace(start, end, steps, dtype)?)
    })
}
