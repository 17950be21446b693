//! `MaxPool2d` and `AvgPool2d`, and the adaptive pools.
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use tch::Tensor;

/// Which reduction a pooling layer applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolKind {
    Max,
    Avg,
}

/// A 2-D pooling layer (no parameters).
#[derive(Debug)]
pub(crate) struct Pool2d {
    kind: PoolKind,
    kernel: [i64; 2],
    stride: [i64; 2],
    padding: [i64; 2],
}

impl Pool2d {
    /// Validates the window: kernel and stride positive, padding at most
    /// half the kernel (PyTorch's rule).
    pub(crate) fn new(kind: PoolKind, kernel: [i64; 2], stride: [i64; 2], padding: [i64; 2]) -> Result<Pool2d> {
        let bad = kernel.iter().any(|&k| k <= 0)
            || stride.iter().any(|&s| s <= 0)
            || padding.iter().zip(kernel.iter()).any(|(&p, &k)| p < 0 || p > k / 2);
        if bad {
            return Err(Error::invalid(format!(
                "pool2d: invalid kernel {kernel:?}, stride {stride:?}, padding {padding:?} \
                 (kernel and stride must be positive, padding at most half the kernel)"
            )));
        }
        Ok(Pool2d { kind, kernel, stride, padding })
    }
}

impl Layer for Pool2d {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Pool2d { kind: self.kind, kernel: self.kernel, stride: self.stride, padding: self.padding }))
    }

    fn type_name(&self) -> &'static str {
        match self.kind {
            PoolKind::Max => "MaxPool2d",
            PoolKind::Avg => "AvgPool2d",
        }
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        if x.dim() != 3 && x.dim() != 4 {
            return Err(Error::shape(format!(
                "{}: input of shape {} must be (N, C, H, W) or (C, H, W)",
                self.type_name(),
                shape_of(x)
            )));
        }
        let y = match self.kind {
            PoolKind::Max => x.f_max_pool2d(self.kernel, self.stride, self.padding, [1, 1], false)?,
            PoolKind::Avg => x.f_avg_pool2d(self.kernel, self.stride, self.padding, false, true, None)?,
        };
        Ok(y)
    }
}

/// Adaptive pooling to a fixed output size over the last 1 or 2
/// dimensions, PyTorch's `AdaptiveAvgPool1d/2d` and `AdaptiveMaxPool1d/2d`
/// (the max variants give the values, not the indices).
#[derive(Debug)]
pub(crate) struct AdaptivePool {
    kind: PoolKind,
    /// Output size per pooled dimension; -1 keeps the input's size.
    output: Vec<i64>,
}

impl AdaptivePool {
    /// `output_size`: 1 or 2 sizes, each positive or -1 (keep the input's).
    pub(crate) fn new(kind: PoolKind, output_size: &[i64]) -> Result<AdaptivePool> {
        if !(1..=2).contains(&output_size.len()) || output_size.iter().any(|&s| s == 0 || s < -1) {
            return Err(Error::invalid(format!(
                "adaptive_pool: output_size {output_size:?} must hold 1 or 2 sizes, each positive or -1"
            )));
        }
        Ok(AdaptivePool { kind, output: output_size.to_vec() })
    }
}

impl Layer for AdaptivePool {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(AdaptivePool { kind: self.kind, output: self.output.clone() }))
    }

    fn type_name(&self) -> &'static str {
        match (self.kind, self.output.len()) {
            (PoolKind::Avg, 1) => "AdaptiveAvgPool1d",
            (PoolKind::Avg, _) => "AdaptiveAvgPool2d",
            (PoolKind::Max, 1) => "AdaptiveMaxPool1d",
            (PoolKind::Max, _) => "AdaptiveMaxPool2d",
        }
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let n = self.output.len();
        let size = x.size();
        if size.len() != n + 1 && size.len() != n + 2 {
            let want = if n == 1 { "(N, C, L) or (C, L)" } else { "(N, C, H, W) or (C, H, W)" };
            return Err(Error::shape(format!("{}: input of shape {} must be {want}", self.type_name(), shape_of(x))));
        }
        let tail = &size[size.len() - n..];
        let out: Vec<i64> = self.output.iter().zip(tail).map(|(&o, &d)| if o == -1 { d } else { o }).collect();
        Ok(match (self.kind, n) {
            (PoolKind::Avg, 1) => x.f_adaptive_avg_pool1d(out.as_slice())?,
            (PoolKind::Avg, _) => x.f_adaptive_avg_pool2d(out.as_slice())?,
            (PoolKind::Max, 1) => x.f_adaptive_max_pool1d(out.as_slice())?.0,
            (PoolKind::Max, _) => x.f_adaptive_max_pool2d(out.as_slice())?.0,
        })
    }
}
