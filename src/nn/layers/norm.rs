//! `BatchNorm` (1-D and 2-D in one) and `LayerNorm`.
use super::sync_batch_norm::{self, RankSum, SyncNorm};
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use crate::nn::init;
use std::sync::Arc;
use tch::{Kind, Tensor};

/// Batch normalisation over dimension 1 of `(N, C)`, `(N, C, L)`,
/// `(N, C, H, W)` or `(N, C, D, H, W)` input, PyTorch's `BatchNorm1d/2d/3d`.
#[derive(Debug)]
pub(crate) struct BatchNorm {
    num_features: i64,
    eps: f64,
    /// `None`: a cumulative average of every batch's statistics since
    /// `num_batches_tracked` was last 0 (torch's `momentum=None`).
    momentum: Option<f64>,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    running: Option<RunningStats>,
    /// PyTorch's `track_running_stats` attribute after construction: with
    /// buffers but off, training normalises with the batch's statistics
    /// and leaves the buffers alone (BaseFinetuning freezes a BatchNorm so).
    tracking: bool,
    /// SyncBatchNorm: training normalises over the job's whole batch,
    /// summed over the ranks by this (`sync_batch_norm.rs`).
    sync: Option<Arc<dyn RankSum>>,
}

/// The running statistics of a batch or instance norm (its buffers).
#[derive(Debug)]
pub(crate) struct RunningStats {
    pub(crate) mean: Tensor,
    pub(crate) var: Tensor,
    pub(crate) num_batches_tracked: Tensor,
}

impl RunningStats {
    /// running_mean (zeros), running_var (ones), num_batches_tracked (int64 0).
    pub(crate) fn new(num_features: i64) -> Result<RunningStats> {
        Ok(RunningStats {
            mean: init::filled(&[num_features], Kind::Float, false, 0.0)?,
            var: init::filled(&[num_features], Kind::Float, false, 1.0)?,
            num_batches_tracked: init::filled(&[], Kind::Int64, false, 0.0)?,
        })
    }

    /// A copy whose tensors are `map(tensor)` (see [`Layer::replicate`]).
    pub(crate) fn mapped(&self, map: &mut super::TensorMap<'_>) -> Result<RunningStats> {
        Ok(RunningStats {
            mean: map(&self.mean)?,
            var: map(&self.var)?,
            num_batches_tracked: map(&self.num_batches_tracked)?,
        })
    }

    /// The buffers under PyTorch's names.
    pub(crate) fn named(&self) -> Vec<(&str, &Tensor)> {
        vec![
            ("running_mean", &self.mean),
            ("running_var", &self.var),
            ("num_batches_tracked", &self.num_batches_tracked),
        ]
    }
}

/// Weight (ones) and bias (zeros) of `num_features` when `affine`.
pub(crate) fn affine_params(num_features: i64, affine: bool) -> Result<(Option<Tensor>, Option<Tensor>)> {
    Ok(if affine { (Some(init::ones(&[num_features])?), Some(init::zeros(&[num_features])?)) } else { (None, None) })
}

impl BatchNorm {
    /// `affine`: learnable weight (ones) and bias (zeros); `track_running_stats`:
    /// buffers `running_mean` (zeros), `running_var` (ones) and
    /// `num_batches_tracked` (int64 0).
    pub(crate) fn new(
        num_features: i64,
        eps: f64,
        momentum: f64,
        affine: bool,
        track_running_stats: bool,
    ) -> Result<BatchNorm> {
        if num_features <= 0 || eps.is_nan() || eps < 0.0 || !(0.0..=1.0).contains(&momentum) {
            return Err(Error::invalid(format!(
                "batch_norm: num_features ({num_features}) must be positive, eps ({eps}) \
                 non-negative and momentum ({momentum}) in [0, 1]"
            )));
        }
        let (weight, bias) = affine_params(num_features, affine)?;
        let running = if track_running_stats { Some(RunningStats::new(num_features)?) } else { None };
        Ok(BatchNorm {
            num_features,
            eps,
            momentum: Some(momentum),
            weight,
            bias,
            running,
            tracking: track_running_stats,
            sync: None,
        })
    }
}

impl Layer for BatchNorm {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        let running = self.running.as_ref().map(|r| r.mapped(map)).transpose()?;
        Ok(Box::new(BatchNorm {
            num_features: self.num_features,
            eps: self.eps,
            momentum: self.momentum,
            weight: super::map_opt(map, &self.weight)?,
            bias: super::map_opt(map, &self.bias)?,
            running,
            tracking: self.tracking,
            sync: self.sync.clone(),
        }))
    }

    fn type_name(&self) -> &'static str {
        "BatchNorm"
    }

    fn set_track_running_stats(&mut self, on: bool) -> bool {
        self.tracking = on;
        true
    }

    fn swap_momentum(&mut self, momentum: Option<f64>) -> Option<Option<f64>> {
        Some(std::mem::replace(&mut self.momentum, momentum))
    }

    fn set_rank_sum(&mut self, sum: Option<Arc<dyn RankSum>>) -> bool {
        self.sync = sum;
        true
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let size = x.size();
        if !(2..=5).contains(&size.len()) || size[1] != self.num_features {
            return Err(Error::shape(format!(
                "batch_norm: input of shape {} must be (N, {}, ...) with 2 to 5 dimensions",
                shape_of(x),
                self.num_features
            )));
        }
        let per_channel: i64 = size[0] * size[2..].iter().product::<i64>();
        if training && per_channel <= 1 {
            return Err(Error::shape(format!(
                "batch_norm: expected more than 1 value per channel when training, got input of shape {}",
                shape_of(x)
            )));
        }
        // torch's exponential_average_factor: the momentum, or with none
        // 1 / num_batches_tracked once this batch is counted.
        let mut factor = self.momentum.unwrap_or(0.0);
        let (mean, var) = match &self.running {
            // torch passes no buffers to a training pass that does not track.
            Some(_) if training && !self.tracking => (None, None),
            Some(r) => {
                if training {
                    let mut n = r.num_batches_tracked.shallow_clone();
                    let _ = tch::no_grad(|| n.f_add_scalar_(1))?;
                    if self.momentum.is_none() {
                        factor = 1.0 / n.f_double_value(&[])?;
                    }
                }
                (Some(&r.mean), Some(&r.var))
            }
            None => (None, None),
        };
        if let (true, Some(sum)) = (training, &self.sync) {
            let running = if self.tracking { self.running.as_ref() } else { None };
            let norm =
                SyncNorm { weight: self.weight.as_ref(), bias: self.bias.as_ref(), running, factor, eps: self.eps };
            return sync_batch_norm::forward(x, &norm, sum);
        }
        let use_batch_stats = training || self.running.is_none();
        Ok(x.f_batch_norm(
            self.weight.as_ref(),
            self.bias.as_ref(),
            mean,
            var,
            use_batch_stats,
            factor,
            self.eps,
            true,
        )?)
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

/// Layer normalisation over the trailing `normalized_shape` dimensions.
#[derive(Debug)]
pub(crate) struct LayerNorm {
    shape: Vec<i64>,
    eps: f64,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
}

impl LayerNorm {
    /// `elementwise_affine`: weight (ones) and bias (zeros) of `normalized_shape`.
    pub(crate) fn new(normalized_shape: &[i64], eps: f64, elementwise_affine: bool) -> Result<LayerNorm> {
        LayerNorm::with_bias(normalized_shape, eps, elementwise_affine, elementwise_affine)
    }

    /// As [`LayerNorm::new`]; `bias` false leaves the bias out (PyTorch's
    /// `bias=False`, which only matters with `elementwise_affine`).
    pub(crate) fn with_bias(normalized_shape: &[i64], eps: f64, elementwise_affine: bool, bias: bool) -> Result<Self> {
        if normalized_shape.is_empty() || normalized_shape.iter().any(|&d| d <= 0) || eps.is_nan() || eps < 0.0 {
            return Err(Error::invalid(format!(
                "layer_norm: normalized_shape {normalized_shape:?} must be non-empty and positive, \
                 eps ({eps}) non-negative"
            )));
        }
        let weight = if elementwise_affine { Some(init::ones(normalized_shape)?) } else { None };
        let bias = if elementwise_affine && bias { Some(init::zeros(normalized_shape)?) } else { None };
        Ok(LayerNorm { shape: normalized_shape.to_vec(), eps, weight, bias })
    }

    /// A copy whose tensors are `map(tensor)` (see [`Layer::replicate`]).
    pub(crate) fn mapped(&self, map: &mut super::TensorMap<'_>) -> Result<LayerNorm> {
        let (weight, bias) = (super::map_opt(map, &self.weight)?, super::map_opt(map, &self.bias)?);
        Ok(LayerNorm { shape: self.shape.clone(), eps: self.eps, weight, bias })
    }
}

impl Layer for LayerNorm {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(self.mapped(map)?))
    }

    fn type_name(&self) -> &'static str {
        "LayerNorm"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let size = x.size();
        let n = self.shape.len();
        if size.len() < n || size[size.len() - n..] != self.shape[..] {
            return Err(Error::shape(format!(
                "layer_norm: input of shape {} must end in {:?}",
                shape_of(x),
                self.shape
            )));
        }
        Ok(x.f_layer_norm(self.shape.as_slice(), self.weight.as_ref(), self.bias.as_ref(), self.eps, true)?)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        let weight = self.weight.as_ref().map(|w| ("weight", w));
        weight.into_iter().chain(self.bias.as_ref().map(|b| ("bias", b))).collect()
    }
}
