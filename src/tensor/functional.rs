//! Small tensor functions shared by the layers and the C API.
use crate::error::Result;
use tch::Tensor;

/// `x if x > 0 else slope * x`, differentiable.
pub fn leaky_relu(x: &Tensor, slope: f64) -> Result<Tensor> {
    Ok(x.f_clamp_min(0.0)?.f_add(&x.f_clamp_max(0.0)?.f_mul_scalar(slope)?)?)
}
