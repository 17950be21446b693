//! Views and copies that change a shape: reshape, view, flatten, permute,
//! transpose, squeeze / unsqueeze, narrow, expand, repeat, flip, roll,
//! unflatten; joins (cat, stack); and the splits that return several
//! tensors (chunk, split, split_sizes, unbind), each with a `*_count` that
//! says how many pieces it makes before making them.
use super::checks::{check_dim, check_dims, check_unflatten_sizes, checked_numel, size_at};
use crate::error::{Error, ErrorCode, Result};
use tch::Tensor;

/// Checks that `x`'s element count fits `shape` (at most one -1, which
/// infers a size, and no other negative size).
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

/// The same elements in `shape` (-1 infers one size), copying if needed.
pub fn reshape(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    check_numel(x, shape)?;
    Ok(x.f_reshape(shape)?)
}

/// The same storage in `shape`; libtorch refuses layouts that allow no view.
pub fn view(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    check_numel(x, shape)?;
    Ok(x.f_view(shape)?)
}

/// Dimensions `start_dim..=end_dim` flattened into one.
pub fn flatten(x: &Tensor, start_dim: i64, end_dim: i64) -> Result<Tensor> {
    let (s, e) = (check_dim(x, start_dim)?, check_dim(x, end_dim)?);
    if s > e && x.dim() > 0 {
        return Err(Error::invalid(format!("flatten: start_dim {start_dim} comes after end_dim {end_dim}")));
    }
    Ok(x.f_flatten(s, e)?)
}

/// Dimensions reordered by `dims`, a permutation of `0..x.dim()`.
pub fn permute(x: &Tensor, dims: &[i64]) -> Result<Tensor> {
    if dims.len() != x.dim() {
        return Err(Error::shape(format!("permute of a {}-d tensor needs {} dims, got {dims:?}", x.dim(), x.dim())));
    }
    let mut norm: Vec<i64> = dims.iter().map(|v| check_dim(x, *v)).collect::<Result<_>>()?;
    let perm = norm.clone();
    norm.sort_unstable();
    if norm.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::invalid(format!("permute: {dims:?} repeats a dimension")));
    }
    Ok(x.f_permute(perm.as_slice())?)
}

/// Dimensions `dim0` and `dim1` swapped.
pub fn transpose(x: &Tensor, dim0: i64, dim1: i64) -> Result<Tensor> {
    Ok(x.f_transpose(check_dim(x, dim0)?, check_dim(x, dim1)?)?)
}

/// Dimension `dim` removed if its size is 1.
pub fn squeeze(x: &Tensor, dim: i64) -> Result<Tensor> {
    Ok(x.f_squeeze_dim(check_dim(x, dim)?)?)
}

/// A size-1 dimension inserted at `dim` (-1 appends).
pub fn unsqueeze(x: &Tensor, dim: i64) -> Result<Tensor> {
    let n = x.dim() as i64 + 1;
    if dim < -n || dim >= n {
        return Err(Error::new(
            ErrorCode::OutOfRange,
            format!("unsqueeze: dimension {dim} out of range for shape {:?}", x.size()),
        ));
    }
    Ok(x.f_unsqueeze(if dim < 0 { dim + n } else { dim })?)
}

/// The slice `start..start+length` of dimension `dim` (a view).
pub fn narrow(x: &Tensor, dim: i64, start: i64, length: i64) -> Result<Tensor> {
    if x.dim() == 0 {
        return Err(Error::shape("narrow needs a tensor with at least one dimension, got a scalar"));
    }
    let d = check_dim(x, dim)?;
    let size = size_at(x, d);
    if start < 0 || length < 0 || start.checked_add(length).is_none_or(|end| end > size) {
        return Err(Error::new(
            ErrorCode::OutOfRange,
            format!("narrow({dim}, {start}, {length}) on shape {:?}", x.size()),
        ));
    }
    Ok(x.f_narrow(d, start, length)?)
}

/// `tensors` concatenated along the existing dimension `dim`; the other
/// dimensions must match.
pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
    let first = joined_first(tensors, dim, false)?;
    Ok(Tensor::f_cat(tensors, check_dim(first, dim)?)?)
}

/// `tensors`, all of one shape, stacked along a new dimension `dim`.
pub fn stack(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
    let first = joined_first(tensors, dim, true)?;
    let n = first.dim() as i64 + 1;
    if dim < -n || dim >= n {
        return Err(Error::new(ErrorCode::OutOfRange, format!("stack: dimension {dim} out of range")));
    }
    Ok(Tensor::f_stack(tensors, dim)?)
}

/// The first of `tensors` after checking there is one and that the others
/// fit it: the same shape for a stack, the same outside `dim` for a cat.
fn joined_first<'a>(tensors: &[&'a Tensor], dim: i64, stack: bool) -> Result<&'a Tensor> {
    let first = *tensors.first().ok_or_else(|| Error::invalid("needs at least one tensor"))?;
    let s0 = first.size();
    for (i, t) in tensors.iter().enumerate() {
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
    Ok(first)
}

/// `x` broadcast to `size` without copying; -1 keeps a dimension.
pub fn expand(x: &Tensor, size: &[i64]) -> Result<Tensor> {
    if size.len() < x.dim() {
        return Err(Error::shape(format!("expand: {size:?} has fewer dimensions than the input {:?}", x.size())));
    }
    let lead = size.len() - x.dim();
    let mut target = size.to_vec();
    for (i, s) in x.size().iter().enumerate() {
        let want = size[lead + i];
        if want == -1 {
            target[lead + i] = *s;
        } else if *s != 1 && *s != want {
            return Err(Error::shape(format!(
                "expand: cannot expand {:?} to {size:?} (dimension {})",
                x.size(),
                lead + i
            )));
        }
    }
    checked_numel(&target, "expand")?;
    Ok(x.f_expand(size, false)?)
}

/// `x` tiled `repeats[i]` times along each dimension (`Tensor.repeat`).
pub fn repeat(x: &Tensor, repeats: &[i64]) -> Result<Tensor> {
    if repeats.len() < x.dim() {
        return Err(Error::shape(format!(
            "repeat: {repeats:?} has fewer entries than the input has dimensions ({:?})",
            x.size()
        )));
    }
    let lead = repeats.len() - x.dim();
    let shape: Vec<i64> = repeats
        .iter()
        .enumerate()
        .map(|(i, r)| if i < lead { *r } else { r.saturating_mul(x.size()[i - lead]) })
        .collect();
    if repeats.iter().any(|r| *r < 0) {
        return Err(Error::invalid(format!("repeat: negative count in {repeats:?}")));
    }
    checked_numel(&shape, "repeat")?;
    Ok(x.f_repeat(repeats)?)
}

/// `x` reversed along each dimension in `dims`.
pub fn flip(x: &Tensor, dims: &[i64]) -> Result<Tensor> {
    let d = check_dims(x, dims)?;
    Ok(x.f_flip(d)?)
}

/// `x` shifted cyclically by `shifts[i]` along `dims[i]`; with no dims, the
/// flattened tensor is shifted by the one shift and reshaped back.
pub fn roll(x: &Tensor, shifts: &[i64], dims: &[i64]) -> Result<Tensor> {
    if dims.is_empty() {
        if shifts.len() != 1 {
            return Err(Error::invalid(format!("roll: without dims, needs exactly one shift, got {shifts:?}")));
        }
    } else if shifts.len() != dims.len() {
        return Err(Error::invalid(format!("roll: {} shifts for {} dims", shifts.len(), dims.len())));
    }
    let d: Vec<i64> = dims.iter().map(|d| check_dim(x, *d)).collect::<Result<_>>()?;
    Ok(x.f_roll(shifts, d)?)
}

/// Dimension `dim` of `x` split into `sizes` (one -1 infers a size).
pub fn unflatten(x: &Tensor, dim: i64, sizes: &[i64]) -> Result<Tensor> {
    if x.dim() == 0 {
        return Err(Error::shape("unflatten: a 0-dimensional tensor has no dimension to split"));
    }
    let d = check_dim(x, dim)?;
    let n = size_at(x, d);
    check_unflatten_sizes(sizes)?;
    let inferred = sizes.iter().filter(|s| **s == -1).count();
    let known = checked_numel(&sizes.iter().map(|s| if *s == -1 { 1 } else { *s }).collect::<Vec<_>>(), "unflatten")?;
    let fits = if inferred == 1 { known != 0 && n % known == 0 } else { known == n };
    if !fits {
        return Err(Error::shape(format!("unflatten: dimension {dim} of size {n} cannot be split into {sizes:?}")));
    }
    let mut shape = x.size();
    shape.splice(d as usize..d as usize + 1, sizes.iter().map(|s| if *s == -1 { n / known } else { *s }));
    Ok(x.f_reshape(shape)?)
}

/// `ceil(n / d)` for `n >= 0`, `d > 0`, without overflow.
fn ceil_div(n: i64, d: i64) -> i64 {
    n / d + i64::from(n % d != 0)
}

/// Number of pieces [`chunk`] makes.
pub fn chunk_count(x: &Tensor, chunks: i64, dim: i64) -> Result<usize> {
    let d = check_dim(x, dim)?;
    if chunks <= 0 {
        return Err(Error::invalid(format!("chunk: chunks = {chunks}, must be positive")));
    }
    let n = size_at(x, d);
    let step = ceil_div(n, chunks);
    Ok(if step == 0 { chunks as usize } else { ceil_div(n, step) as usize })
}

/// `x` cut into at most `chunks` pieces of equal size along `dim` (the
/// last may be smaller), as `torch.chunk`.
pub fn chunk(x: &Tensor, chunks: i64, dim: i64) -> Result<Vec<Tensor>> {
    chunk_count(x, chunks, dim)?;
    Ok(x.f_chunk(chunks, check_dim(x, dim)?)?)
}

/// Number of pieces [`split`] makes.
pub fn split_count(x: &Tensor, split_size: i64, dim: i64) -> Result<usize> {
    let d = check_dim(x, dim)?;
    if split_size <= 0 {
        return Err(Error::invalid(format!("split: split_size = {split_size}, must be positive")));
    }
    let n = size_at(x, d);
    Ok(if n == 0 { 1 } else { ceil_div(n, split_size) as usize })
}

/// `x` cut into pieces of `split_size` along `dim` (the last may be
/// smaller), as `torch.split`.
pub fn split(x: &Tensor, split_size: i64, dim: i64) -> Result<Vec<Tensor>> {
    split_count(x, split_size, dim)?;
    Ok(x.f_split(split_size, check_dim(x, dim)?)?)
}

/// Number of pieces [`split_sizes`] makes.
pub fn split_sizes_count(x: &Tensor, sizes: &[i64], dim: i64) -> Result<usize> {
    let d = check_dim(x, dim)?;
    let n = size_at(x, d);
    if sizes.iter().any(|s| *s < 0) || sizes.iter().try_fold(0i64, |a, s| a.checked_add(*s)) != Some(n) {
        return Err(Error::shape(format!("split_sizes: {sizes:?} must be non-negative and sum to {n}")));
    }
    Ok(sizes.len())
}

/// `x` cut into pieces of the given sizes along `dim` (they sum to its size).
pub fn split_sizes(x: &Tensor, sizes: &[i64], dim: i64) -> Result<Vec<Tensor>> {
    split_sizes_count(x, sizes, dim)?;
    Ok(x.f_split_with_sizes(sizes, check_dim(x, dim)?)?)
}

/// Number of pieces [`unbind`] makes.
pub fn unbind_count(x: &Tensor, dim: i64) -> Result<usize> {
    if x.dim() == 0 {
        return Err(Error::shape("unbind: a 0-dimensional tensor has no dimension to remove"));
    }
    Ok(size_at(x, check_dim(x, dim)?) as usize)
}

/// The slices of `x` along `dim`, that dimension removed.
pub fn unbind(x: &Tensor, dim: i64) -> Result<Vec<Tensor>> {
    unbind_count(x, dim)?;
    Ok(x.f_unbind(check_dim(x, dim)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// The counts said before splitting are the counts libtorch makes.
    #[test]
    fn counts_match_what_libtorch_makes() {
        for n in 0..13i64 {
            let x = Tensor::zeros([n, 2], (Kind::Float, Device::Cpu));
            for k in 1..8i64 {
                assert_eq!(chunk_count(&x, k, 0).unwrap(), x.chunk(k, 0).len(), "chunk n={n} k={k}");
                assert_eq!(split_count(&x, k, 0).unwrap(), x.split(k, 0).len(), "split n={n} k={k}");
            }
            assert_eq!(unbind_count(&x, 0).unwrap(), x.unbind(0).len());
        }
    }

    #[test]
    fn huge_sizes_do_not_overflow_the_counts() {
        let x = Tensor::zeros([5], (Kind::Float, Device::Cpu));
        assert_eq!(split_count(&x, i64::MAX, 0).unwrap(), x.split(i64::MAX, 0).len());
        assert_eq!(chunk_count(&x, i64::MAX, 0).unwrap(), 5);
        assert!(unflatten(&Tensor::from(1.0f32), 0, &[1]).is_err());
    }

    #[test]
    fn unflatten_infers_one_size() {
        let x = Tensor::zeros([2, 12], (Kind::Float, Device::Cpu));
        assert_eq!(unflatten(&x, -1, &[3, -1]).unwrap().size(), vec![2, 3, 4]);
        assert!(unflatten(&x, 1, &[5, -1]).is_err());
        assert!(unflatten(&x, 1, &[-1, -1]).is_err());
    }
}
