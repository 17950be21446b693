//! `Conv2d`: 2-D convolution over `(N, C, H, W)` or `(C, H, W)` input.
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use crate::nn::init;
use tch::Tensor;

/// Settings of a 2-D convolution, as PyTorch's `nn.Conv2d` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Conv2dConfig {
    /// Input channels.
    pub in_channels: i64,
    /// Output channels.
    pub out_channels: i64,
    /// Kernel height and width.
    pub kernel: [i64; 2],
    /// Stride along height and width.
    pub stride: [i64; 2],
    /// Zero padding along height and width.
    pub padding: [i64; 2],
    /// Dilation along height and width.
    pub dilation: [i64; 2],
    /// Number of channel groups.
    pub groups: i64,
    /// Whether the layer has a bias.
    pub bias: bool,
}

/// A 2-D convolution layer.
#[derive(Debug)]
pub(crate) struct Conv2d {
    cfg: Conv2dConfig,
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Conv2d {
    /// Validates `cfg` and draws weight `[out, in/groups, kh, kw]` and bias
    /// from `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, `fan_in = in/groups*kh*kw`.
    pub(crate) fn new(cfg: Conv2dConfig) -> Result<Conv2d> {
        let c = &cfg;
        let bad = c.in_channels <= 0
            || c.out_channels <= 0
            || c.groups <= 0
            || c.kernel.iter().any(|&k| k <= 0)
            || c.stride.iter().any(|&s| s <= 0)
            || c.dilation.iter().any(|&d| d <= 0)
            || c.padding.iter().any(|&p| p < 0);
        if bad {
            return Err(Error::invalid(format!("conv2d: invalid configuration {cfg:?}")));
        }
        if c.in_channels % c.groups != 0 || c.out_channels % c.groups != 0 {
            return Err(Error::invalid(format!(
                "conv2d: in_channels ({}) and out_channels ({}) must be divisible by groups ({})",
                c.in_channels, c.out_channels, c.groups
            )));
        }
        let per_group = c.in_channels / c.groups;
        let fan_in = per_group * c.kernel[0] * c.kernel[1];
        let bound = init::default_uniform_bound(fan_in);
        let weight = init::uniform(&[c.out_channels, per_group, c.kernel[0], c.kernel[1]], bound)?;
        let bias = if c.bias { Some(init::uniform(&[c.out_channels], bound)?) } else { None };
        Ok(Conv2d { cfg, weight, bias })
    }
}

impl Layer for Conv2d {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        let (weight, bias) = (map(&self.weight)?, super::map_opt(map, &self.bias)?);
        Ok(Box::new(Conv2d { cfg: self.cfg, weight, bias }))
    }

    fn type_name(&self) -> &'static str {
        "Conv2d"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let size = x.size();
        let ok = (size.len() == 3 || size.len() == 4) && size[size.len() - 3] == self.cfg.in_channels;
        if !ok {
            return Err(Error::shape(format!(
                "conv2d: input of shape {} must be (N, {c}, H, W) or ({c}, H, W)",
                shape_of(x),
                c = self.cfg.in_channels
            )));
        }
        let c = &self.cfg;
        Ok(x.f_conv2d(&self.weight, self.bias.as_ref(), c.stride, c.padding, c.dilation, c.groups)?)
    }

    fn params(&self) -> Vec<(&'static str, &Tensor)> {
        let mut v = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            v.push(("bias", b));
        }
        v
    }
}
