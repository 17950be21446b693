//! Parameter initialisation matching PyTorch's defaults, drawn from
//! libtorch's global RNG (so `tch::manual_seed` makes it reproducible).
use crate::error::{Error, Result};
use tch::{Device, Kind, Tensor};

/// Bound of PyTorch's default `kaiming_uniform_(a = sqrt(5))` for a weight
/// with `fan_in` inputs: `1 / sqrt(fan_in)` (0 when `fan_in` is 0). PyTorch
/// uses the same bound for the bias of `Linear` and `Conv2d`.
pub fn default_uniform_bound(fan_in: i64) -> f64 {
    if fan_in > 0 {
        1.0 / (fan_in as f64).sqrt()
    } else {
        0.0
    }
}

fn check_shape(shape: &[i64]) -> Result<()> {
    if shape.iter().any(|&d| d < 0) {
        return Err(Error::invalid(format!("parameter shape {shape:?} has a negative dimension")));
    }
    Ok(())
}

/// Turns a freshly made tensor into a leaf parameter that requires grad.
pub(crate) fn leaf(t: Tensor) -> Result<Tensor> {
    Ok(t.f_detach()?.f_set_requires_grad(true)?)
}

/// A float32 CPU parameter drawn from `U(-bound, bound)`.
pub fn uniform(shape: &[i64], bound: f64) -> Result<Tensor> {
    check_shape(shape)?;
    let mut t = Tensor::f_empty(shape, (Kind::Float, Device::Cpu))?;
    let _ = tch::no_grad(|| t.f_uniform_(-bound, bound))?;
    leaf(t)
}

/// A float32 CPU parameter drawn from `N(mean, std^2)`.
pub fn normal(shape: &[i64], mean: f64, std: f64) -> Result<Tensor> {
    check_shape(shape)?;
    let mut t = Tensor::f_empty(shape, (Kind::Float, Device::Cpu))?;
    let _ = tch::no_grad(|| t.f_normal_(mean, std))?;
    leaf(t)
}

/// A float32 CPU parameter filled with ones.
pub fn ones(shape: &[i64]) -> Result<Tensor> {
    check_shape(shape)?;
    leaf(Tensor::f_ones(shape, (Kind::Float, Device::Cpu))?)
}

/// A float32 CPU parameter filled with `value`.
pub fn full(shape: &[i64], value: f64) -> Result<Tensor> {
    check_shape(shape)?;
    leaf(Tensor::f_full(shape, value, (Kind::Float, Device::Cpu))?)
}

/// A float32 CPU parameter filled with zeros.
pub fn zeros(shape: &[i64]) -> Result<Tensor> {
    check_shape(shape)?;
    leaf(Tensor::f_zeros(shape, (Kind::Float, Device::Cpu))?)
}

/// Serialises tests that draw from (or seed) libtorch's global RNG, so a
/// seeded test is not disturbed by another test drawing in parallel.
#[cfg(test)]
pub(crate) fn test_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_leaves() {
        let _rng = test_rng_lock();
        tch::manual_seed(0);
        let w = uniform(&[64, 25], default_uniform_bound(25)).unwrap();
        assert!(w.requires_grad() && w.is_leaf());
        let max = w.abs().max().double_value(&[]);
        assert!(max <= 0.2 + 1e-7 && max > 0.15, "max {max}");
        let n = normal(&[10000], 0.0, 1.0).unwrap();
        let std = n.std(true).double_value(&[]);
        assert!((std - 1.0).abs() < 0.05);
        assert_eq!(default_uniform_bound(0), 0.0);
        assert!(uniform(&[-1, 2], 1.0).is_err());
    }

    #[test]
    fn seed_reproducible() {
        let _rng = test_rng_lock();
        tch::manual_seed(7);
        let a = uniform(&[5, 5], 1.0).unwrap();
        tch::manual_seed(7);
        let b = uniform(&[5, 5], 1.0).unwrap();
        assert!(a.equal(&b));
    }
}
