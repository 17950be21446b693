//! `Linear`: `y = x W^T + b`.
use super::tensor_parallel::{sized, ParallelStyle, SplitDims, TpSlot};
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
    /// Its place in a tensor-parallel model (`tensor_parallel.rs`).
    tp: Option<TpSlot>,
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
        Ok(Linear { in_features, weight, bias, tp: None })
    }

    /// A copy whose tensors are `map(tensor)` (see [`Layer::replicate`]).
    pub(crate) fn mapped(&self, map: &mut super::TensorMap<'_>) -> Result<Linear> {
        let (weight, bias) = (map(&self.weight)?, super::map_opt(map, &self.bias)?);
        Ok(Linear { in_features: self.in_features, weight, bias, tp: None })
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

impl Linear {
    /// Refuses an input whose last dimension is not `features`.
    fn check_input(&self, x: &Tensor, features: i64) -> Result<()> {
        if x.dim() == 0 || x.size().last() != Some(&features) {
            return Err(Error::shape(format!(
                "linear: input of shape {} must end in {features} features{}",
                shape_of(x),
                if features == self.in_features { " (in_features)" } else { " (this rank's part of in_features)" }
            )));
        }
        Ok(())
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
        let split = match &self.tp {
            Some(tp) if tp.split("Linear")? => Some(tp),
            _ => None,
        };
        let Some(tp) = split else {
            self.check_input(x, self.in_features)?;
            return Ok(x.f_linear(&self.weight, self.bias.as_ref())?);
        };
        match tp.style {
            ParallelStyle::Colwise | ParallelStyle::ColwiseReplicatedOutput => {
                self.check_input(x, self.in_features)?;
                let y = tp.copy_in(x)?.f_linear(&self.weight, self.bias.as_ref())?;
                tp.colwise_output(y)
            }
            ParallelStyle::Rowwise | ParallelStyle::RowwiseReplicatedInput => {
                let part = if tp.style == ParallelStyle::Rowwise {
                    self.check_input(x, tp.span().1)?;
                    x.shallow_clone()
                } else {
                    self.check_input(x, self.in_features)?;
                    tp.split_last(x)?
                };
                // Each rank adds its share of the bias before the sum, as
                // DTensor's addmm with a Partial output does: the same terms
                // on the wire as torch's RowwiseParallel.
                let mut partial = part.f_linear::<Tensor>(&self.weight, None)?;
                if let Some(b) = &self.bias {
                    // In the matmul's dtype (autocast's, as its addmm casts
                    // the bias), so the sum goes over the wire in it.
                    partial = partial.f_add(&tp.partition(&b.f_to_kind(partial.kind())?)?)?;
                }
                tp.reduce_out(&partial)
            }
        }
    }

    fn tensor_parallel(&self) -> Option<&TpSlot> {
        self.tp.as_ref()
    }

    fn set_tensor_parallel(&mut self, slot: Option<TpSlot>) -> Result<SplitDims> {
        let Some(s) = slot else {
            self.tp = None;
            return Ok(Vec::new());
        };
        let (dims, size) = if s.style.is_colwise() {
            (vec![("weight", Some(0)), ("bias", Some(0))], self.weight.size()[0])
        } else {
            (vec![("weight", Some(1)), ("bias", None)], self.in_features)
        };
        self.tp = Some(sized(s, size));
        Ok(dims.into_iter().filter(|(n, _)| *n == "weight" || self.bias.is_some()).collect())
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        let mut v = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            v.push(("bias", b));
        }
        v
    }
}
