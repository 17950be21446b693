//! Epoch values of metrics logged as device tensors: reduced on the
//! tensors' device as steps go by, with the host's float64 arithmetic, and
//! read back at the epoch's end in one copy per device, so logging a
//! device value never makes a step wait for its device.
use super::metrics::ReduceFx;
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use tch::{Kind, Tensor};

/// A running epoch reduction on a device: a 0-dim float64 tensor (float32
/// on MPS, which has no float64).
pub(crate) struct DeviceValue(pub(crate) Tensor);

impl Clone for DeviceValue {
    /// Shares the tensor: every update makes a new one.
    fn clone(&self) -> Self {
        DeviceValue(self.0.shallow_clone())
    }
}

impl std::fmt::Debug for DeviceValue {
    /// The device only: printing the value would wait for it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceValue({:?})", self.0.device())
    }
}

/// A logged tensor as the value the reductions take: one element,
/// detached, 0-dim, float64 (float32 on MPS), always a copy (the tensor
/// may be a captured graph's output, which the next replay overwrites).
/// Booleans and complex numbers are refused ([`check_loggable`]).
pub(crate) fn as_logged(value: &Tensor) -> Result<Tensor> {
    check_loggable(value)?;
    let _guard = tch::no_grad_guard();
    let to = if Device::of(value)? == Device::Mps { Kind::Float } else { Kind::Double };
    Ok(value.f_detach()?.f_reshape([] as [i64; 0])?.f_to_dtype(to, false, true)?)
}

/// Refuses a tensor that is not one real number: undefined, not one
/// element, boolean or complex.
pub(crate) fn check_loggable(value: &Tensor) -> Result<()> {
    if !value.defined() {
        return Err(Error::invalid("a logged tensor must be defined"));
    }
    if value.numel() != 1 {
        return Err(Error::shape(format!("a logged tensor must have one element, got shape {:?}", value.size())));
    }
    let kind = value.f_kind()?;
    if matches!(kind, Kind::Bool | Kind::ComplexHalf | Kind::ComplexFloat | Kind::ComplexDouble) {
        return Err(Error::dtype(format!("a logged tensor must be a real number, got {kind:?}")));
    }
    Ok(())
}

/// Adds `value` (from [`as_logged`]) to a running reduction as the host
/// adds a value to its own: `current` is the reduction on the device,
/// else `host` (the host's running value after `count` values) is. The
/// weighted mean adds `value * batch_size`; the others combine (the first
/// value starts them), max and min ignoring NaN as the host's do. A value
/// on another device than the reduction (the chunks of a batch split over
/// DP replicas) is copied to the reduction's device first.
pub(crate) fn accumulate(
    current: Option<Tensor>,
    host: f64,
    count: usize,
    reduce: ReduceFx,
    value: &Tensor,
    batch_size: f64,
) -> Result<Tensor> {
    let _guard = tch::no_grad_guard();
    let current = match current {
        Some(c) => Some(c),
        None if reduce == ReduceFx::Mean || count > 0 => Some(value.f_full_like(host)?),
        None => None,
    };
    let moved;
    let value = match &current {
        Some(c) => {
            moved = crate::tensor::device::to_device_of(value, c)?;
            &moved
        }
        None => value,
    };
    Ok(match (reduce, current) {
        (ReduceFx::Mean, Some(c)) => c.f_add(&value.f_mul_scalar(batch_size)?)?,
        (_, None) => value.shallow_clone(),
        (ReduceFx::Sum, Some(c)) => c.f_add(value)?,
        (ReduceFx::Max, Some(c)) => c.f_fmax(value)?,
        (ReduceFx::Min, Some(c)) => c.f_fmin(value)?,
    })
}

/// `sum / weight` as the host divides: by a tensor, since CUDA divides by
/// a scalar as a product with its reciprocal, which may lose a bit.
pub(crate) fn divide(sum: &Tensor, weight: f64) -> Result<Tensor> {
    let _guard = tch::no_grad_guard();
    Ok(sum.f_div(&sum.f_full_like(weight)?)?)
}

/// Reads 0-dim tensors back, in order: one stack and one copy to the host
/// per device (the host waits for each device once).
pub(crate) fn read_all(values: &[&Tensor]) -> Result<Vec<f64>> {
    let mut out = vec![0.0; values.len()];
    let mut devices = Vec::with_capacity(values.len());
    for v in values {
        devices.push(Device::of(v)?);
    }
    let mut read = vec![false; values.len()];
    for first in 0..values.len() {
        if read[first] {
            continue;
        }
        let picked: Vec<usize> = (first..values.len()).filter(|j| !read[*j] && devices[*j] == devices[first]).collect();
        let together: Vec<&Tensor> = picked.iter().map(|j| values[*j]).collect();
        let host = Tensor::f_stack(&together, 0)?.f_to_device(tch::Device::Cpu)?.f_to_kind(Kind::Double)?;
        let host = Vec::<f64>::try_from(&host)?;
        for (j, v) in picked.into_iter().zip(host) {
            out[j] = v;
            read[j] = true;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's reduction of `values` (weights for the mean).
    fn on_host(reduce: ReduceFx, values: &[(f64, f64)]) -> f64 {
        let mut acc = 0.0;
        for (i, (v, w)) in values.iter().enumerate() {
            acc = match reduce {
                ReduceFx::Mean => acc + v * w,
                _ if i == 0 => *v,
                ReduceFx::Sum => acc + v,
                ReduceFx::Max => f64::max(acc, *v),
                ReduceFx::Min => f64::min(acc, *v),
            };
        }
        acc
    }

    #[test]
    fn device_reductions_equal_the_hosts_bit_for_bit() {
        let values = [(0.1f32, 3.0), (f32::NAN, 1.0), (2.5e-3, 7.0), (-1.0 / 3.0, 2.0), (7.25, 5.0)];
        for reduce in [ReduceFx::Mean, ReduceFx::Sum, ReduceFx::Max, ReduceFx::Min] {
            // NaN poisons a sum and a mean on either side; max and min
            // skip it on both.
            let kept: Vec<(f64, f64)> = values
                .iter()
                .filter(|(v, _)| !(v.is_nan() && matches!(reduce, ReduceFx::Mean | ReduceFx::Sum)))
                .map(|(v, w)| (f64::from(*v), *w))
                .collect();
            let mut current = None;
            for (count, (v, w)) in kept.iter().enumerate() {
                let logged = as_logged(&Tensor::from_slice(&[*v as f32]).reshape([1, 1])).unwrap();
                current = Some(accumulate(current, 0.0, count, reduce, &logged, *w).unwrap());
            }
            let got = read_all(&[current.as_ref().unwrap()]).unwrap()[0];
            assert_eq!(got.to_bits(), on_host(reduce, &kept).to_bits(), "{reduce:?}");
        }
    }

    #[test]
    fn a_device_reduction_continues_the_hosts() {
        // Two values on the host, then one on the device.
        let host = 0.5 * 2.0 + 0.25 * 4.0;
        let logged = as_logged(&Tensor::from(0.125f32)).unwrap();
        let mean = accumulate(None, host, 2, ReduceFx::Mean, &logged, 8.0).unwrap();
        let max = accumulate(None, 0.5, 2, ReduceFx::Max, &logged, 1.0).unwrap();
        assert_eq!(read_all(&[&mean, &max]).unwrap(), vec![host + 0.125 * 8.0, 0.5]);
    }

    #[test]
    fn tensors_that_are_not_one_real_number_are_refused() {
        assert!(as_logged(&Tensor::from_slice(&[1.0f32, 2.0])).is_err());
        assert!(as_logged(&Tensor::from(true)).is_err());
        assert_eq!(read_all(&[&as_logged(&Tensor::from(3i64)).unwrap()]).unwrap(), vec![3.0]);
    }
}
