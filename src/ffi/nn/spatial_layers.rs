//! Constructors of the layers for modern CNNs: Conv3d, ConvTranspose1d/2d,
//! InstanceNorm1d/2d, the adaptive pools and Upsample.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::nn::gen_options::{fulmen_conv3d_options, fulmen_conv_transpose_options};
use crate::ffi::nn::model::{emit_model, fulmen_model};
use crate::ffi::tensor::handle::i64_list;
use crate::nn::{ConvConfig, ConvTransposeConfig, Module};

fn options<'a, T>(p: *const T) -> Result<&'a T> {
    // SAFETY: the callers pass NULL or a pointer to a valid options struct.
    unsafe { p.as_ref() }.ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))
}

/// Creates `nn.Conv3d(in_channels, out_channels, ...)` with `options` over
/// `(N, C, D, H, W)` or `(C, D, H, W)` input; weight `[out, in / groups,
/// kd, kh, kw]` and bias drawn as PyTorch draws them.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`options` is NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (a channel count, kernel, stride, dilation
/// or groups not positive, a negative padding, channels not divisible by
/// groups, a kernel too large), FULMEN_CODE_TORCH (the weights cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_conv3d_new(
    in_channels: i64,
    out_channels: i64,
    options: *const fulmen_conv3d_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let o = self::options(options)?;
        let cfg = ConvConfig::<3> {
            in_channels,
            out_channels,
            kernel: o.kernel,
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
            bias: o.bias,
        };
        emit_model(out, Module::conv3d(cfg))
    })
}

/// Creates `nn.ConvTranspose1d` or `nn.ConvTranspose2d(in_channels,
/// out_channels, ...)` (by `options->dims`) over `(N, C, L...)` or
/// `(C, L...)` input; weight `[in, out / groups, k...]` and bias drawn as
/// PyTorch draws them.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`options` is NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (dims not 1 or 2, a channel count, kernel,
/// stride, dilation or groups not positive, a negative padding, channels
/// not divisible by groups, an output_padding not smaller than the stride
/// or the dilation), FULMEN_CODE_TORCH (the weights cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_conv_transpose_new(
    in_channels: i64,
    out_channels: i64,
    options: *const fulmen_conv_transpose_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let o = self::options(options)?;
        match o.dims {
            1 => emit_model(
                out,
                Module::conv_transpose(ConvTransposeConfig::<1> {
                    in_channels,
                    out_channels,
                    kernel: [o.kernel[0]],
                    stride: [o.stride[0]],
                    padding: [o.padding[0]],
                    output_padding: [o.output_padding[0]],
                    dilation: [o.dilation[0]],
                    groups: o.groups,
                    bias: o.bias,
                }),
            ),
            2 => emit_model(
                out,
                Module::conv_transpose(ConvTransposeConfig::<2> {
                    in_channels,
                    out_channels,
                    kernel: o.kernel,
                    stride: o.stride,
                    padding: o.padding,
                    output_padding: o.output_padding,
                    dilation: o.dilation,
                    groups: o.groups,
                    bias: o.bias,
                }),
            ),
            d => Err(Error::invalid(format!("conv_transpose: dims is {d}, must be 1 or 2"))),
        }
    })
}

/// Creates `nn.InstanceNorm1d` (`dims` 1: `(N, C, L)` or `(C, L)` input)
/// or `nn.InstanceNorm2d` (`dims` 2) of `num_features` channels. `affine`
/// adds weight (ones) and bias (zeros); `track_running_stats` adds the
/// buffers running_mean, running_var and num_batches_tracked, updated in
/// training and used in evaluation mode (PyTorch's defaults: eps 1e-5,
/// momentum 0.1, both flags false).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (dims not 1 or 2, num_features not
/// positive, eps negative, momentum outside [0, 1]).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_instance_norm_new(
    dims: usize,
    num_features: i64,
    eps: f64,
    momentum: f64,
    affine: bool,
    track_running_stats: bool,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        emit_model(out, Module::instance_norm(dims, num_features, eps, momentum, affine, track_running_stats))
    })
}

unsafe fn adaptive(max: bool, output_size: *const i64, ndim: usize, out: *mut *mut fulmen_model) -> Result<()> {
    if !(1..=2).contains(&ndim) {
        return Err(Error::invalid(format!("adaptive_pool: {ndim} output sizes, must be 1 or 2")));
    }
    emit_model(out, Module::adaptive_pool(max, i64_list(output_size, ndim, "output_size")?))
}

/// Creates `nn.AdaptiveAvgPool1d` (one size) or `nn.AdaptiveAvgPool2d`
/// (two sizes) pooling to `output_size[0..ndim]`; -1 keeps that input size.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`output_size` NULL with `ndim` > 0),
/// FULMEN_CODE_INVALID_ARGUMENT (`ndim` not 1 or 2, a size 0 or below -1).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_adaptive_avg_pool_new(
    output_size: *const i64,
    ndim: usize,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| adaptive(false, output_size, ndim, out))
}

/// Creates `nn.AdaptiveMaxPool1d` (one size) or `nn.AdaptiveMaxPool2d`
/// (two sizes) pooling to `output_size[0..ndim]`; -1 keeps that input size.
/// The forward gives the maxima (not their indices).
///
/// Errors: as `fulmen_model_adaptive_avg_pool_new`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_adaptive_max_pool_new(
    output_size: *const i64,
    ndim: usize,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| adaptive(true, output_size, ndim, out))
}

/// Creates `nn.Upsample(size | scale_factor, mode, align_corners)`: give
/// `size[0..size_len]` (one size per spatial dimension, or one for all) or
/// `scale_factor` (the other empty / 0). `mode`: "nearest", "linear",
/// "bilinear", "bicubic" or "trilinear" (NULL for "nearest"). The forward
/// is `fulmen_tensor_interpolate`.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`size` NULL with `size_len` > 0),
/// FULMEN_CODE_INVALID_ARGUMENT (mode unknown or not UTF-8, both or neither
/// of size and scale_factor, more than 3 sizes, a size not positive, a scale
/// not positive and finite, align_corners with "nearest").
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_upsample_new(
    size: *const i64,
    size_len: usize,
    scale_factor: f64,
    mode: *const std::ffi::c_char,
    align_corners: bool,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let mode = if mode.is_null() { "nearest" } else { str_arg(mode, "mode")? };
        if size_len > 3 {
            return Err(Error::invalid(format!("upsample: {size_len} sizes, at most 3")));
        }
        let size = i64_list(size, size_len, "size")?;
        emit_model(out, Module::upsample(size, scale_factor, mode, align_corners))
    })
}
