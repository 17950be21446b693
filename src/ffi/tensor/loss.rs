//! Loss functions: cross-entropy, NLL, MSE, L1, BCE with logits.
use super::handle::{binary, fulmen_tensor};
use crate::error::{Error, Result};
use crate::ffi::error::fulmen_error;
use tch::{Kind, Reduction, Tensor};

/// How a loss reduces over the batch (`fulmen_reduction`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReduction {
    /// One loss per element.
    None = 0,
    /// Mean over elements (PyTorch's default).
    Mean = 1,
    /// Sum over elements.
    Sum = 2,
}

fn reduction(r: i32) -> Result<Reduction> {
    match r {
        0 => Ok(Reduction::None),
        1 => Ok(Reduction::Mean),
        2 => Ok(Reduction::Sum),
        _ => Err(Error::invalid(format!("{r} is not a fulmen_reduction (0..=2)"))),
    }
}

fn float_input(x: &Tensor, what: &str) -> Result<()> {
    if !crate::tensor::dtype::is_floating(x.f_kind()?) {
        return Err(Error::dtype(format!("{what}: input must be floating, got {:?}", x.kind())));
    }
    Ok(())
}

/// Checks class-index targets for (N, C, ...) logits: i64, shape (N, ...),
/// values in [0, C) except `ignore_index`.
/// libtorch's CPU "Target N is out of bounds" as fulmen's OutOfRange error.
fn range_error(e: tch::TchError, what: &str, logits: &Tensor) -> Error {
    let e = Error::from(e);
    if e.code != crate::error::ErrorCode::OutOfRange {
        return e;
    }
    let classes = logits.size().get(1).or(logits.size().first()).copied().unwrap_or(0);
    Error::new(e.code, format!("{what}: a target is outside [0, {classes}): {}", e.message))
}

fn class_targets(logits: &Tensor, target: &Tensor, what: &str, ignore_index: i64) -> Result<Tensor> {
    float_input(logits, what)?;
    let (ls, ts) = (logits.size(), target.size());
    if ls.is_empty() {
        return Err(Error::shape(format!("{what}: logits must have a class dimension, got shape {ls:?}")));
    }
    let mut expect = ls.clone();
    let classes = if ls.len() == 1 {
        expect.clear();
        ls[0]
    } else {
        expect.remove(1)
    };
    if ts != expect {
        return Err(Error::shape(format!("{what}: logits {ls:?} need class targets of shape {expect:?}, got {ts:?}")));
    }
    let k = target.f_kind()?;
    if k != Kind::Int64 && k != Kind::Int && k != Kind::Uint8 {
        return Err(Error::dtype(format!("{what}: class targets must be integers, got {k:?}")));
    }
    let t = target.f_to_kind(Kind::Int64)?;
    // On the CPU libtorch checks the range itself (cheaply, inside the
    // kernel; see `range_error`); elsewhere an out-of-range target is a
    // device-side assert that ruins the device context, so check first.
    if t.numel() > 0 && t.device() != tch::Device::Cpu {
        let valid = t.f_ne(ignore_index)?;
        let bad = t.f_lt(0)?.f_logical_or(&t.f_ge(classes)?)?.f_logical_and(&valid)?;
        if bad.f_any()?.f_int64_value(&[])? != 0 {
            return Err(Error::new(
                crate::error::ErrorCode::OutOfRange,
                format!("{what}: a target is outside [0, {classes})"),
            ));
        }
    }
    Ok(t)
}

/// Cross-entropy of raw `logits` (N, C) or (N, C, d...) against class
/// indices `target` (N) / (N, d...) of integer dtype, or against class
/// probabilities of the same shape as `logits`; `reduction` is a
/// `fulmen_reduction`. Same as `torch.nn.functional.cross_entropy`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a
/// fulmen_reduction), FULMEN_CODE_DTYPE_MISMATCH (`logits` not floating, or
/// class targets not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s
/// shape does not fit `logits`), FULMEN_CODE_OUT_OF_RANGE (a class target
/// outside [0, C)), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on
/// different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_cross_entropy(
    logits: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary("fulmen_loss_cross_entropy", logits, target, out, |x, t| {
        let r = self::reduction(reduction)?;
        if crate::tensor::dtype::is_floating(t.f_kind()?) {
            float_input(x, "cross_entropy")?;
            if x.size() != t.size() {
                return Err(Error::shape(format!(
                    "cross_entropy: probability targets {:?} must match logits {:?}",
                    t.size(),
                    x.size()
                )));
            }
            return Ok(x.f_cross_entropy_loss::<Tensor>(t, None, r, -100, 0.0)?);
        }
        let t = class_targets(x, t, "cross_entropy", -100)?;
        x.f_cross_entropy_loss::<Tensor>(&t, None, r, -100, 0.0).map_err(|e| range_error(e, "cross_entropy", x))
    })
}

/// Negative log-likelihood of `log_probs` (N, C) against class indices.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a
/// fulmen_reduction), FULMEN_CODE_DTYPE_MISMATCH (`log_probs` not floating, or
/// targets not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s shape
/// does not fit `log_probs`), FULMEN_CODE_OUT_OF_RANGE (a target outside
/// [0, C)), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different
/// devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_nll(
    log_probs: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary("fulmen_loss_nll", log_probs, target, out, |x, t| {
        let r = self::reduction(reduction)?;
        let t = class_targets(x, t, "nll", -100)?;
        x.f_nll_loss::<Tensor>(&t, None, r, -100).map_err(|e| range_error(e, "nll", x))
    })
}

fn same_shape_float(x: &Tensor, t: &Tensor, what: &str) -> Result<()> {
    float_input(x, what)?;
    float_input(t, what)?;
    if x.size() != t.size() {
        return Err(Error::shape(format!("{what}: input {:?} and target {:?} differ", x.size(), t.size())));
    }
    Ok(())
}

/// Mean squared error between `input` and `target` of the same shape.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_mse(
    input: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary("fulmen_loss_mse", input, target, out, |x, t| {
        same_shape_float(x, t, "mse")?;
        Ok(x.f_mse_loss(t, self::reduction(reduction)?)?)
    })
}

/// Mean absolute error between `input` and `target` of the same shape.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_l1(
    input: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary("fulmen_loss_l1", input, target, out, |x, t| {
        same_shape_float(x, t, "l1")?;
        Ok(x.f_l1_loss(t, self::reduction(reduction)?)?)
    })
}

/// Binary cross-entropy of raw `logits` against targets in [0, 1] of the
/// same shape (numerically stable, as `binary_cross_entropy_with_logits`).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`logits` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_bce_with_logits(
    logits: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    binary("fulmen_loss_bce_with_logits", logits, target, out, |x, t| {
        same_shape_float(x, t, "bce_with_logits")?;
        Ok(x.f_binary_cross_entropy_with_logits::<Tensor>(t, None, None, self::reduction(reduction)?)?)
    })
}
