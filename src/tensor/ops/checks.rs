//! Argument checks shared by the tensor ops: dimensions, broadcasting,
//! index tensors, dtypes and element counts, each with a clear error.
use crate::error::{Error, ErrorCode, Result};
use tch::{Kind, Tensor};

/// Normalises a possibly negative dimension of `x`, or a clear error.
pub fn check_dim(x: &Tensor, dim: i64) -> Result<i64> {
    dim_in(x.dim() as i64, dim, &x.size())
}

/// Normalises `dim` for a rank-`rank` tensor of shape `shape` (a scalar
/// accepts 0 and -1, as in PyTorch).
fn dim_in(rank: i64, dim: i64, shape: &[i64]) -> Result<i64> {
    let r = rank.max(1);
    if dim < -r || dim >= r {
        return Err(Error::new(
            ErrorCode::OutOfRange,
            format!("dimension {dim} out of range for a tensor of shape {shape:?}"),
        ));
    }
    Ok(if dim < 0 { dim + r } else { dim })
}

/// Normalises every dimension in `dims` and refuses repeats.
pub fn check_dims(x: &Tensor, dims: &[i64]) -> Result<Vec<i64>> {
    let mut out = Vec::with_capacity(dims.len().min(x.dim().max(1)));
    for d in dims {
        let n = check_dim(x, *d)?;
        if out.contains(&n) {
            return Err(Error::invalid(format!("dimension {d} appears twice in {dims:?}")));
        }
        out.push(n);
    }
    Ok(out)
}

/// Size of `x` along the normalised dimension `dim` (1 for a scalar).
pub fn size_at(x: &Tensor, dim: i64) -> i64 {
    x.size().get(dim as usize).copied().unwrap_or(1)
}

/// Result shape of broadcasting `a` with `b`, or a shape error naming both.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() { 1 } else { a[i - (n - a.len())] };
        let db = if i < n - b.len() { 1 } else { b[i - (n - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::shape(format!(
                    "shapes {a:?} and {b:?} do not broadcast (dimension {i}: {da} vs {db})"
                )))
            }
        };
    }
    Ok(out)
}

/// Checks that `a` and `b` broadcast together.
pub fn check_broadcast(a: &Tensor, b: &Tensor) -> Result<()> {
    broadcast_shapes(&a.size(), &b.size()).map(|_| ())
}

/// Checks that `index` is an i64/i32 tensor whose values lie in [0, bound).
pub fn check_index(index: &Tensor, bound: i64, what: &str) -> Result<()> {
    let k = index.f_kind()?;
    if k != Kind::Int64 && k != Kind::Int {
        return Err(Error::dtype(format!("{what}: index must be i64 or i32, got {k:?}")));
    }
    if index.numel() > 0 {
        let lo = index.f_min()?.f_int64_value(&[])?;
        let hi = index.f_max()?.f_int64_value(&[])?;
        if lo < 0 || hi >= bound {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("{what}: index values span [{lo}, {hi}], valid range is [0, {bound})"),
            ));
        }
    }
    Ok(())
}

/// Checks that `t` holds booleans.
pub fn check_bool(t: &Tensor, what: &str) -> Result<()> {
    let k = t.f_kind()?;
    if k != Kind::Bool {
        return Err(Error::dtype(format!("{what} must be a bool tensor, got {k:?}")));
    }
    Ok(())
}

/// Checks that `x` holds floating-point values.
pub fn check_floating(x: &Tensor, what: &str) -> Result<()> {
    let k = x.f_kind()?;
    if !crate::tensor::dtype::is_floating(k) {
        return Err(Error::dtype(format!("{what}: input must be floating, got {k:?}")));
    }
    Ok(())
}

/// Checks that none of the normalised dimensions `dims` of `x` is empty
/// (a reduction over it has no value).
pub fn check_nonempty(x: &Tensor, dims: &[i64], what: &str) -> Result<()> {
    let s = x.size();
    if dims.iter().any(|d| s.get(*d as usize) == Some(&0)) {
        return Err(Error::shape(format!("{what}: cannot reduce an empty dimension of shape {s:?}")));
    }
    Ok(())
}

/// Checks the sizes an unflatten splits a dimension into: at least one,
/// none below -1, at most one -1.
pub fn check_unflatten_sizes(sizes: &[i64]) -> Result<()> {
    let inferred = sizes.iter().filter(|s| **s == -1).count();
    if sizes.is_empty() || inferred > 1 || sizes.iter().any(|s| *s < -1) {
        return Err(Error::shape(format!("unflatten: sizes {sizes:?} need at least one entry, at most one -1")));
    }
    Ok(())
}

/// Element count of `shape`, refusing negative sizes and overflow.
pub fn checked_numel(shape: &[i64], what: &str) -> Result<i64> {
    shape.iter().try_fold(1i64, |n, d| {
        if *d < 0 {
            return Err(Error::shape(format!("{what}: negative size in {shape:?}")));
        }
        n.checked_mul(*d).ok_or_else(|| Error::shape(format!("{what}: {shape:?} has too many elements")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_normalise_and_refuse_repeats() {
        let x = Tensor::zeros([2, 3, 4], (Kind::Float, tch::Device::Cpu));
        assert_eq!(check_dims(&x, &[-1, 0]).unwrap(), vec![2, 0]);
        assert_eq!(check_dims(&x, &[2, -1]).unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(check_dim(&x, 3).unwrap_err().code, ErrorCode::OutOfRange);
    }

    #[test]
    fn numel_overflow_is_a_shape_error() {
        assert_eq!(checked_numel(&[1 << 40, 1 << 40], "t").unwrap_err().code, ErrorCode::ShapeMismatch);
        assert_eq!(checked_numel(&[2, -1], "t").unwrap_err().code, ErrorCode::ShapeMismatch);
        assert_eq!(checked_numel(&[], "t").unwrap(), 1);
    }
}
