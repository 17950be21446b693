//! Parameter initialisation matching PyTorch's defaults, drawn from
//! libtorch's global RNG (so `tch::manual_seed` makes it reproducible).
use crate::error::{Error, Result};
use tch::{Kind, Tensor};

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

/// A float32 parameter drawn from `U(-bound, bound)`: on the CPU, or on
/// the meta device inside a meta-init scope ([`super::meta_init`]).
pub fn uniform(shape: &[i64], bound: f64) -> Result<Tensor> {
    random(shape, move |t| Ok(t.shallow_clone().f_uniform_(-bound, bound).map(drop)?))
}

/// A float32 parameter drawn from `N(mean, std^2)` (as [`uniform`]).
pub fn normal(shape: &[i64], mean: f64, std: f64) -> Result<Tensor> {
    random(shape, move |t| Ok(t.shallow_clone().f_normal_(mean, std).map(drop)?))
}

/// A float32 parameter given its values by `draw` (which sets every
/// element, drawing from the CPU generator), as [`uniform`].
pub(crate) fn random(shape: &[i64], draw: impl Fn(&Tensor) -> Result<()> + Send + 'static) -> Result<Tensor> {
    check_shape(shape)?;
    super::meta_init::create(shape, Kind::Float, true, true, draw)
}

/// A float32 parameter filled with ones (as [`uniform`]).
pub fn ones(shape: &[i64]) -> Result<Tensor> {
    full(shape, 1.0)
}

/// A float32 parameter filled with `value` (as [`uniform`]).
pub fn full(shape: &[i64], value: f64) -> Result<Tensor> {
    filled(shape, Kind::Float, true, value)
}

/// A float32 parameter filled with zeros (as [`uniform`]).
pub fn zeros(shape: &[i64]) -> Result<Tensor> {
    full(shape, 0.0)
}

/// A tensor of `kind` filled with `value`, a parameter when
/// `requires_grad` (else a buffer), as [`uniform`].
pub(crate) fn filled(shape: &[i64], kind: Kind, requires_grad: bool, value: f64) -> Result<Tensor> {
    check_shape(shape)?;
    super::meta_init::create(shape, kind, requires_grad, false, move |t| {
        Ok(t.shallow_clone().f_fill_(value).map(drop)?)
    })
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
