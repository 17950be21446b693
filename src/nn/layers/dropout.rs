//! `Dropout`: zeroes elements with probability `p` in training mode only.
use super::Layer;
use crate::error::{Error, Result};
use tch::Tensor;

/// Dropout with probability `p`; the identity in evaluation mode.
#[derive(Debug)]
pub(crate) struct Dropout {
    p: f64,
}

impl Dropout {
    /// `p` must lie in `[0, 1]`.
    pub(crate) fn new(p: f64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(format!("dropout: p ({p}) must be in [0, 1]")));
        }
        Ok(Dropout { p })
    }
}

impl Layer for Dropout {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Dropout { p: self.p }))
    }

    fn type_name(&self) -> &'static str {
        "Dropout"
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        if !training || self.p == 0.0 {
            return Ok(x.shallow_clone());
        }
        Ok(x.f_dropout(self.p, true)?)
    }
}
