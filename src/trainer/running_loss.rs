//! The epoch's mean training loss as the progress bar shows it: summed on
//! the losses' device as steps go by and read back only when shown, so a
//! step never waits for its device to report a number.
use crate::error::Result;
use crate::tensor::device::Device;
use tch::{Kind, Tensor};

/// The sum and count of an epoch's training losses.
#[derive(Debug, Default)]
pub struct RunningLoss {
    /// The sum, a 0-dim tensor on the losses' device: float64 (float32 on
    /// MPS, which has no float64), so the mean equals the host's sum of
    /// the losses' values.
    sum: Option<Tensor>,
    count: usize,
}

impl RunningLoss {
    /// Adds a step's loss (a one-element tensor) without reading it.
    pub fn add(&mut self, loss: &Tensor) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let value = loss.f_detach()?.f_reshape([] as [i64; 0])?;
        self.sum = Some(match self.sum.take() {
            Some(sum) => sum.f_add(&value.f_to_kind(sum.kind())?)?,
            // A copy even when the kind matches: the loss may be a graph's
            // output, which the next replay overwrites.
            None if Device::of(loss)? == Device::Mps => value.f_to_dtype(Kind::Float, false, true)?,
            None => value.f_to_dtype(Kind::Double, false, true)?,
        });
        self.count += 1;
        Ok(())
    }

    /// The mean so far (`None` before the first loss); reading it waits
    /// for the device.
    pub fn mean(&self) -> Result<Option<f64>> {
        let Some(sum) = &self.sum else { return Ok(None) };
        Ok(Some(sum.f_double_value(&[])? / self.count as f64))
    }

    /// Forgets every loss (a new epoch).
    pub fn clear(&mut self) {
        *self = RunningLoss::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_is_the_hosts_mean_of_the_values() {
        let mut r = RunningLoss::default();
        assert_eq!(r.mean().unwrap(), None);
        let losses = [0.1f32, 2.5e-3, 7.25, 1.0 / 3.0];
        let mut host = 0.0f64;
        for (i, l) in losses.iter().enumerate() {
            r.add(&Tensor::from_slice(&[*l]).reshape([1, 1])).unwrap();
            host += f64::from(*l);
            assert_eq!(r.mean().unwrap(), Some(host / (i + 1) as f64));
        }
        r.clear();
        assert_eq!(r.mean().unwrap(), None);
    }
}
