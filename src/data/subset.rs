//! A view of a dataset through a list of indices, and the every-k-th split.
use std::sync::Arc;

use tch::Tensor;

use super::dataset::Dataset;
use super::tensor_dataset::check_indices;
use crate::error::Result;

/// The samples of `dataset` at `indices`, in that order: sample `i` of the
/// subset is sample `indices[i]` of the dataset.
#[derive(Clone)]
pub struct Subset {
    dataset: Arc<dyn Dataset>,
    indices: Vec<i64>,
}

impl std::fmt::Debug for Subset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subset").field("dataset_len", &self.dataset.len()).field("len", &self.indices.len()).finish()
    }
}

impl Subset {
    /// Builds the subset; every index must lie in `0..dataset.len()`
    /// (else `ErrorCode::OutOfRange`). Repeats are allowed.
    pub fn new(dataset: Arc<dyn Dataset>, indices: Vec<i64>) -> Result<Self> {
        check_indices(&indices, dataset.len(), "Subset::new")?;
        Ok(Subset { dataset, indices })
    }

    /// The indices into the underlying dataset.
    pub fn indices(&self) -> &[i64] {
        &self.indices
    }

    /// The underlying dataset.
    pub fn dataset(&self) -> &Arc<dyn Dataset> {
        &self.dataset
    }
}

impl Dataset for Subset {
    fn len(&self) -> usize {
        self.indices.len()
    }

    fn get_batch(&self, indices: &[i64]) -> Result<Vec<Tensor>> {
        check_indices(indices, self.indices.len(), "Subset::get_batch")?;
        let mapped: Vec<i64> = indices.iter().map(|&i| self.indices[i as usize]).collect();
        self.dataset.get_batch(&mapped)
    }
    fn reads_on_any_thread(&self) -> bool {
        self.dataset.reads_on_any_thread()
    }
}

/// Splits `0..n` into (every `k`-th row starting at `offset`, the rest), both
/// ascending — the MNIST-5k holdout ("every fifth row for validation") is
/// `split_every(5000, 5, 0)`. `k == 0` or `offset >= n` selects no row.
pub fn split_every(n: usize, k: usize, offset: usize) -> (Vec<i64>, Vec<i64>) {
    let mut picked = Vec::with_capacity(n.checked_div(k).map_or(0, |q| q + 1));
    let mut rest = Vec::with_capacity(n);
    for i in 0..n {
        if k != 0 && i >= offset && (i - offset) % k == 0 {
            picked.push(i as i64);
        } else {
            rest.push(i as i64);
        }
    }
    (picked, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::TensorDataset;
    use crate::error::ErrorCode;
    use tch::{Device, Kind};

    fn base() -> Arc<dyn Dataset> {
        let y = Tensor::arange(10, (Kind::Int64, Device::Cpu));
        Arc::new(TensorDataset::new(vec![y * 10]).unwrap())
    }

    #[test]
    fn subset_maps_indices() {
        let s = Subset::new(base(), vec![9, 2, 5]).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.indices(), &[9, 2, 5]);
        assert_eq!(s.dataset().len(), 10);
        let b = s.get_batch(&[2, 0]).unwrap();
        assert_eq!(Vec::<i64>::try_from(&b[0]).unwrap(), vec![50, 90]);
        assert_eq!(s.get_batch(&[3]).unwrap_err().code, ErrorCode::OutOfRange);
        let nested = Subset::new(Arc::new(s), vec![1]).unwrap();
        assert_eq!(Vec::<i64>::try_from(&nested.get_batch(&[0]).unwrap()[0]).unwrap(), vec![20]);
    }

    #[test]
    fn subset_checks_indices() {
        assert_eq!(Subset::new(base(), vec![0, 10]).unwrap_err().code, ErrorCode::OutOfRange);
        assert_eq!(Subset::new(base(), vec![-1]).unwrap_err().code, ErrorCode::OutOfRange);
        assert!(Subset::new(base(), vec![]).unwrap().is_empty());
    }

    #[test]
    fn split_every_mnist_holdout() {
        let (val, train) = split_every(5000, 5, 0);
        assert_eq!(val.len(), 1000);
        assert_eq!(train.len(), 4000);
        assert!(val.iter().all(|i| i % 5 == 0));
        let mut all: Vec<i64> = val.iter().chain(&train).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..5000).collect::<Vec<i64>>());
        let (v2, t2) = split_every(10, 3, 1);
        assert_eq!(v2, vec![1, 4, 7]);
        assert_eq!(t2, vec![0, 2, 3, 5, 6, 8, 9]);
        assert_eq!(split_every(4, 0, 0), (vec![], vec![0, 1, 2, 3]));
    }
}
