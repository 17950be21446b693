//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `activation` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{emit, fulmen_tensor, tensor_arg};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::check_out;
use crate::tensor::ops;

/// `out = max(x, 0)`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_relu(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::relu(&x)?)
    })
}

/// `out = x if x > 0 else slope * x`. The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_leaky_relu(
    x: *const fulmen_tensor,
    slope: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::leaky_relu(&x, slope)?)
    })
}

/// Logistic sigmoid. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sigmoid(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::sigmoid(&x)?)
    })
}

/// Hyperbolic tangent. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_tanh(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::tanh(&x)?)
    })
}

/// GELU (exact, erf form). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (an i64 or i32 tensor), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. another integer or bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_gelu(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::gelu(&x)?)
    })
}

/// SiLU (swish): `x * sigmoid(x)`. The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (an i64 or i32 tensor), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. another integer or bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_silu(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::silu(&x)?)
    })
}

/// Softmax along `dim` (negative counts from the end). The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch
/// failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_softmax(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::softmax(&x, dim)?)
    })
}

/// Log-softmax along `dim` (negative counts from the end). The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch
/// failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_log_softmax(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::log_softmax(&x, dim)?)
    })
}

/// `log(1 + exp(beta * x)) / beta`, and `x` where `beta * x` exceeds
/// `threshold` (`F.softplus`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`beta` zero or not finite),
/// FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_softplus(
    x: *const fulmen_tensor,
    beta: f64,
    threshold: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::softplus(&x, beta, threshold)?)
    })
}

/// `x * tanh(softplus(x))` (`F.mish`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_mish(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::mish(&x)?)
    })
}

/// `x * relu6(x + 3) / 6` (`F.hardswish`). The result is a new tensor written
/// to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_hardswish(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::hardswish(&x)?)
    })
}

/// `relu6(x + 3) / 6` (`F.hardsigmoid`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_hardsigmoid(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::hardsigmoid(&x)?)
    })
}

/// `min(max(x, 0), 6)` (`F.relu6`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_relu6(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::relu6(&x)?)
    })
}

/// `x` above 0, else `(exp(x) - 1) * alpha` (`F.elu`). The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_elu(
    x: *const fulmen_tensor,
    alpha: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::elu(&x, alpha)?)
    })
}

/// ELU scaled by the self-normalising constants (`F.selu`). The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_selu(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::selu(&x)?)
    })
}

/// Gated linear unit: with `a, b` the halves of `dim`, `a * sigmoid(b)`
/// (`F.glu`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range),
/// FULMEN_CODE_SHAPE_MISMATCH (the size of `dim` is odd), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_glu(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::glu(&x, dim)?)
    })
}

/// GELU with the tanh approximation (`F.gelu(x, approximate="tanh")`, GPT-2's).
/// The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_gelu_tanh(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::gelu_tanh(&x)?)
    })
}

/// `x` above 0, else `weight * x`, `weight` holding one slope or one per
/// channel (dimension 1) (`F.prelu`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`weight` holds neither 1 nor
/// channel-count values), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_prelu(
    x: *const fulmen_tensor,
    weight: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let weight = tensor_arg(weight, "weight")?;
        emit(out, ops::prelu(&x, &weight)?)
    })
}

/// `log(sigmoid(x))`, computed stably (`F.logsigmoid`). The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_logsigmoid(
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::logsigmoid(&x)?)
    })
}
