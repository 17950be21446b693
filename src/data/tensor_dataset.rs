//! A dataset over in-memory tensors that share their first dimension.
use std::sync::{Mutex, PoisonError};

use tch::{Device, Tensor};

use super::dataset::Dataset;
use crate::error::{Error, ErrorCode, Result};

/// A dataset of tensors that share their first dimension (e.g. features
/// `[N, F]` and labels `[N]`); a batch is `index_select` on dim 0 of each.
///
/// `tch::Tensor` is `Send` but not `Sync`, so the tensors sit behind a
/// mutex; a batch takes shallow clones under the lock and indexes them
/// outside it, so concurrent readers do not serialize on the copy.
#[derive(Debug)]
pub struct TensorDataset {
    tensors: Mutex<Vec<Tensor>>,
    len: usize,
}

/// Checks that every index lies in `0..len`, naming the first one that does
/// not (`ErrorCode::OutOfRange`).
pub(crate) fn check_indices(indices: &[i64], len: usize, what: &str) -> Result<()> {
    match indices.iter().find(|&&i| i < 0 || i as u64 >= len as u64) {
        Some(bad) => {
            Err(Error::new(ErrorCode::OutOfRange, format!("{what}: index {bad} out of range for {len} samples")))
        }
        None => Ok(()),
    }
}

impl TensorDataset {
    /// Builds the dataset; needs at least one tensor, every tensor defined,
    /// at least 1-D and all with the same `size(0)` (else a shape error that
    /// names the sizes).
    pub fn new(tensors: Vec<Tensor>) -> Result<Self> {
        if tensors.is_empty() {
            return Err(Error::invalid("TensorDataset::new: needs at least one tensor"));
        }
        let mut firsts = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if !t.defined() {
                return Err(Error::invalid(format!("TensorDataset::new: tensor {i} is undefined")));
            }
            match t.size().first() {
                Some(&n) => firsts.push(n),
                None => {
                    return Err(Error::shape(format!(
                        "TensorDataset::new: tensor {i} is 0-dim; every tensor needs a first dimension"
                    )))
                }
            }
        }
        if firsts.iter().any(|&n| n != firsts[0]) {
            let sizes: Vec<Vec<i64>> = tensors.iter().map(Tensor::size).collect();
            return Err(Error::shape(format!(
                "TensorDataset::new: tensors differ in size(0): first dims {firsts:?} (sizes {sizes:?})"
            )));
        }
        Ok(TensorDataset { len: firsts[0] as usize, tensors: Mutex::new(tensors) })
    }

    /// Shallow clones (shared storage, no copy) of the tensors.
    pub fn tensors(&self) -> Vec<Tensor> {
        self.lock().iter().map(Tensor::shallow_clone).collect()
    }

    /// The tensors, giving up the dataset.
    pub fn into_tensors(self) -> Vec<Tensor> {
        self.tensors.into_inner().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Tensor>> {
        self.tensors.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Dataset for TensorDataset {
    fn len(&self) -> usize {
        self.len
    }

    fn get_batch(&self, indices: &[i64]) -> Result<Vec<Tensor>> {
        check_indices(indices, self.len, "TensorDataset::get_batch")?;
        let tensors = self.tensors();
        let cpu_index = Tensor::f_from_slice(indices)?;
        let mut out = Vec::with_capacity(tensors.len());
        for t in &tensors {
            let batch = if t.device() == Device::Cpu {
                t.f_index_select(0, &cpu_index)?
            } else {
                t.f_index_select(0, &crate::tensor::device::to_device_of(&cpu_index, t)?)?
            };
            out.push(batch);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    fn ds() -> TensorDataset {
        let x = Tensor::arange(12, (Kind::Float, Device::Cpu)).view([6, 2]);
        let y = Tensor::arange(6, (Kind::Int64, Device::Cpu));
        TensorDataset::new(vec![x, y]).unwrap()
    }

    #[test]
    fn batches_select_rows() {
        let d = ds();
        assert_eq!(d.len(), 6);
        assert!(!d.is_empty());
        let b = d.get_batch(&[4, 0, 4]).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].size(), vec![3, 2]);
        assert_eq!(Vec::<f32>::try_from(b[0].view([-1])).unwrap(), vec![8., 9., 0., 1., 8., 9.]);
        assert_eq!(Vec::<i64>::try_from(&b[1]).unwrap(), vec![4, 0, 4]);
        let empty = d.get_batch(&[]).unwrap();
        assert_eq!(empty[0].size(), vec![0, 2]);
        assert_eq!(d.tensors().len(), 2);
        assert_eq!(d.into_tensors()[1].size(), vec![6]);
    }

    #[test]
    fn out_of_range_index() {
        let d = ds();
        let e = d.get_batch(&[0, 6]).unwrap_err();
        assert_eq!(e.code, ErrorCode::OutOfRange);
        assert!(e.message.contains('6'), "{}", e.message);
        assert_eq!(d.get_batch(&[-1]).unwrap_err().code, ErrorCode::OutOfRange);
    }

    #[test]
    fn construction_errors() {
        assert_eq!(TensorDataset::new(vec![]).unwrap_err().code, ErrorCode::InvalidArgument);
        let x = Tensor::zeros([5, 3], (Kind::Float, Device::Cpu));
        let y = Tensor::zeros([4], (Kind::Int64, Device::Cpu));
        let e = TensorDataset::new(vec![x, y]).unwrap_err();
        assert_eq!(e.code, ErrorCode::ShapeMismatch);
        assert!(e.message.contains("[5, 4]"), "{}", e.message);
        let s = Tensor::from(1.0f32);
        assert_eq!(TensorDataset::new(vec![s]).unwrap_err().code, ErrorCode::ShapeMismatch);
    }
}
