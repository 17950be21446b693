//! Activation functions, softmax and log-softmax, with
//! torch.nn.functional's formulas and defaults.
use super::checks::check_dim;
use crate::error::{Error, Result};
use tch::{Kind, Tensor};

/// `max(x, 0)`.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_relu()?)
}
/// `x if x > 0 else slope * x` (differentiable).
pub fn leaky_relu(x: &Tensor, slope: f64) -> Result<Tensor> {
    crate::tensor::functional::leaky_relu(x, slope)
}
/// Logistic sigmoid.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_sigmoid()?)
}
/// Hyperbolic tangent.
pub fn tanh(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_tanh()?)
}
/// GELU, exact (erf form).
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_gelu("none")?)
}
/// SiLU (swish): `x * sigmoid(x)`.
pub fn silu(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_silu()?)
}
/// Softmax along `dim` of a floating `x`.
pub fn softmax(x: &Tensor, dim: i64) -> Result<Tensor> {
    Ok(x.f_softmax(floating_dim(x, dim, "softmax")?, None)?)
}
/// Log-softmax along `dim` of a floating `x`.
pub fn log_softmax(x: &Tensor, dim: i64) -> Result<Tensor> {
    Ok(x.f_log_softmax(floating_dim(x, dim, "log_softmax")?, None)?)
}

/// Checks that `x` is floating and normalises `dim`.
fn floating_dim(x: &Tensor, dim: i64, what: &str) -> Result<i64> {
    if !crate::tensor::dtype::is_floating(x.f_kind()?) {
        return Err(Error::dtype(format!("{what} needs a floating tensor, got {:?}", x.kind())));
    }
    check_dim(x, dim)
}

/// `log(1 + exp(beta * x)) / beta`, linear above `threshold` (`F.softplus`).
pub fn softplus(x: &Tensor, beta: f64, threshold: f64) -> Result<Tensor> {
    if beta == 0.0 || !beta.is_finite() {
        return Err(Error::invalid(format!("softplus: beta = {beta}, must be finite and non-zero")));
    }
    // Half types compute in f32 as torch's kernel does; the branch not
    // taken is clamped so that neither it nor its gradient overflows.
    let kind = x.f_kind()?;
    let wide = if matches!(kind, Kind::Half | Kind::BFloat16) { x.f_to_kind(Kind::Float)? } else { x.shallow_clone() };
    let scaled = wide.f_mul_scalar(beta)?;
    let soft = scaled.f_clamp_max(threshold)?.f_exp()?.f_log1p()?.f_div_scalar(beta)?;
    Ok(wide.f_where_self(&scaled.f_gt(threshold)?, &soft)?.f_to_kind(kind)?)
}
/// `x * tanh(softplus(x))` (`F.mish`).
pub fn mish(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_mish()?)
}
/// `x * relu6(x + 3) / 6` (`F.hardswish`).
pub fn hardswish(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_hardswish()?)
}
/// `relu6(x + 3) / 6` (`F.hardsigmoid`).
pub fn hardsigmoid(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_hardsigmoid()?)
}
/// `min(max(x, 0), 6)` (`F.relu6`).
pub fn relu6(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_relu6()?)
}
/// `x` above 0, else `alpha * expm1(x)` (`F.elu`).
pub fn elu(x: &Tensor, alpha: f64) -> Result<Tensor> {
    // relu(x) + alpha * expm1(min(x, 0)): equal to torch's values, and no
    // branch overflows (a `where` over expm1(x) gives NaN gradients).
    Ok(x.f_relu()?.f_add(&x.f_clamp_max(0.0)?.f_expm1()?.f_mul_scalar(alpha)?)?)
}
/// Scaled ELU with the self-normalising constants (`F.selu`).
pub fn selu(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_selu()?)
}
/// Gated linear unit: halves `a, b` of `dim`, `a * sigmoid(b)` (`F.glu`).
pub fn glu(x: &Tensor, dim: i64) -> Result<Tensor> {
    let d = check_dim(x, dim)?;
    if x.size().get(d as usize).is_none_or(|n| n % 2 != 0) {
        return Err(Error::shape(format!("glu: dimension {dim} of shape {:?} must have an even size", x.size())));
    }
    Ok(x.f_glu(d)?)
}
/// GELU with the tanh approximation (`F.gelu(x, approximate="tanh")`).
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_gelu("tanh")?)
}
/// `x` above 0, else `weight * x`; `weight` has one value or one per
/// channel (dimension 1) (`F.prelu`).
pub fn prelu(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let n = weight.numel() as i64;
    let channels = if x.dim() >= 2 { x.size()[1] } else { 1 };
    if weight.dim() > 1 || (n != 1 && n != channels) {
        return Err(Error::shape(format!(
            "prelu: weight of shape {:?} must hold 1 or {channels} values for input {:?}",
            weight.size(),
            x.size()
        )));
    }
    Ok(x.f_prelu(weight)?)
}
/// `log(sigmoid(x))`, computed stably (`F.logsigmoid`).
pub fn logsigmoid(x: &Tensor) -> Result<Tensor> {
    Ok(x.f_log_sigmoid()?)
}
