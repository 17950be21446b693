//! `torch.nn.init` from C, on existing tensors (parameters from
//! `fulmen_model_state_dict_get`): the same seed gives PyTorch's values.
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::write_out;
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use crate::nn::init_fns::{self, FanMode};
use std::ffi::c_char;

/// `nn.init.calculate_gain(nonlinearity, param)`: "linear", "conv1d",
/// "conv2d", "conv3d", "conv_transpose1d/2d/3d", "sigmoid", "tanh", "relu",
/// "leaky_relu" (`param` its negative slope, NaN for 0.01) or "selu".
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown nonlinearity, one not
/// UTF-8, or a slope that is not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_init_calculate_gain(
    nonlinearity: *const c_char,
    param: f64,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(nonlinearity, "nonlinearity")?;
        let p = if param.is_nan() { None } else { Some(param) };
        write_out(out, "out", init_fns::calculate_gain(name, p)?)
    })
}

/// `nn.init.xavier_uniform_(tensor, gain)` under no_grad.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (fewer than 2 dimensions),
/// FULMEN_CODE_DTYPE_MISMATCH (not floating), FULMEN_CODE_INVALID_ARGUMENT
/// (gain not finite).
/// Thread rules: the caller keeps other threads off `tensor` meanwhile.
#[no_mangle]
pub unsafe extern "C" fn fulmen_init_xavier_uniform_(tensor: *const fulmen_tensor, gain: f64) -> *mut fulmen_error {
    guard!(|| init_fns::xavier_uniform_(&*tensor_arg(tensor, "tensor")?, gain))
}

/// `nn.init.xavier_normal_(tensor, gain)` under no_grad.
///
/// Errors: as `fulmen_init_xavier_uniform_`.
/// Thread rules: as `fulmen_init_xavier_uniform_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_init_xavier_normal_(tensor: *const fulmen_tensor, gain: f64) -> *mut fulmen_error {
    guard!(|| init_fns::xavier_normal_(&*tensor_arg(tensor, "tensor")?, gain))
}

/// `nn.init.kaiming_uniform_(tensor, a, mode, nonlinearity)` under
/// no_grad: `a` is leaky_relu's negative slope, `mode` a `fulmen_fan_mode`,
/// `nonlinearity` as for `fulmen_init_calculate_gain` (PyTorch's default
/// is "leaky_relu"). A tensor with no elements is left alone.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (fewer than 2 dimensions),
/// FULMEN_CODE_DTYPE_MISMATCH (not floating), FULMEN_CODE_INVALID_ARGUMENT
/// (an unknown mode or nonlinearity).
/// Thread rules: as `fulmen_init_xavier_uniform_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_init_kaiming_uniform_(
    tensor: *const fulmen_tensor,
    a: f64,
    mode: i32,
    nonlinearity: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (mode, name) = (FanMode::from_i32(mode)?, str_arg(nonlinearity, "nonlinearity")?);
        init_fns::kaiming_uniform_(&*tensor_arg(tensor, "tensor")?, a, mode, name)
    })
}

/// `nn.init.kaiming_normal_(tensor, a, mode, nonlinearity)` under no_grad.
///
/// Errors: as `fulmen_init_kaiming_uniform_`.
/// Thread rules: as `fulmen_init_xavier_uniform_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_init_kaiming_normal_(
    tensor: *const fulmen_tensor,
    a: f64,
    mode: i32,
    nonlinearity: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (mode, name) = (FanMode::from_i32(mode)?, str_arg(nonlinearity, "nonlinearity")?);
        init_fns::kaiming_normal_(&*tensor_arg(tensor, "tensor")?, a, mode, name)
    })
}

/// `nn.init.orthogonal_(tensor, gain)` under no_grad (rows: dimension 0,
/// columns: the others flattened).
///
/// Errors: as `fulmen_init_xavier_uniform_`, and FULMEN_CODE_TORCH (the QR
/// decomposition failed).
/// Thread rules: as `fulmen_init_xavier_uniform_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_init_orthogonal_(tensor: *const fulmen_tensor, gain: f64) -> *mut fulmen_error {
    guard!(|| init_fns::orthogonal_(&*tensor_arg(tensor, "tensor")?, gain))
}

/// `nn.init.trunc_normal_(tensor, mean, std, a, b)` under no_grad, by
/// PyTorch 2.13's rejection sampling (gives up after 10,000 rounds).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not floating),
/// FULMEN_CODE_INVALID_ARGUMENT (arguments not finite, std <= 0, a >= b, or
/// no sample fell in [a, b] in 10,000 rounds).
/// Thread rules: as `fulmen_init_xavier_uniform_`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_init_trunc_normal_(
    tensor: *const fulmen_tensor,
    mean: f64,
    std: f64,
    a: f64,
    b: f64,
) -> *mut fulmen_error {
    guard!(|| init_fns::trunc_normal_(&*tensor_arg(tensor, "tensor")?, mean, std, a, b))
}
