//! `GroupNorm` and `RMSNorm`, with PyTorch's parameter names and init.
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use crate::nn::init;
use tch::Tensor;

/// Normalisation over groups of channels (dimension 1) of `(N, C, ...)`
/// input, PyTorch's `GroupNorm`.
#[derive(Debug)]
pub(crate) struct GroupNorm {
    num_groups: i64,
    num_channels: i64,
    eps: f64,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
}

impl GroupNorm {
    /// `affine`: weight (ones) and bias (zeros) of `num_channels`.
    pub(crate) fn new(num_groups: i64, num_channels: i64, eps: f64, affine: bool) -> Result<GroupNorm> {
        if num_groups <= 0 || num_channels <= 0 || num_channels % num_groups != 0 || eps.is_nan() || eps < 0.0 {
            return Err(Error::invalid(format!(
                "group_norm: num_channels ({num_channels}) must be a positive multiple of num_groups \
                 ({num_groups}), eps ({eps}) non-negative"
            )));
        }
        let (weight, bias) = if affine {
            (Some(init::ones(&[num_channels])?), Some(init::zeros(&[num_channels])?))
        } else {
            (None, None)
        };
        Ok(GroupNorm { num_groups, num_channels, eps, weight, bias })
    }
}

impl Layer for GroupNorm {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(GroupNorm {
            weight: super::map_opt(map, &self.weight)?,
            bias: super::map_opt(map, &self.bias)?,
            ..*self
        }))
    }

    fn type_name(&self) -> &'static str {
        "GroupNorm"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        if x.dim() < 2 || x.size()[1] != self.num_channels {
            return Err(Error::shape(format!(
                "group_norm: input of shape {} must be (N, {}, ...)",
                shape_of(x),
                self.num_channels
            )));
        }
        Ok(x.f_group_norm(self.num_groups, self.weight.as_ref(), self.bias.as_ref(), self.eps, true)?)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        match (&self.weight, &self.bias) {
            (Some(w), Some(b)) => vec![("weight", w), ("bias", b)],
            _ => Vec::new(),
        }
    }
}

/// Root-mean-square normalisation over the trailing `normalized_shape`
/// dimensions, PyTorch's `RMSNorm`.
#[derive(Debug)]
pub(crate) struct RmsNorm {
    shape: Vec<i64>,
    eps: Option<f64>,
    weight: Option<Tensor>,
}

impl RmsNorm {
    /// `eps` None uses the input dtype's machine epsilon (PyTorch's
    /// default); `elementwise_affine`: weight (ones) of `normalized_shape`.
    pub(crate) fn new(normalized_shape: &[i64], eps: Option<f64>, elementwise_affine: bool) -> Result<RmsNorm> {
        if normalized_shape.is_empty()
            || normalized_shape.iter().any(|&d| d <= 0)
            || eps.is_some_and(|e| e.is_nan() || e < 0.0)
        {
            return Err(Error::invalid(format!(
                "rms_norm: normalized_shape {normalized_shape:?} must be non-empty and positive, eps ({eps:?}) \
                 non-negative"
            )));
        }
        let weight = if elementwise_affine { Some(init::ones(normalized_shape)?) } else { None };
        Ok(RmsNorm { shape: normalized_shape.to_vec(), eps, weight })
    }
}

impl Layer for RmsNorm {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(RmsNorm { shape: self.shape.clone(), eps: self.eps, weight: super::map_opt(map, &self.weight)? }))
    }

    fn type_name(&self) -> &'static str {
        "RMSNorm"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let size = x.size();
        let n = self.shape.len();
        if size.len() < n || size[size.len() - n..] != self.shape[..] {
            return Err(Error::shape(format!("rms_norm: input of shape {} must end in {:?}", shape_of(x), self.shape)));
        }
        Ok(x.f_rms_norm(self.shape.as_slice(), self.weight.as_ref(), self.eps)?)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        self.weight.as_ref().map(|w| vec![("weight", w)]).unwrap_or_default()
    }
}
