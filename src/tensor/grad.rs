//! Gradient clipping, as `torch.nn.utils.clip_grad_norm_` / `_value_`,
//! and setting a parameter's `.grad`.
use crate::error::{Error, Result};
use crate::shim;
use libc::c_void;
use tch::Tensor;

/// Sets (or with `None` clears) the `.grad` of `param`.
pub(crate) fn set_grad(param: &Tensor, grad: Option<&Tensor>) -> Result<()> {
    let g = grad.map_or(std::ptr::null(), |g| g.as_ptr() as *const c_void);
    // SAFETY: both tensors are live for the call.
    shim::call("setting a parameter's gradient", |err, len| unsafe {
        shim::fulmen_cxx_set_grad(param.as_ptr() as *const c_void, g, err, len)
    })
}

/// torch's `zero_grad(set_to_none=False)`: each defined gradient of
/// `params` is detached and zeroed in place (it keeps its memory).
pub fn zero_in_place<'a>(params: impl IntoIterator<Item = &'a Tensor>) -> Result<()> {
    for p in params {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.f_detach_()?;
            let _ = g.f_zero_()?;
        }
    }
    Ok(())
}

/// Scales the gradients of `params` in place so that their joint
/// `norm_type`-norm is at most `max_norm`; returns the norm before
/// clipping. `norm_type` may be `f64::INFINITY`. Parameters without a
/// gradient are ignored. Reading the norm waits for the device; the
/// trainer clips with [`clip_grad_norm_on_device`].
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64, norm_type: f64) -> Result<f64> {
    match clip_grad_norm_on_device(params, max_norm, norm_type)? {
        Some(total) => Ok(total.f_double_value(&[])?),
        None => Ok(0.0),
    }
}

/// [`clip_grad_norm`] without reading the norm back: the norm before
/// clipping as a 0-dim tensor on the gradients' device (`None` when no
/// parameter has a gradient), so the host never waits for the device.
pub fn clip_grad_norm_on_device(params: &[Tensor], max_norm: f64, norm_type: f64) -> Result<Option<Tensor>> {
    if max_norm.is_nan() || max_norm < 0.0 || norm_type.is_nan() || norm_type <= 0.0 {
        return Err(Error::invalid(format!(
            "clip_grad_norm: max_norm {max_norm} must be >= 0 and norm_type {norm_type} > 0"
        )));
    }
    let grads: Vec<Tensor> = params.iter().map(|p| p.grad()).filter(|g| g.defined()).collect();
    if grads.is_empty() {
        return Ok(None);
    }
    let _guard = tch::no_grad_guard();
    // torch: the per-gradient norms and their norm in the gradients' dtype,
    // `clip_coef = max_norm / (total + 1e-6)` (as `reciprocal() * max_norm`,
    // what a Python scalar divided by a tensor runs), clamped to 1 and
    // multiplied into every gradient.
    let norms: Vec<Tensor> = grads
        .iter()
        .map(|g| {
            if norm_type.is_infinite() {
                g.f_abs()?.f_max()
            } else {
                g.f_flatten(0, -1)?.f_norm_scalaropt_dim(norm_type, [0i64].as_slice(), false)
            }
        })
        .collect::<std::result::Result<_, _>>()?;
    let stacked = Tensor::f_stack(&norms, 0)?;
    let total = if norm_type.is_infinite() {
        stacked.f_max()?
    } else {
        stacked.f_norm_scalaropt_dim(norm_type, [0i64].as_slice(), false)?
    };
    let coef = total.f_add_scalar(1e-6)?.f_reciprocal()?.f_mul_scalar(max_norm)?.f_clamp_max(1.0)?;
    for g in &grads {
        let mut g = g.shallow_clone();
        let _ = g.f_mul_(&crate::tensor::device::to_device_of(&coef, &g)?)?;
    }
    Ok(Some(total))
}

/// Clamps every gradient element of `params` into `[-clip_value, clip_value]`.
pub fn clip_grad_value(params: &[Tensor], clip_value: f64) -> Result<()> {
    if clip_value.is_nan() || clip_value < 0.0 {
        return Err(Error::invalid(format!("clip_grad_value: clip_value {clip_value} must be >= 0")));
    }
    let _guard = tch::no_grad_guard();
    for p in params {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.f_clamp_(-clip_value, clip_value)?;
        }
    }
    Ok(())
}
