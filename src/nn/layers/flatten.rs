//! `Flatten`: merges dimensions `start_dim..=end_dim`.
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use tch::Tensor;

/// Flattens a range of dimensions (negative indices count from the end).
#[derive(Debug)]
pub(crate) struct Flatten {
    pub(crate) start_dim: i64,
    pub(crate) end_dim: i64,
}

impl Layer for Flatten {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Flatten { start_dim: self.start_dim, end_dim: self.end_dim }))
    }

    fn type_name(&self) -> &'static str {
        "Flatten"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        x.f_flatten(self.start_dim, self.end_dim).map_err(|e| {
            Error::shape(format!(
                "flatten({}, {}): input of shape {}: {}",
                self.start_dim,
                self.end_dim,
                shape_of(x),
                crate::error::Error::from(e).message
            ))
        })
    }
}

/// Splits dimension `dim` into `sizes` (one may be -1), PyTorch's
/// `Unflatten(dim, unflattened_size)`.
#[derive(Debug)]
pub(crate) struct Unflatten {
    pub(crate) dim: i64,
    pub(crate) sizes: Vec<i64>,
}

impl Layer for Unflatten {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Unflatten { dim: self.dim, sizes: self.sizes.clone() }))
    }

    fn type_name(&self) -> &'static str {
        "Unflatten"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        crate::tensor::ops::unflatten(x, self.dim, &self.sizes)
    }
}
