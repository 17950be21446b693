//! `PReLU`: a learnable negative slope, one or one per channel.
use super::Layer;
use crate::error::{Error, Result};
use crate::tensor::ops;
use tch::Tensor;

/// PyTorch's `PReLU(num_parameters, init)`: parameter `weight` of
/// `num_parameters` entries, all `init`.
#[derive(Debug)]
pub(crate) struct PRelu {
    weight: Tensor,
}

impl PRelu {
    /// `num_parameters` is 1 or the channel count (dimension 1 of the input).
    pub(crate) fn new(num_parameters: i64, init: f64) -> Result<PRelu> {
        if num_parameters <= 0 || !init.is_finite() {
            return Err(Error::invalid(format!(
                "prelu: num_parameters ({num_parameters}) must be positive and init ({init}) finite"
            )));
        }
        Ok(PRelu { weight: crate::nn::init::full(&[num_parameters], init)? })
    }
}

impl Layer for PRelu {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(PRelu { weight: map(&self.weight)? }))
    }

    fn type_name(&self) -> &'static str {
        "PReLU"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        ops::prelu(x, &self.weight)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        vec![("weight", &self.weight)]
    }
}
