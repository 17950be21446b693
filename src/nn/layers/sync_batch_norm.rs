//! SyncBatchNorm (torch's `nn.SyncBatchNorm`, Lightning's
//! `sync_batchnorm=True`): in training, a BatchNorm normalises with the
//! mean and variance of the whole job's batch, summed over the ranks in
//! forward, with the gradients of those sums summed over the ranks in
//! backward (csrc/rank_function.cpp), so a job of N ranks computes what one
//! process computes on the concatenated batch. Two sums a forward: the
//! per-channel sums with the element count, then the per-channel squared
//! deviations from the global mean (the variance's two-pass form).
use super::norm::RunningStats;
use crate::error::{Error, Result};
use std::sync::Arc;
use tch::{Kind, Tensor};

/// Sums a tensor over the ranks of a job in place (a strategy's process
/// group).
pub(crate) trait RankSum: Send + Sync + std::fmt::Debug {
    /// Replaces `t` (contiguous) with its sum over the ranks.
    fn sum_in_place(&self, t: &Tensor) -> Result<()>;
}

/// `x` summed over the ranks, differentiably: the gradient is summed the
/// same way in backward.
pub(crate) fn sum_over_ranks(sum: &Arc<dyn RankSum>, x: &Tensor) -> Result<Tensor> {
    let sum = Arc::clone(sum);
    super::rank_ops::across_with(x, move |_, t| {
        let copy = t.f_contiguous()?.f_detach_copy()?;
        sum.sum_in_place(&copy)?;
        Ok(copy)
    })
    .map_err(|e| e.context("summing over the ranks (SyncBatchNorm)"))
}

/// What a synchronized training forward needs of its BatchNorm.
pub(crate) struct SyncNorm<'a> {
    pub weight: Option<&'a Tensor>,
    pub bias: Option<&'a Tensor>,
    /// The buffers to update (`None` when the layer does not track).
    pub running: Option<&'a RunningStats>,
    /// torch's exponential_average_factor.
    pub factor: f64,
    pub eps: f64,
}

/// The training forward of a BatchNorm over the job's whole batch.
pub(crate) fn forward(x: &Tensor, norm: &SyncNorm<'_>, sum: &Arc<dyn RankSum>) -> Result<Tensor> {
    let size = x.size();
    let channels = size[1];
    let dims: Vec<i64> = std::iter::once(0).chain(2..size.len() as i64).collect();
    let per_channel: Vec<i64> = (0..size.len()).map(|d| if d == 1 { channels } else { 1 }).collect();
    // Statistics in float32 for half-precision inputs, as torch's kernels.
    let xf =
        if matches!(x.kind(), Kind::Half | Kind::BFloat16) { x.f_to_kind(Kind::Float)? } else { x.shallow_clone() };
    let kind = xf.kind();
    let local = (size[0] * size[2..].iter().product::<i64>()) as f64;
    let sums = xf.f_sum_dim_intlist(Some(dims.as_slice()), false, kind)?;
    // On the input's device (made there through the CPU for device types
    // tch cannot name).
    let count_here = crate::tensor::device::zeros_on_device_of(&[1], kind, &xf)?.f_fill_(local)?;
    let counted = Tensor::f_cat(&[sums, count_here], 0)?;
    let totals = sum_over_ranks(sum, &counted)?;
    let count = totals.f_narrow(0, channels, 1)?.f_double_value(&[0])?;
    if count <= 1.0 {
        return Err(Error::shape(format!(
            "sync_batchnorm: expected more than 1 value per channel over the job's batch, got {count}"
        )));
    }
    let mean = totals.f_narrow(0, 0, channels)?.f_div_scalar(count)?;
    let centered = xf.f_sub(&mean.f_view(per_channel.as_slice())?)?;
    let squares = centered.f_square()?.f_sum_dim_intlist(Some(dims.as_slice()), false, kind)?;
    let var = sum_over_ranks(sum, &squares)?.f_div_scalar(count)?;
    let invstd = var.f_add_scalar(norm.eps)?.f_rsqrt()?;
    let mut y = centered.f_mul(&invstd.f_view(per_channel.as_slice())?)?;
    if let Some(w) = norm.weight {
        y = y.f_mul(&w.f_view(per_channel.as_slice())?)?;
    }
    if let Some(b) = norm.bias {
        y = y.f_add(&b.f_view(per_channel.as_slice())?)?;
    }
    if let Some(r) = norm.running {
        // torch's update: the biased mean, the unbiased variance.
        let unbiased = var.f_mul_scalar(count / (count - 1.0))?;
        tch::no_grad(|| -> Result<()> {
            for (buffer, value) in [(&r.mean, &mean), (&r.var, &unbiased)] {
                let mut b = buffer.shallow_clone();
                let step = value.detach().f_to_kind(b.kind())?.f_mul_scalar(norm.factor)?;
                let _ = b.f_mul_scalar_(1.0 - norm.factor)?.f_add_(&step)?;
            }
            Ok(())
        })?;
    }
    if y.kind() != x.kind() {
        y = y.f_to_kind(x.kind())?;
    }
    Ok(y)
}
