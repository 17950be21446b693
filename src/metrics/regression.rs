//! Mean absolute error, mean squared error and its root, accumulated as a
//! float64 sum and a count on the predictions' device.
use super::{Metric, MetricKind, MetricOptions};
use crate::error::{Error, Result};
use crate::tensor::device::to_device_of;
use tch::{Kind, Tensor};

/// MAE, MSE or RMSE.
#[derive(Debug)]
pub struct Regression {
    opts: MetricOptions,
    /// Sum of |error| or error², float64; `None` until the first update.
    sum: Option<Tensor>,
    /// Number of elements seen.
    count: i64,
}

impl Regression {
    /// A metric with an empty state.
    pub fn new(opts: MetricOptions) -> Self {
        Regression { opts, sum: None, count: 0 }
    }
}

impl Metric for Regression {
    fn options(&self) -> &MetricOptions {
        &self.opts
    }

    fn update(&mut self, preds: &Tensor, target: &Tensor) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        let name = self.opts.kind.name();
        if preds.size() != target.size() {
            return Err(Error::invalid(format!(
                "{name}: predictions of shape {:?} and targets of shape {:?} differ",
                preds.size(),
                target.size()
            )));
        }
        if preds.kind() == Kind::Bool || target.kind() == Kind::Bool {
            return Err(Error::invalid(format!("{name}: bool tensors are not numbers to compare")));
        }
        let target = to_device_of(target, preds)?;
        let diff = preds.f_to_kind(Kind::Double)?.f_sub(&target.f_to_kind(Kind::Double)?)?;
        let part = match self.opts.kind {
            MetricKind::MeanAbsoluteError => diff.f_abs()?,
            _ => diff.f_square()?,
        }
        .f_sum(Kind::Double)?;
        self.sum = Some(match self.sum.take() {
            Some(s) => s.f_add(&to_device_of(&part, &s)?)?,
            None => part,
        });
        self.count += preds.numel() as i64;
        Ok(())
    }

    fn summable_state(&self) -> Result<Option<Vec<f64>>> {
        let sum = match &self.sum {
            Some(s) => f64::try_from(&s.f_to_device(tch::Device::Cpu)?)?,
            None => 0.0,
        };
        Ok(Some(vec![sum, self.count as f64]))
    }

    fn compute_from(&self, state: &[f64]) -> Result<f64> {
        let (sum, count) = (state[0], state[1]);
        if count == 0.0 {
            return Err(Error::state(format!("{} computed before any update", self.opts.kind.name())));
        }
        let mean = sum / count;
        Ok(if self.opts.kind == MetricKind::RootMeanSquaredError { mean.sqrt() } else { mean })
    }

    fn reset(&mut self) {
        self.sum = None;
        self.count = 0;
    }
}
