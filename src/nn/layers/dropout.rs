//! `Dropout` and `Dropout2d`: zero elements (or whole channels) with
//! probability `p` in training mode only.
use super::Layer;
use crate::error::{Error, Result};
use tch::Tensor;

/// Dropout with probability `p`; the identity in evaluation mode. With
/// `channels`, whole channels of `(N, C, H, W)` input are zeroed
/// (PyTorch's `Dropout2d`; a 3-D input is read as `(N, C, L)`, as PyTorch
/// 2.13 reads it).
#[derive(Debug)]
pub(crate) struct Dropout {
    p: f64,
    channels: bool,
}

impl Dropout {
    /// `p` must lie in `[0, 1]`.
    pub(crate) fn new(p: f64, channels: bool) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(format!("dropout: p ({p}) must be in [0, 1]")));
        }
        Ok(Dropout { p, channels })
    }
}

impl Layer for Dropout {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Dropout { p: self.p, channels: self.channels }))
    }

    fn type_name(&self) -> &'static str {
        if self.channels {
            "Dropout2d"
        } else {
            "Dropout"
        }
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        if self.channels && x.dim() != 3 && x.dim() != 4 {
            return Err(Error::shape(format!(
                "dropout2d: input of shape {} must be (N, C, H, W) or (N, C, L)",
                super::shape_of(x)
            )));
        }
        if !training || self.p == 0.0 {
            return Ok(x.shallow_clone());
        }
        if !self.channels {
            return Ok(x.f_dropout(self.p, true)?);
        }
        // A 3-D input is (N, C, L), as PyTorch 2.13's F.dropout2d reads it.
        Ok(x.f_feature_dropout(self.p, true)?)
    }
}
