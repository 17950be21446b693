//! Views and copies that change a shape: expand, repeat, flip, roll,
//! unflatten, and the splits that return several tensors (chunk, split,
//! split_sizes, unbind), each with a `*_count` that says how many pieces it
//! makes before making them.
use super::checks::{check_dim, check_dims, check_unflatten_sizes, checked_numel, size_at};
use crate::error::{Error, Result};
use tch::Tensor;

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
