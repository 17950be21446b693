//! `MaxPool2d` and `AvgPool2d`.
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
