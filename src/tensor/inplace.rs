//! In-place changes of existing tensors (parameters, buffers, EMA or SWA
//! copies), as `torch.no_grad()` code makes them: every function runs under
//! no_grad, writes into the tensor's own storage (every handle sharing it
//! sees the change) and is not recorded by autograd.
use super::dtype::is_floating;
use crate::error::{Error, Result};
use crate::nn::meta_init;
use tch::Tensor;

/// Runs `op` on `t` under no_grad, or records it where `t` is a meta
/// tensor ([`meta_init::change`]).
fn change(
    t: &Tensor,
    what: &str,
    overwrites: bool,
    draws: bool,
    op: impl Fn(&Tensor) -> Result<()> + Send + 'static,
) -> Result<()> {
    meta_init::change(t, what, overwrites, draws, move |x| tch::no_grad(|| op(x)))
}

/// An operand with data: a meta operand has none to give.
fn operand<'a>(other: &'a Tensor, what: &str) -> Result<&'a Tensor> {
    if meta_init::is_meta(other) {
        return Err(Error::new(
            crate::error::ErrorCode::Unsupported,
            format!("{what}: a meta tensor holds no values to read (materialize its model first)"),
        ));
    }
    Ok(other)
}

/// The operand `other` of a change of `t`: shared, or copied as it is now
/// where `t` is a meta tensor whose change runs later.
fn kept(t: &Tensor, other: &Tensor, what: &str) -> Result<Tensor> {
    let other = operand(other, what)?;
    if meta_init::is_meta(t) {
        Ok(other.f_detach_copy()?)
    } else {
        Ok(other.shallow_clone())
    }
}

/// Fails with `DtypeMismatch` unless `t` is floating-point.
pub(crate) fn floating(t: &Tensor, what: &str) -> Result<()> {
    let kind = t.f_kind()?;
    if !is_floating(kind) {
        return Err(Error::dtype(format!("{what}: the tensor is {kind:?}, a floating-point tensor is needed")));
    }
    Ok(())
}

fn finite(v: f64, name: &str, what: &str) -> Result<()> {
    if !v.is_finite() {
        return Err(Error::invalid(format!("{what}: {name} must be finite, got {v}")));
    }
    Ok(())
}

/// `dst.copy_(src)`: `src` broadcast to `dst`'s shape, converted to its
/// dtype and device.
pub fn copy_(dst: &Tensor, src: &Tensor) -> Result<()> {
    let src = kept(dst, src, "copy_")?;
    change(dst, "copy_", true, false, move |t| Ok(t.shallow_clone().f_copy_(&src)?))
}

/// `t.fill_(value)` (`nn.init.constant_`; 0 and 1 are `zeros_` / `ones_`).
pub fn fill_(t: &Tensor, value: f64) -> Result<()> {
    change(t, "fill_", true, false, move |t| Ok(t.shallow_clone().f_fill_(value).map(drop)?))
}

/// `t.zero_()`.
pub fn zero_(t: &Tensor) -> Result<()> {
    change(t, "zero_", true, false, |t| Ok(t.shallow_clone().f_zero_().map(drop)?))
}

/// `t.add_(other, alpha=alpha)`: `t += alpha * other`, `other` broadcast.
pub fn add_(t: &Tensor, other: &Tensor, alpha: f64) -> Result<()> {
    let other = kept(t, other, "add_")?;
    change(t, "add_", false, false, move |t| super::scaled::add_(&mut t.shallow_clone(), &other, alpha))
}

/// `value` as the scalar torch would take for a tensor (`integer`: of an
/// integer dtype): an int for an integer tensor when the value is a whole
/// number (as `long_tensor.add_(1)`).
fn scalar_for(integer: bool, value: f64) -> tch::Scalar {
    let whole = value.fract() == 0.0 && value.abs() < 9.2e18;
    if integer && whole {
        tch::Scalar::int(value as i64)
    } else {
        tch::Scalar::float(value)
    }
}

/// `t.add_(value)` (a whole number on an integer tensor adds exactly).
pub fn add_scalar_(t: &Tensor, value: f64) -> Result<()> {
    let integer = !is_floating(t.f_kind()?);
    change(t, "add_", false, false, move |t| {
        Ok(t.shallow_clone().f_add_scalar_(scalar_for(integer, value)).map(drop)?)
    })
}

/// `t.mul_(other)`, `other` broadcast.
pub fn mul_(t: &Tensor, other: &Tensor) -> Result<()> {
    let other = kept(t, other, "mul_")?;
    change(t, "mul_", false, false, move |t| Ok(t.shallow_clone().f_mul_(&other).map(drop)?))
}

/// `t.mul_(value)` (a whole number on an integer tensor multiplies exactly).
pub fn mul_scalar_(t: &Tensor, value: f64) -> Result<()> {
    let integer = !is_floating(t.f_kind()?);
    change(t, "mul_", false, false, move |t| {
        Ok(t.shallow_clone().f_mul_scalar_(scalar_for(integer, value)).map(drop)?)
    })
}

/// `t.clamp_(min, max)`; `None` leaves that side open.
pub fn clamp_(t: &Tensor, min: Option<f64>, max: Option<f64>) -> Result<()> {
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            return Err(Error::invalid(format!("clamp_: min {lo} > max {hi}")));
        }
    }
    change(t, "clamp_", false, false, move |t| {
        let mut x = t.shallow_clone();
        match (min, max) {
            (Some(lo), Some(hi)) => drop(x.f_clamp_(lo, hi)?),
            (Some(lo), None) => drop(x.f_clamp_min_(lo)?),
            (None, Some(hi)) => drop(x.f_clamp_max_(hi)?),
            (None, None) => {}
        }
        Ok(())
    })
}

/// `t.uniform_(low, high)` from the global generator (`fulmen_manual_seed`).
pub fn uniform_(t: &Tensor, low: f64, high: f64) -> Result<()> {
    floating(t, "uniform_")?;
    finite(low, "low", "uniform_")?;
    finite(high, "high", "uniform_")?;
    if low > high {
        return Err(Error::invalid(format!("uniform_: low {low} > high {high}")));
    }
    change(t, "uniform_", true, true, move |t| Ok(t.shallow_clone().f_uniform_(low, high).map(drop)?))
}

/// `t.normal_(mean, std)` from the global generator.
pub fn normal_(t: &Tensor, mean: f64, std: f64) -> Result<()> {
    floating(t, "normal_")?;
    finite(mean, "mean", "normal_")?;
    finite(std, "std", "normal_")?;
    if std < 0.0 {
        return Err(Error::invalid(format!("normal_: std {std} is negative")));
    }
    change(t, "normal_", true, true, move |t| Ok(t.shallow_clone().f_normal_(mean, std).map(drop)?))
}
