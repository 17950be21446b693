//! `Conv1d`, `Conv2d` and `Conv3d`: convolution over `(N, C, L)`,
//! `(N, C, H, W)` or `(N, C, D, H, W)` input (or the same without `N`), one
//! generic layer for the three.
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use crate::nn::init;
use tch::Tensor;

/// Settings of an `N`-d convolution, as PyTorch's `nn.Conv1d` /
/// `nn.Conv2d` / `nn.Conv3d` take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvConfig<const N: usize> {
    /// Input channels.
    pub in_channels: i64,
    /// Output channels.
    pub out_channels: i64,
    /// Kernel size per spatial dimension.
    pub kernel: [i64; N],
    /// Stride per spatial dimension.
    pub stride: [i64; N],
    /// Zero padding per spatial dimension.
    pub padding: [i64; N],
    /// Dilation per spatial dimension.
    pub dilation: [i64; N],
    /// Number of channel groups.
    pub groups: i64,
    /// Whether the layer has a bias.
    pub bias: bool,
}

/// The 2-D settings.
pub(crate) type Conv2dConfig = ConvConfig<2>;

/// An `N`-d convolution layer (`N` is 1, 2 or 3).
#[derive(Debug)]
pub(crate) struct Conv<const N: usize> {
    cfg: ConvConfig<N>,
    weight: Tensor,
    bias: Option<Tensor>,
}

/// A 2-D convolution layer.
pub(crate) type Conv2d = Conv<2>;

/// The checks PyTorch makes on every convolution's settings: positive
/// channels, groups, kernel, stride and dilation, non-negative padding, and
/// channels divisible by groups.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_conv(
    name: &str,
    in_channels: i64,
    out_channels: i64,
    groups: i64,
    kernel: &[i64],
    stride: &[i64],
    dilation: &[i64],
    padding: &[i64],
) -> Result<()> {
    let positive = |v: &[i64]| v.iter().all(|&x| x > 0);
    let ok = in_channels > 0
        && out_channels > 0
        && groups > 0
        && positive(kernel)
        && positive(stride)
        && positive(dilation)
        && padding.iter().all(|&p| p >= 0);
    if !ok {
        return Err(Error::invalid(format!(
            "{name}: channels ({in_channels}, {out_channels}), groups ({groups}), kernel {kernel:?}, stride \
             {stride:?} and dilation {dilation:?} must be positive, padding {padding:?} non-negative"
        )));
    }
    if in_channels % groups != 0 || out_channels % groups != 0 {
        return Err(Error::invalid(format!(
            "{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})"
        )));
    }
    Ok(())
}

impl<const N: usize> Conv<N> {
    const NAME: &'static str = match N {
        1 => "conv1d",
        2 => "conv2d",
        _ => "conv3d",
    };

    /// Validates `cfg` and draws weight `[out, in/groups, k...]` and bias
    /// from `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, `fan_in = in/groups*prod(k)`.
    pub(crate) fn new(cfg: ConvConfig<N>) -> Result<Conv<N>> {
        let c = &cfg;
        check_conv(Self::NAME, c.in_channels, c.out_channels, c.groups, &c.kernel, &c.stride, &c.dilation, &c.padding)?;
        let per_group = c.in_channels / c.groups;
        let fan_in = c.kernel.iter().try_fold(per_group, |a, k| a.checked_mul(*k));
        let fan_in = fan_in.ok_or_else(|| Error::invalid(format!("{}: the kernel is too large", Self::NAME)))?;
        let bound = init::default_uniform_bound(fan_in);
        let mut shape = vec![c.out_channels, per_group];
        shape.extend(c.kernel);
        let weight = init::uniform(&shape, bound)?;
        let bias = if c.bias { Some(init::uniform(&[c.out_channels], bound)?) } else { None };
        Ok(Conv { cfg, weight, bias })
    }
}

impl<const N: usize> Layer for Conv<N> {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        let (weight, bias) = (map(&self.weight)?, super::map_opt(map, &self.bias)?);
        Ok(Box::new(Conv { cfg: self.cfg, weight, bias }))
    }

    fn type_name(&self) -> &'static str {
        match N {
            1 => "Conv1d",
            2 => "Conv2d",
            _ => "Conv3d",
        }
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let size = x.size();
        let ok = (size.len() == N + 1 || size.len() == N + 2) && size[size.len() - N - 1] == self.cfg.in_channels;
        if !ok {
            let spatial = match N {
                1 => "L",
                2 => "H, W",
                _ => "D, H, W",
            };
            return Err(Error::shape(format!(
                "{}: input of shape {} must be (N, {c}, {spatial}) or ({c}, {spatial})",
                Self::NAME,
                shape_of(x),
                c = self.cfg.in_channels
            )));
        }
        let c = &self.cfg;
        let b = self.bias.as_ref();
        let (s, p, d) = (c.stride.as_slice(), c.padding.as_slice(), c.dilation.as_slice());
        Ok(match N {
            1 => x.f_conv1d(&self.weight, b, s, p, d, c.groups)?,
            2 => x.f_conv2d(&self.weight, b, s, p, d, c.groups)?,
            _ => x.f_conv3d(&self.weight, b, s, p, d, c.groups)?,
        })
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        let mut v = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            v.push(("bias", b));
        }
        v
    }
}
