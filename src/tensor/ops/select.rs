//! Selecting and masking: where, masked_fill, tril / triu, topk, sort,
//! argsort, max / min along a dimension, elementwise maximum / minimum,
//! scatter, one_hot.
use super::checks::{
    broadcast_shapes, check_bool, check_broadcast, check_dim, check_index, check_nonempty, checked_numel, size_at,
};
use crate::error::{Error, ErrorCode, Result};
use tch::{Kind, Tensor};

/// `x` where `condition` holds, else `y` (`torch.where`), broadcasting.
pub fn where_(condition: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    check_bool(condition, "where: condition")?;
    broadcast_shapes(&broadcast_shapes(&condition.size(), &x.size())?, &y.size())?;
    Ok(x.f_where_self(condition, y)?)
}

/// `x` with `value` where `mask` holds (`Tensor.masked_fill`).
pub fn masked_fill(x: &Tensor, mask: &Tensor, value: f64) -> Result<Tensor> {
    check_bool(mask, "masked_fill: mask")?;
    // As torch: `x` and `mask` broadcast together (the result may be larger than `x`).
    let shape =
        broadcast_shapes(&x.size(), &mask.size()).map_err(|e| Error::shape(format!("masked_fill: {}", e.message)))?;
    checked_numel(&shape, "masked_fill")?;
    Ok(x.f_masked_fill(mask, value)?)
}

fn check_matrix(x: &Tensor, what: &str) -> Result<()> {
    if x.dim() < 2 {
        return Err(Error::shape(format!("{what}: needs at least 2 dimensions, got shape {:?}", x.size())));
    }
    Ok(())
}

/// Lower triangle of the last two dimensions, from `diagonal` down.
pub fn tril(x: &Tensor, diagonal: i64) -> Result<Tensor> {
    check_matrix(x, "tril")?;
    Ok(x.f_tril(diagonal)?)
}

/// Upper triangle of the last two dimensions, from `diagonal` up.
pub fn triu(x: &Tensor, diagonal: i64) -> Result<Tensor> {
    check_matrix(x, "triu")?;
    Ok(x.f_triu(diagonal)?)
}

/// The `k` largest (or smallest) entries along `dim` and their positions.
pub fn topk(x: &Tensor, k: i64, dim: i64, largest: bool, sorted: bool) -> Result<(Tensor, Tensor)> {
    let d = check_dim(x, dim)?;
    let n = size_at(x, d);
    if k < 0 || k > n {
        return Err(Error::new(ErrorCode::OutOfRange, format!("topk: k = {k} outside [0, {n}] for dimension {dim}")));
    }
    Ok(x.f_topk(k, d, largest, sorted)?)
}

/// Entries sorted along `dim` and their original positions.
pub fn sort(x: &Tensor, dim: i64, descending: bool, stable: bool) -> Result<(Tensor, Tensor)> {
    let d = check_dim(x, dim)?;
    Ok(x.f_sort_stable(stable, d, descending)?)
}

/// Positions that sort `x` along `dim`.
pub fn argsort(x: &Tensor, dim: i64, descending: bool, stable: bool) -> Result<Tensor> {
    let d = check_dim(x, dim)?;
    Ok(x.f_argsort_stable(stable, d, descending)?)
}

/// Largest entries along `dim` and their positions (`torch.max(x, dim)`).
pub fn max_dim(x: &Tensor, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    let d = check_dim(x, dim)?;
    check_nonempty(x, &[d], "max_dim")?;
    Ok(x.f_max_dim(d, keepdim)?)
}

/// Smallest entries along `dim` and their positions (`torch.min(x, dim)`).
pub fn min_dim(x: &Tensor, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    let d = check_dim(x, dim)?;
    check_nonempty(x, &[d], "min_dim")?;
    Ok(x.f_min_dim(d, keepdim)?)
}

/// Elementwise larger of `x` and `other`, broadcasting.
pub fn maximum(x: &Tensor, other: &Tensor) -> Result<Tensor> {
    check_broadcast(x, other)?;
    Ok(x.f_maximum(other)?)
}

/// Elementwise smaller of `x` and `other`, broadcasting.
pub fn minimum(x: &Tensor, other: &Tensor) -> Result<Tensor> {
    check_broadcast(x, other)?;
    Ok(x.f_minimum(other)?)
}

fn check_scatter(x: &Tensor, dim: i64, index: &Tensor, src: &Tensor, what: &str) -> Result<i64> {
    let d = check_dim(x, dim)?;
    if index.dim() != x.dim() || src.dim() != x.dim() {
        return Err(Error::shape(format!(
            "{what}: input {:?}, index {:?} and src {:?} must have the same rank",
            x.size(),
            index.size(),
            src.size()
        )));
    }
    let (xs, is, ss) = (x.size(), index.size(), src.size());
    for i in 0..is.len() {
        if is[i] > ss[i] || (i as i64 != d && is[i] > xs[i]) {
            return Err(Error::shape(format!(
                "{what}: index shape {is:?} exceeds src {ss:?} or input {xs:?} in dimension {i}"
            )));
        }
    }
    check_index(index, size_at(x, d), what)?;
    Ok(d)
}

/// `x` with `src`'s values written at `index` along `dim` (`Tensor.scatter`).
pub fn scatter(x: &Tensor, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
    let d = check_scatter(x, dim, index, src, "scatter")?;
    Ok(x.f_scatter(d, &index.f_to_kind(Kind::Int64)?, src)?)
}

/// `x` with `src`'s values added at `index` along `dim` (`Tensor.scatter_add`).
pub fn scatter_add(x: &Tensor, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
    let d = check_scatter(x, dim, index, src, "scatter_add")?;
    Ok(x.f_scatter_add(d, &index.f_to_kind(Kind::Int64)?, src)?)
}

/// One-hot i64 encoding of class indices; `num_classes` -1 takes the
/// largest index plus one (`F.one_hot`).
pub fn one_hot(x: &Tensor, num_classes: i64) -> Result<Tensor> {
    if x.f_kind()? != Kind::Int64 {
        return Err(Error::dtype(format!("one_hot: indices must be i64, got {:?}", x.f_kind()?)));
    }
    if num_classes < -1 {
        return Err(Error::invalid(format!("one_hot: num_classes = {num_classes}, must be -1 or at least 0")));
    }
    let bound = if num_classes == -1 {
        if x.numel() == 0 {
            return Err(Error::invalid("one_hot: num_classes -1 needs at least one index"));
        }
        x.f_max()?.f_int64_value(&[])?.saturating_add(1)
    } else {
        num_classes
    };
    check_index(x, bound, "one_hot")?;
    let mut shape = x.size();
    shape.push(bound);
    checked_numel(&shape, "one_hot")?;
    Ok(x.f_one_hot(bound)?)
}
