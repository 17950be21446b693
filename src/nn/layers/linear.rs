//! `Linear`: `y = x W^T + b`.
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use crate::nn::init;
use tch::Tensor;

/// A fully connected layer, PyTorch's `nn.Linear`.
#[derive(Debug)]
pub(crate) struct Linear {
    in_features: i64,
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// Weight `[out, in]` and bias `[out]` drawn from `U(-1/sqrt(in), 1/sqrt(in))`.
    pub(crate) fn new(in_features: i64, out_features: i64, bias: bool) -> Result<Linear> {
        if in_features <= 0 || out_features <= 0 {
            return Err(Error::invalid(format!(
                "linear: in_features ({in_features}) and out_features ({out_features}) must be positive"
            )));
        }
        let bound = init::default_uniform_bound(in_features);
        let weight = init::uniform(&[out_features, in_features], bound)?;
        let bias = if bias { Some(init::uniform(&[out_features], bound)?) } else { None };
        Ok(Linear { in_features, weight, bias })
    }

    /// A copy whose tensors are `map(tensor)` (see [`Layer::replicate`]).
    pub(crate) fn mapped(&self, map: &mut super::TensorMap<'_>) -> Result<Linear> {
        let (weight, bias) = (map(&self.weight)?, super::map_opt(map, &self.bias)?);
        Ok(Linear { in_features: self.in_features, weight, bias })
    }

    /// The same layer with its bias set to zeros (after it was drawn, so
    /// the generator advances as PyTorch's does before it zeroes a bias).
    pub(crate) fn with_zero_bias(self) -> Result<Linear> {
        let bias = match &self.bias {
            Some(b) => Some(init::zeros(&b.size())?),
            None => None,
        };
        Ok(Linear { bias, ..self })
    }
}

impl Layer for Linear {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(self.mapped(map)?))
    }

    fn type_name(&self) -> &'static str {
        "Linear"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        if x.dim() == 0 || x.size().last() != Some(&self.in_features) {
            return Err(Error::shape(format!(
                "linear: input of shape {} must end in in_features = {}",
                shape_of(x),
                self.in_features
            )));
        }
        Ok(x.f_linear(&self.weight, self.bias.as_ref())?)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        let mut v = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            v.push(("bias", b));
        }
        v
    }
}
