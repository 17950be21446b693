//! `InstanceNorm1d` and `InstanceNorm2d`: each channel of each sample
//! normalised over its own positions.
use super::norm::{affine_params, RunningStats};
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use tch::Tensor;

/// Instance normalisation of `(N, C, L)` / `(C, L)` (`dims` 1) or
/// `(N, C, H, W)` / `(C, H, W)` (`dims` 2) input, PyTorch's `InstanceNorm1d/2d`.
#[derive(Debug)]
pub(crate) struct InstanceNorm {
    dims: usize,
    num_features: i64,
    eps: f64,
    momentum: f64,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    running: Option<RunningStats>,
}

impl InstanceNorm {
    /// `affine`: weight (ones) and bias (zeros); `track_running_stats`:
    /// buffers running_mean (zeros), running_var (ones) and
    /// num_batches_tracked (int64 0), used in evaluation mode.
    pub(crate) fn new(
        dims: usize,
        num_features: i64,
        eps: f64,
        momentum: f64,
        affine: bool,
        track: bool,
    ) -> Result<Self> {
        if !(1..=2).contains(&dims)
            || num_features <= 0
            || eps.is_nan()
            || eps < 0.0
            || !(0.0..=1.0).contains(&momentum)
        {
            return Err(Error::invalid(format!(
                "instance_norm: dims ({dims}) must be 1 or 2, num_features ({num_features}) positive, eps ({eps}) \
                 non-negative and momentum ({momentum}) in [0, 1]"
            )));
        }
        let (weight, bias) = affine_params(num_features, affine)?;
        let running = if track { Some(RunningStats::new(num_features)?) } else { None };
        Ok(InstanceNorm { dims, num_features, eps, momentum, weight, bias, running })
    }
}

impl Layer for InstanceNorm {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        let running = self.running.as_ref().map(|r| r.mapped(map)).transpose()?;
        Ok(Box::new(InstanceNorm {
            weight: super::map_opt(map, &self.weight)?,
            bias: super::map_opt(map, &self.bias)?,
            running,
            ..*self
        }))
    }

    fn type_name(&self) -> &'static str {
        if self.dims == 1 {
            "InstanceNorm1d"
        } else {
            "InstanceNorm2d"
        }
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let rank = x.dim();
        let batched = rank == self.dims + 2;
        // Without weights or running statistics, any channel count works (as in PyTorch).
        let fixed = self.weight.is_some() || self.running.is_some();
        let channels = x.size().get(usize::from(batched)).copied();
        if !(batched || rank == self.dims + 1) || (fixed && channels != Some(self.num_features)) {
            let spatial = if self.dims == 1 { "L" } else { "H, W" };
            return Err(Error::shape(format!(
                "instance_norm: input of shape {} must be (N, {c}, {spatial}) or ({c}, {spatial})",
                shape_of(x),
                c = self.num_features
            )));
        }
        let x = if batched { x.shallow_clone() } else { x.f_unsqueeze(0)? };
        let (mean, var) = match &self.running {
            Some(r) => (Some(&r.mean), Some(&r.var)),
            None => (None, None),
        };
        let use_input_stats = training || self.running.is_none();
        let y = x.f_instance_norm(
            self.weight.as_ref(),
            self.bias.as_ref(),
            mean,
            var,
            use_input_stats,
            self.momentum,
            self.eps,
            false,
        )?;
        Ok(if batched { y } else { y.f_squeeze_dim(0)? })
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        match (&self.weight, &self.bias) {
            (Some(w), Some(b)) => vec![("weight", w), ("bias", b)],
            _ => Vec::new(),
        }
    }

    fn buffers(&self) -> Vec<(&str, &Tensor)> {
        self.running.as_ref().map(RunningStats::named).unwrap_or_default()
    }
}
