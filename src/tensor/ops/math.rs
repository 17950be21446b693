//! Elementwise math and logic beyond the basic arithmetic, einsum and
//! linspace.
use super::checks::check_broadcast;
use crate::error::{Error, Result};
use crate::tensor::DType;
use tch::{Device, Tensor};

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
