//! Elementwise arithmetic with broadcasting, matrix products, elementwise
//! math and logic, einsum and linspace.
use super::checks::check_broadcast;
use crate::error::{Error, Result};
use crate::tensor::DType;
use tch::{Device, Tensor};

/// `a + b`, broadcasting.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_broadcast(a, b)?;
    Ok(a.f_add(b)?)
}
/// `a - b`, broadcasting.
pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_broadcast(a, b)?;
    Ok(a.f_sub(b)?)
}
/// `a * b` elementwise, broadcasting.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_broadcast(a, b)?;
    Ok(a.f_mul(b)?)
}
/// `a / b` elementwise (true division), broadcasting.
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_broadcast(a, b)?;
    Ok(a.f_div(b)?)
}
/// `a ^ b` elementwise, broadcasting.
pub fn pow(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_broadcast(a, b)?;
    Ok(a.f_pow(b)?)
}

/// `x + value`.
pub fn add_scalar(x: &Tensor, value: f64) -> Result<Tensor> {
    Ok(x.f_add_scalar(value)?)
}
/// `x * value`.
pub fn mul_scalar(x: &Tensor, value: f64) -> Result<Tensor> {
    Ok(x.f_mul_scalar(value)?)
}
/// `x ^ exponent`.
pub fn pow_scalar(x: &Tensor, exponent: f64) -> Result<Tensor> {
    Ok(x.f_pow_tensor_scalar(exponent)?)
}

/// `x` clamped into `[min, max]`; NaN bounds and `min > max` are refused.
pub fn clamp(x: &Tensor, min: f64, max: f64) -> Result<Tensor> {
    if min.is_nan() || max.is_nan() {
        return Err(Error::invalid("clamp: min and max must not be NaN"));
    }
    if min > max {
        return Err(Error::invalid(format!("clamp: min {min} > max {max}")));
    }
    Ok(x.f_clamp(min, max)?)
}

/// `-x`.
pub fn neg(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_neg()?)
}
/// `exp(x)`.
pub fn exp(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_exp()?)
}
/// `ln(x)`.
pub fn log(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_log()?)
}
/// `sqrt(x)`.
pub fn sqrt(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_sqrt()?)
}
/// `|x|`.
pub fn abs(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_abs()?)
}

/// Matrix product with `torch.matmul` semantics, after checking the dtypes
/// agree, neither tensor is 0-dimensional and the inner dimensions agree.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
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
}

/// Sine.
pub fn sin(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_sin()?)
}
/// Cosine.
pub fn cos(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_cos()?)
}
/// `1 / sqrt(x)`.
pub fn rsqrt(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_rsqrt()?)
}
/// `1 / x`.
pub fn reciprocal(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_reciprocal()?)
}
/// Rounds down.
pub fn floor(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_floor()?)
}
/// Rounds up.
pub fn ceil(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_ceil()?)
}
/// Rounds to nearest, halves to even.
pub fn round(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_round()?)
}
/// -1, 0 or 1 by sign.
pub fn sign(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_sign()?)
}
/// `log(1 + x)`, accurate near 0.
pub fn log1p(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_log1p()?)
}
/// `exp(x) - 1`, accurate near 0.
pub fn expm1(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_expm1()?)
}
/// Gauss error function.
pub fn erf(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_erf()?)
}
/// `x * x`.
pub fn square(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_square()?)
}

/// Elementwise logical and (non-zero is true), as bools, broadcasting.
pub fn logical_and(x: &Tensor, other: &Tensor) -> Result<Tensor> {
    check_broadcast(x, other)?;
    Ok(x.f_logical_and(other)?)
}
/// Elementwise logical or, as bools, broadcasting.
pub fn logical_or(x: &Tensor, other: &Tensor) -> Result<Tensor> {
    check_broadcast(x, other)?;
    Ok(x.f_logical_or(other)?)
}
/// Elementwise logical exclusive or, as bools, broadcasting.
pub fn logical_xor(x: &Tensor, other: &Tensor) -> Result<Tensor> {
    check_broadcast(x, other)?;
    Ok(x.f_logical_xor(other)?)
}
/// Elementwise logical not, as bools.
pub fn logical_not(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_logical_not()?)
}

/// Einstein summation over `tensors` (`torch.einsum`).
pub fn einsum(equation: &str, tensors: &[&Tensor]) -> Result<Tensor> {
    if tensors.is_empty() {
        return Err(Error::invalid("einsum: needs at least one tensor"));
    }
    if !equation.chars().all(|c| c.is_ascii_alphabetic() || " ,.->".contains(c)) {
        return Err(Error::invalid(format!("einsum: equation {equation:?} may hold letters, ',', '->', '...' only")));
    }
    Ok(Tensor::f_einsum(equation, tensors, None::<&[i64]>)?)
}

/// `steps` evenly spaced CPU values from `start` to `end`, both included.
pub fn linspace(start: f64, end: f64, steps: i64, dtype: DType) -> Result<Tensor> {
    if !start.is_finite() || !end.is_finite() || steps < 0 {
        return Err(Error::invalid(format!("linspace({start}, {end}, {steps}): bad range")));
    }
    Ok(Tensor::f_linspace(start, end, steps, (dtype.kind(), Device::Cpu))?)
}
