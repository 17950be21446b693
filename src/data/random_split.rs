//! `torch.utils.data.random_split` with a seeded generator: the same
//! permutation torch draws for the seed, cut into consecutive parts of the
//! given lengths (counts, or fractions that sum to 1).
use std::sync::Arc;

use super::dataset::Dataset;
use super::subset::Subset;
use crate::error::{Error, Result};

/// The largest dataset a random split takes: its permutation is held in
/// memory (2^31 indices are 16 GiB).
pub const MAX_RANDOM_SPLIT: usize = 1 << 31;

/// The most parts a split makes.
pub const MAX_SPLIT_PARTS: usize = 1 << 16;

/// torch's part sizes for `lengths` over `n` samples: fractions summing to
/// 1 take `floor(n * f)` each and the remainder one by one from the first
/// part; otherwise the lengths are counts that must sum to `n`.
pub fn split_lengths(n: usize, lengths: &[f64]) -> Result<Vec<usize>> {
    if lengths.is_empty() || lengths.len() > MAX_SPLIT_PARTS {
        return Err(Error::invalid(format!(
            "random_split needs 1 to {MAX_SPLIT_PARTS} lengths, got {}",
            lengths.len()
        )));
    }
    if let Some(bad) = lengths.iter().find(|l| !l.is_finite() || **l < 0.0) {
        return Err(Error::invalid(format!("random_split: length {bad} is not a non-negative number")));
    }
    let sum: f64 = lengths.iter().sum();
    // math.isclose(sum, 1) and sum <= 1, as torch decides.
    if (sum - 1.0).abs() <= 1e-9 * sum.abs().max(1.0) && sum <= 1.0 {
        let mut counts: Vec<usize> = lengths.iter().map(|f| (n as f64 * f).floor() as usize).collect();
        let rest = n - counts.iter().sum::<usize>().min(n);
        for i in 0..rest {
            let k = counts.len();
            counts[i % k] += 1;
        }
        return Ok(counts);
    }
    if let Some(bad) = lengths.iter().find(|l| l.fract() != 0.0) {
        return Err(Error::invalid(format!(
            "random_split: length {bad} is neither a whole count nor part of fractions that sum to 1"
        )));
    }
    let counts: Vec<usize> = lengths.iter().map(|l| *l as usize).collect();
    if counts.iter().try_fold(0usize, |a, c| a.checked_add(*c)) != Some(n) {
        return Err(Error::invalid(format!("random_split: the lengths sum to {sum}, the dataset has {n} samples")));
    }
    Ok(counts)
}

/// Splits `dataset` at random into parts of `lengths` (counts, or fractions
/// that sum to 1), with torch's permutation for `seed`: the same parts as
/// `random_split(dataset, lengths, torch.Generator().manual_seed(seed))`.
pub fn random_split(dataset: Arc<dyn Dataset>, lengths: &[f64], seed: u64) -> Result<Vec<Subset>> {
    let n = dataset.len();
    if n > MAX_RANDOM_SPLIT {
        return Err(Error::invalid(format!(
            "random_split: {n} samples are more than the {MAX_RANDOM_SPLIT} it holds a permutation of"
        )));
    }
    let counts = split_lengths(n, lengths)?;
    let order = Vec::<i64>::try_from(crate::tensor::scaled::randperm(n as i64, seed)?)?;
    let mut start = 0;
    let mut parts = Vec::with_capacity(counts.len());
    for c in counts {
        parts.push(Subset::new(Arc::clone(&dataset), order[start..start + c].to_vec())?);
        start += c;
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::TensorDataset;
    use tch::Tensor;

    fn range(n: i64) -> Arc<dyn Dataset> {
        Arc::new(TensorDataset::new(vec![Tensor::arange(n, (tch::Kind::Int64, tch::Device::Cpu))]).unwrap())
    }

    #[test]
    fn parts_equal_torchs_random_split() {
        // torch.randperm(10, generator=torch.Generator().manual_seed(42))
        assert_eq!(
            Vec::<i64>::try_from(crate::tensor::scaled::randperm(10, 42).unwrap()).unwrap(),
            [2, 6, 1, 8, 4, 5, 0, 9, 3, 7]
        );
        // random_split(range(10), [0.5, 0.3, 0.2], manual_seed(7))
        let parts = random_split(range(10), &[0.5, 0.3, 0.2], 7).unwrap();
        let got: Vec<&[i64]> = parts.iter().map(|p| p.indices()).collect();
        assert_eq!(got, [&[5, 0, 3, 4, 1][..], &[7, 9, 6], &[8, 2]]);
        // random_split(range(11), [0.34, 0.33, 0.33], manual_seed(7)): the
        // remainder goes one by one from the first part.
        let parts = random_split(range(11), &[0.34, 0.33, 0.33], 7).unwrap();
        let got: Vec<&[i64]> = parts.iter().map(|p| p.indices()).collect();
        assert_eq!(got, [&[3, 0, 9, 2][..], &[5, 8, 4, 10], &[1, 7, 6]]);
        // counts
        let parts = random_split(range(10), &[6.0, 4.0], 42).unwrap();
        assert_eq!(parts[0].indices(), [2, 6, 1, 8, 4, 5]);
        assert!(random_split(range(10), &[6.0, 5.0], 42).unwrap_err().message.contains("sum to 11"));
        assert!(random_split(range(10), &[0.5, 2.5], 42).is_err());
        assert!(random_split(range(10), &[f64::NAN], 42).is_err());
        assert!(random_split(range(10), &[], 42).is_err());
    }
}
