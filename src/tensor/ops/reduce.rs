//! Reductions and scans: sums, means, extrema and arg-extrema, cumsum,
//! cumprod, logsumexp, amax / amin, var / std, all / any.
use super::checks::{check_dim, check_dims, check_floating, check_nonempty};
use crate::error::{Error, Result};
use tch::{Kind, Tensor};

/// Sum of all elements (0-dimensional).
pub fn sum(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_sum(None)?)
}

/// Mean of all elements of a floating `x` (0-dimensional).
pub fn mean(x: &Tensor) -> Result<Tensor> {
    floating_for_mean(x)?;
    Ok(x.f_mean(None)?)
}

/// Sum over `dims`, keeping them as size 1 when `keepdim`.
pub fn sum_dims(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    let d = check_dims(x, dims)?;
    Ok(x.f_sum_dim_intlist(d.as_slice(), keepdim, None)?)
}

/// Mean over `dims` of a floating `x`, keeping them as size 1 when
/// `keepdim`.
pub fn mean_dims(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    floating_for_mean(x)?;
    let d = check_dims(x, dims)?;
    Ok(x.f_mean_dim(d.as_slice(), keepdim, None)?)
}

fn floating_for_mean(x: &Tensor) -> Result<()> {
    if !crate::tensor::dtype::is_floating(x.f_kind()?) {
        return Err(Error::dtype(format!("mean needs a floating tensor, got {:?}", x.kind())));
    }
    Ok(())
}

/// Largest element (0-dimensional) of a non-empty `x`.
pub fn max(x: &Tensor) -> Result<Tensor> {
    nonempty(x, "max")?;
    Ok(x.f_max()?)
}

/// Smallest element (0-dimensional) of a non-empty `x`.
pub fn min(x: &Tensor) -> Result<Tensor> {
    nonempty(x, "min")?;
    Ok(x.f_min()?)
}

/// Positions (i64) of the largest values along `dim`.
pub fn argmax(x: &Tensor, dim: i64, keepdim: bool) -> Result<Tensor> {
    nonempty(x, "argmax")?;
    Ok(x.f_argmax(check_dim(x, dim)?, keepdim)?)
}

/// Positions (i64) of the smallest values along `dim`.
pub fn argmin(x: &Tensor, dim: i64, keepdim: bool) -> Result<Tensor> {
    nonempty(x, "argmin")?;
    Ok(x.f_argmin(check_dim(x, dim)?, keepdim)?)
}

fn nonempty(x: &Tensor, what: &str) -> Result<()> {
    if x.numel() == 0 {
        return Err(Error::shape(format!("{what} of an empty tensor (shape {:?})", x.size())));
    }
    Ok(())
}

/// Running sum along `dim` (integers and bools accumulate in i64).
pub fn cumsum(x: &Tensor, dim: i64) -> Result<Tensor> {
    Ok(x.f_cumsum(check_dim(x, dim)?, None::<Kind>)?)
}

/// Running product along `dim` (integers and bools accumulate in i64).
pub fn cumprod(x: &Tensor, dim: i64) -> Result<Tensor> {
    Ok(x.f_cumprod(check_dim(x, dim)?, None::<Kind>)?)
}

/// All dimensions when `dims` is empty, else the normalised `dims`.
fn reduced(x: &Tensor, dims: &[i64]) -> Result<Vec<i64>> {
    if dims.is_empty() {
        return Ok((0..x.dim() as i64).collect());
    }
    check_dims(x, dims)
}

/// `log(sum(exp(x)))` over `dims` (all when empty), computed stably.
pub fn logsumexp(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    let d = reduced(x, dims)?;
    // Integers and bools are read as f32, as torch does.
    let x =
        if crate::tensor::dtype::is_floating(x.f_kind()?) { x.shallow_clone() } else { x.f_to_kind(tch::Kind::Float)? };
    Ok(x.f_logsumexp(d, keepdim)?)
}

/// Largest value over `dims` (all when empty).
pub fn amax(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    let d = reduced(x, dims)?;
    check_nonempty(x, &d, "amax")?;
    Ok(x.f_amax(d, keepdim)?)
}

/// Smallest value over `dims` (all when empty).
pub fn amin(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    let d = reduced(x, dims)?;
    check_nonempty(x, &d, "amin")?;
    Ok(x.f_amin(d, keepdim)?)
}

/// Variance over `dims` (all when empty); `unbiased` divides by N - 1.
pub fn var(x: &Tensor, dims: &[i64], unbiased: bool, keepdim: bool) -> Result<Tensor> {
    check_floating(x, "var")?;
    Ok(x.f_var_dim(Some(reduced(x, dims)?.as_slice()), unbiased, keepdim)?)
}

/// Standard deviation over `dims` (all when empty); `unbiased` divides by
/// N - 1.
pub fn std(x: &Tensor, dims: &[i64], unbiased: bool, keepdim: bool) -> Result<Tensor> {
    check_floating(x, "std")?;
    Ok(x.f_std_dim(Some(reduced(x, dims)?.as_slice()), unbiased, keepdim)?)
}

/// Whether every element is non-zero, as a 0-dimensional bool tensor.
pub fn all(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_all()?)
}

/// Whether any element is non-zero, as a 0-dimensional bool tensor.
pub fn any(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_any()?)
}
