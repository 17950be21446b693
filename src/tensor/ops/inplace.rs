//! The in-place ops of the C API (see [`super::table`]): each changes its
//! first tensor through [`crate::tensor::inplace`], under no_grad.
use crate::error::Result;
use crate::tensor::inplace;
use tch::Tensor;

/// `tensor.copy_(src)`: `src` broadcast, converted to `tensor`'s dtype and
/// device.
pub fn copy_(tensor: &Tensor, src: &Tensor) -> Result<()> {
    inplace::copy_(tensor, src)
}

/// Overwrites `tensor` with `data`, a CPU tensor of its shape read from host
/// memory.
pub fn copy_from_host(tensor: &Tensor, data: &Tensor) -> Result<()> {
    inplace::copy_(tensor, data)
}

/// `tensor.fill_(value)`.
pub fn fill_(tensor: &Tensor, value: f64) -> Result<()> {
    inplace::fill_(tensor, value)
}

/// `tensor.zero_()`.
pub fn zero_(tensor: &Tensor) -> Result<()> {
    inplace::zero_(tensor)
}

/// `tensor += alpha * other`, `other` broadcast.
pub fn add_(tensor: &Tensor, other: &Tensor, alpha: f64) -> Result<()> {
    inplace::add_(tensor, other, alpha)
}

/// `tensor += value`.
pub fn add_scalar_(tensor: &Tensor, value: f64) -> Result<()> {
    inplace::add_scalar_(tensor, value)
}

/// `tensor *= other`, `other` broadcast.
pub fn mul_(tensor: &Tensor, other: &Tensor) -> Result<()> {
    inplace::mul_(tensor, other)
}

/// `tensor *= value`.
pub fn mul_scalar_(tensor: &Tensor, value: f64) -> Result<()> {
    inplace::mul_scalar_(tensor, value)
}

/// `tensor.clamp_(min, max)`; a NaN bound leaves that side open.
pub fn clamp_(tensor: &Tensor, min: f64, max: f64) -> Result<()> {
    let bound = |v: f64| if v.is_nan() { None } else { Some(v) };
    inplace::clamp_(tensor, bound(min), bound(max))
}

/// `tensor.uniform_(low, high)` from the global generator.
pub fn uniform_(tensor: &Tensor, low: f64, high: f64) -> Result<()> {
    inplace::uniform_(tensor, low, high)
}

/// `tensor.normal_(mean, std)` from the global generator.
pub fn normal_(tensor: &Tensor, mean: f64, std: f64) -> Result<()> {
    inplace::normal_(tensor, mean, std)
}
