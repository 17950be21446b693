//! Element-wise activations and (log-)softmax.
use super::Layer;
use crate::error::Result;
use crate::tensor::ops;
use tch::Tensor;

/// An activation function, used as a parameterless layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `max(0, x)`.
    Relu,
    /// `max(0, x) + slope * min(0, x)`.
    LeakyRelu(f64),
    /// Exact (erf) GELU.
    Gelu,
    /// Logistic sigmoid.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// `x` for `x > 0`, `alpha * (exp(x) - 1)` otherwise.
    Elu(f64),
    /// Softmax along a dimension.
    Softmax(i64),
    /// Log-softmax along a dimension.
    LogSoftmax(i64),
    /// Returns its input.
    Identity,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
    /// `relu6(x + 3) / 6`.
    Hardsigmoid,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// GELU with the tanh approximation.
    GeluTanh,
    /// Self-normalising ELU.
    Selu,
    /// `log(1 + exp(beta * x)) / beta` (threshold 20, as PyTorch's default).
    Softplus(f64),
    /// `log(sigmoid(x))`.
    LogSigmoid,
}

impl Activation {
    /// Applies the activation to `x`.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let y = match *self {
            Activation::Relu => x.f_relu()?,
            Activation::LeakyRelu(slope) => x.f_relu()?.f_add(&x.f_clamp_max(0.0)?.f_mul_scalar(slope)?)?,
            Activation::Gelu => x.f_gelu("none")?,
            Activation::Sigmoid => x.f_sigmoid()?,
            Activation::Tanh => x.f_tanh()?,
            Activation::Silu => x.f_silu()?,
            Activation::Elu(alpha) => ops::elu(x, alpha)?,
            Activation::Softmax(dim) => x.f_softmax(dim, None)?,
            Activation::LogSoftmax(dim) => x.f_log_softmax(dim, None)?,
            Activation::Identity => x.shallow_clone(),
            Activation::Mish => ops::mish(x)?,
            Activation::Hardswish => ops::hardswish(x)?,
            Activation::Hardsigmoid => ops::hardsigmoid(x)?,
            Activation::Relu6 => ops::relu6(x)?,
            Activation::GeluTanh => ops::gelu_tanh(x)?,
            Activation::Selu => ops::selu(x)?,
            Activation::Softplus(beta) => ops::softplus(x, beta, 20.0)?,
            Activation::LogSigmoid => ops::logsigmoid(x)?,
        };
        Ok(y)
    }
}

impl Layer for Activation {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(*self))
    }

    fn type_name(&self) -> &'static str {
        match self {
            Activation::Relu => "ReLU",
            Activation::LeakyRelu(_) => "LeakyReLU",
            Activation::Gelu => "GELU",
            Activation::Sigmoid => "Sigmoid",
            Activation::Tanh => "Tanh",
            Activation::Silu => "SiLU",
            Activation::Elu(_) => "ELU",
            Activation::Softmax(_) => "Softmax",
            Activation::LogSoftmax(_) => "LogSoftmax",
            Activation::Identity => "Identity",
            Activation::Mish => "Mish",
            Activation::Hardswish => "Hardswish",
            Activation::Hardsigmoid => "Hardsigmoid",
            Activation::Relu6 => "ReLU6",
            Activation::GeluTanh => "GELU",
            Activation::Selu => "SELU",
            Activation::Softplus(_) => "Softplus",
            Activation::LogSigmoid => "LogSigmoid",
        }
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        self.apply(x)
    }
}
