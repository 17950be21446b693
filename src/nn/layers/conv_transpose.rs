//! `ConvTranspose1d` and `ConvTranspose2d`: transposed convolution over
//! `(N, C, L)` or `(N, C, H, W)` input (or the same without `N`).
use super::conv::check_conv;
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use crate::nn::init;
use tch::Tensor;

/// Settings of an `N`-d transposed convolution, as PyTorch's
/// `nn.ConvTranspose1d` / `nn.ConvTranspose2d` take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTransposeConfig<const N: usize> {
    /// Input channels.
    pub in_channels: i64,
    /// Output channels.
    pub out_channels: i64,
    /// Kernel size per spatial dimension.
    pub kernel: [i64; N],
    /// Stride per spatial dimension.
    pub stride: [i64; N],
    /// Implicit zero padding removed from each side of the output.
    pub padding: [i64; N],
    /// Extra size added to one side of the output.
    pub output_padding: [i64; N],
    /// Dilation per spatial dimension.
    pub dilation: [i64; N],
    /// Number of channel groups.
    pub groups: i64,
    /// Whether the layer has a bias.
    pub bias: bool,
}

/// An `N`-d transposed convolution layer (`N` is 1 or 2): weight
/// `[in, out / groups, k...]`.
#[derive(Debug)]
pub(crate) struct ConvTranspose<const N: usize> {
    cfg: ConvTransposeConfig<N>,
    weight: Tensor,
    bias: Option<Tensor>,
}

impl<const N: usize> ConvTranspose<N> {
    const NAME: &'static str = if N == 1 { "conv_transpose1d" } else { "conv_transpose2d" };

    /// Validates `cfg` (PyTorch's rules, and output_padding smaller than
    /// the stride or the dilation) and draws weight and bias from
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, `fan_in = out/groups * prod(k)`
    /// (PyTorch reads the fan-in from the weight's second dimension).
    pub(crate) fn new(cfg: ConvTransposeConfig<N>) -> Result<Self> {
        let c = &cfg;
        if !(1..=2).contains(&N) {
            return Err(Error::invalid(format!("conv_transpose: {N} spatial dimensions, must be 1 or 2")));
        }
        check_conv(Self::NAME, c.in_channels, c.out_channels, c.groups, &c.kernel, &c.stride, &c.dilation, &c.padding)?;
        if c.output_padding.iter().any(|&p| p < 0) {
            return Err(Error::invalid(format!(
                "{}: output_padding {:?} must be non-negative",
                Self::NAME,
                c.output_padding
            )));
        }
        let too_big = (0..N).any(|i| c.output_padding[i] >= c.stride[i] && c.output_padding[i] >= c.dilation[i]);
        if too_big {
            return Err(Error::invalid(format!(
                "{}: output_padding {:?} must be smaller than the stride {:?} or the dilation {:?}",
                Self::NAME,
                c.output_padding,
                c.stride,
                c.dilation
            )));
        }
        let per_group = c.out_channels / c.groups;
        let fan_in = c.kernel.iter().try_fold(per_group, |a, k| a.checked_mul(*k));
        let fan_in = fan_in
            .filter(|f| f.checked_mul(c.in_channels).is_some())
            .ok_or_else(|| Error::invalid(format!("{}: the kernel is too large", Self::NAME)))?;
        let bound = init::default_uniform_bound(fan_in);
        let mut shape = vec![c.in_channels, per_group];
        shape.extend(c.kernel);
        let weight = init::uniform(&shape, bound)?;
        let bias = if c.bias { Some(init::uniform(&[c.out_channels], bound)?) } else { None };
        Ok(ConvTranspose { cfg, weight, bias })
    }
}

impl<const N: usize> Layer for ConvTranspose<N> {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        let (weight, bias) = (map(&self.weight)?, super::map_opt(map, &self.bias)?);
        Ok(Box::new(ConvTranspose { cfg: self.cfg, weight, bias }))
    }

    fn type_name(&self) -> &'static str {
        if N == 1 {
            "ConvTranspose1d"
        } else {
            "ConvTranspose2d"
        }
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let size = x.size();
        let c = &self.cfg;
        let ok = (size.len() == N + 1 || size.len() == N + 2) && size[size.len() - N - 1] == c.in_channels;
        if !ok {
            let spatial = if N == 1 { "L" } else { "H, W" };
            return Err(Error::shape(format!(
                "{}: input of shape {} must be (N, {c}, {spatial}) or ({c}, {spatial})",
                Self::NAME,
                shape_of(x),
                c = c.in_channels
            )));
        }
        let b = self.bias.as_ref();
        let (s, p, o, d) =
            (c.stride.as_slice(), c.padding.as_slice(), c.output_padding.as_slice(), c.dilation.as_slice());
        Ok(if N == 1 {
            x.f_conv_transpose1d(&self.weight, b, s, p, o, c.groups, d)?
        } else {
            x.f_conv_transpose2d(&self.weight, b, s, p, o, c.groups, d)?
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
