//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `loss` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{emit, fulmen_tensor, opt_tensor_arg, tensor_arg};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::check_out;
use crate::tensor::ops;
use crate::tensor::ops::LossReduction;

/// Cross-entropy of raw `logits` (N, C) or (N, C, d...) against class indices
/// `target` (N) / (N, d...) of integer dtype, or against class probabilities
/// shaped as `logits` (`F.cross_entropy`). The result is a new tensor written
/// to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction,
/// or is BATCH_MEAN), FULMEN_CODE_DTYPE_MISMATCH (`logits` not floating, or
/// class targets not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s
/// shape does not fit `logits`), FULMEN_CODE_OUT_OF_RANGE (a class target
/// outside [0, C); inside a Trainer's run on an accelerator the call succeeds,
/// ignoring such a target, and the run fails at its next reading of values, see
/// `detect_nonfinite_loss`), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors
/// on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_cross_entropy(
    logits: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let logits = tensor_arg(logits, "logits")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::cross_entropy(&logits, &target, reduction)?)
    })
}

/// Cross-entropy with torch's options (`F.cross_entropy(logits, target, weight,
/// ignore_index=, label_smoothing=)`): `weight` (NULL for none) rescales each
/// class, targets equal to `ignore_index` count for nothing (-100 is torch's
/// default), `label_smoothing` in [0, 1] mixes the targets with the uniform
/// distribution. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction,
/// or is BATCH_MEAN; `label_smoothing` outside [0, 1]),
/// FULMEN_CODE_DTYPE_MISMATCH (logits or weight not floating, or class targets
/// not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s shape does not
/// fit the logits, or `weight` is not of shape [C]), FULMEN_CODE_OUT_OF_RANGE
/// (a class target outside [0, C) other than `ignore_index`; inside a Trainer's
/// run on an accelerator the call succeeds, ignoring such a target, and the run
/// fails at its next reading of values, see `detect_nonfinite_loss`),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_cross_entropy_with_options(
    logits: *const fulmen_tensor,
    target: *const fulmen_tensor,
    weight: *const fulmen_tensor,
    ignore_index: i64,
    label_smoothing: f64,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let logits = tensor_arg(logits, "logits")?;
        let target = tensor_arg(target, "target")?;
        let weight = opt_tensor_arg(weight, "weight")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::cross_entropy_with_options(&logits, &target, weight.as_deref(), ignore_index, label_smoothing, reduction)?)
    })
}

/// Negative log-likelihood of `log_probs` (N, C) against class indices
/// (`F.nll_loss`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction,
/// or is BATCH_MEAN), FULMEN_CODE_DTYPE_MISMATCH (`logits` not floating, or
/// class targets not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s
/// shape does not fit `logits`), FULMEN_CODE_OUT_OF_RANGE (a class target
/// outside [0, C); inside a Trainer's run on an accelerator the call succeeds,
/// ignoring such a target, and the run fails at its next reading of values, see
/// `detect_nonfinite_loss`), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors
/// on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_nll(
    log_probs: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let log_probs = tensor_arg(log_probs, "log_probs")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::nll(&log_probs, &target, reduction)?)
    })
}

/// Negative log-likelihood with torch's options (`F.nll_loss(log_probs, target,
/// weight, ignore_index=)`): `weight` (NULL for none) rescales each class;
/// targets equal to `ignore_index` count for nothing. The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction,
/// or is BATCH_MEAN; `label_smoothing` outside [0, 1]),
/// FULMEN_CODE_DTYPE_MISMATCH (logits or weight not floating, or class targets
/// not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s shape does not
/// fit the logits, or `weight` is not of shape [C]), FULMEN_CODE_OUT_OF_RANGE
/// (a class target outside [0, C) other than `ignore_index`; inside a Trainer's
/// run on an accelerator the call succeeds, ignoring such a target, and the run
/// fails at its next reading of values, see `detect_nonfinite_loss`),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_nll_with_options(
    log_probs: *const fulmen_tensor,
    target: *const fulmen_tensor,
    weight: *const fulmen_tensor,
    ignore_index: i64,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let log_probs = tensor_arg(log_probs, "log_probs")?;
        let target = tensor_arg(target, "target")?;
        let weight = opt_tensor_arg(weight, "weight")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::nll_with_options(&log_probs, &target, weight.as_deref(), ignore_index, reduction)?)
    })
}

/// Mean squared error between `input` and `target` of the same shape
/// (`F.mse_loss`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction, or is
/// BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different
/// devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_mse(
    input: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let input = tensor_arg(input, "input")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::mse(&input, &target, reduction)?)
    })
}

/// Mean absolute error between `input` and `target` of the same shape
/// (`F.l1_loss`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction, or is
/// BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different
/// devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_l1(
    input: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let input = tensor_arg(input, "input")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::l1(&input, &target, reduction)?)
    })
}

/// Binary cross-entropy of raw `logits` against targets in [0, 1] of the same
/// shape, computed stably (`F.binary_cross_entropy_with_logits`). The result is
/// a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction, or is
/// BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different
/// devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_bce_with_logits(
    logits: *const fulmen_tensor,
    target: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let logits = tensor_arg(logits, "logits")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::bce_with_logits(&logits, &target, reduction)?)
    })
}

/// Binary cross-entropy of raw logits with torch's options: `weight` (NULL for
/// none) rescales each element, `pos_weight` (NULL for none) the positive term,
/// per class along the last dimension
/// (`F.binary_cross_entropy_with_logits(logits, target, weight, pos_weight=)`).
/// The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (a tensor not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (`logits` and `target` differ, or a weight does
/// not broadcast to them), FULMEN_CODE_INVALID_ARGUMENT (`reduction` not a
/// fulmen_reduction, or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_bce_with_logits_with_options(
    logits: *const fulmen_tensor,
    target: *const fulmen_tensor,
    weight: *const fulmen_tensor,
    pos_weight: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let logits = tensor_arg(logits, "logits")?;
        let target = tensor_arg(target, "target")?;
        let weight = opt_tensor_arg(weight, "weight")?;
        let pos_weight = opt_tensor_arg(pos_weight, "pos_weight")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::bce_with_logits_with_options(&logits, &target, weight.as_deref(), pos_weight.as_deref(), reduction)?)
    })
}

/// Binary cross-entropy of probabilities `probs` in [0, 1] against targets of
/// the same shape; `weight` (NULL for none) rescales each element
/// (`F.binary_cross_entropy`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (a tensor not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (`probs` and `target` differ, or `weight` does
/// not broadcast to them), FULMEN_CODE_INVALID_ARGUMENT (`reduction` not a
/// fulmen_reduction, or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed, e.g. a
/// probability outside [0, 1]).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_bce(
    probs: *const fulmen_tensor,
    target: *const fulmen_tensor,
    weight: *const fulmen_tensor,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let probs = tensor_arg(probs, "probs")?;
        let target = tensor_arg(target, "target")?;
        let weight = opt_tensor_arg(weight, "weight")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::bce(&probs, &target, weight.as_deref(), reduction)?)
    })
}

/// Huber loss: `0.5 d^2` where `|d| < delta`, else `delta (|d| - 0.5 delta)`,
/// `d = input - target` (`F.huber_loss`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`delta` not positive and finite, or
/// `reduction` not a fulmen_reduction or BATCH_MEAN), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_huber(
    input: *const fulmen_tensor,
    target: *const fulmen_tensor,
    delta: f64,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let input = tensor_arg(input, "input")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::huber(&input, &target, delta, reduction)?)
    })
}

/// Smooth L1 loss: `0.5 d^2 / beta` where `|d| < beta`, else `|d| - 0.5 beta`
/// (`F.smooth_l1_loss`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`beta` negative or not finite, or `reduction`
/// not a fulmen_reduction or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_smooth_l1(
    input: *const fulmen_tensor,
    target: *const fulmen_tensor,
    beta: f64,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let input = tensor_arg(input, "input")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::smooth_l1(&input, &target, beta, reduction)?)
    })
}

/// KL divergence of the log-probabilities `input` from `target` (probabilities,
/// or log-probabilities with `log_target`) (`F.kl_div`);
/// FULMEN_REDUCTION_BATCH_MEAN divides the sum by the batch size, the
/// mathematically right mean. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (their shapes differ),
/// FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction),
/// FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_kl_div(
    input: *const fulmen_tensor,
    target: *const fulmen_tensor,
    log_target: bool,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let input = tensor_arg(input, "input")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::kl_div(&input, &target, log_target, reduction)?)
    })
}

/// Cosine embedding loss of pairs `x1`, `x2` (N, D) labelled 1 (similar) or -1
/// (dissimilar) in `target` (N): `1 - cos` or `max(0, cos - margin)`
/// (`F.cosine_embedding_loss`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (inputs not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (shapes that do not fit),
/// FULMEN_CODE_INVALID_ARGUMENT (a target other than 1 or -1, a bad `margin`,
/// or `reduction` not a fulmen_reduction or BATCH_MEAN), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_cosine_embedding(
    x1: *const fulmen_tensor,
    x2: *const fulmen_tensor,
    target: *const fulmen_tensor,
    margin: f64,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x1 = tensor_arg(x1, "x1")?;
        let x2 = tensor_arg(x2, "x2")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::cosine_embedding(&x1, &x2, &target, margin, reduction)?)
    })
}

/// Margin ranking loss `max(0, -target * (x1 - x2) + margin)` with `target` 1
/// or -1, shaped as the inputs (`F.margin_ranking_loss`). The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (inputs not floating),
/// FULMEN_CODE_SHAPE_MISMATCH (shapes that do not fit),
/// FULMEN_CODE_INVALID_ARGUMENT (a target other than 1 or -1, a bad `margin`,
/// or `reduction` not a fulmen_reduction or BATCH_MEAN), FULMEN_CODE_TORCH
/// (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_margin_ranking(
    x1: *const fulmen_tensor,
    x2: *const fulmen_tensor,
    target: *const fulmen_tensor,
    margin: f64,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x1 = tensor_arg(x1, "x1")?;
        let x2 = tensor_arg(x2, "x2")?;
        let target = tensor_arg(target, "target")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::margin_ranking(&x1, &x2, &target, margin, reduction)?)
    })
}

/// Connectionist temporal classification loss of `log_probs` (T, N, C) against
/// padded label sequences `targets` (N, S), with i64 `input_lengths` (N) up to
/// T and `target_lengths` (N) up to S (`F.ctc_loss`; labels past a target's
/// length, such as -1 padding, are ignored); FULMEN_REDUCTION_MEAN divides each
/// loss by its target length, then averages; `zero_infinity` zeroes impossible
/// alignments. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`log_probs` not floating, or integer
/// tensors that are not i64 or i32), FULMEN_CODE_SHAPE_MISMATCH (shapes that do
/// not fit), FULMEN_CODE_OUT_OF_RANGE (`blank`, a label or a length out of
/// range), FULMEN_CODE_INVALID_ARGUMENT (`reduction` not a fulmen_reduction, or
/// BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loss_ctc(
    log_probs: *const fulmen_tensor,
    targets: *const fulmen_tensor,
    input_lengths: *const fulmen_tensor,
    target_lengths: *const fulmen_tensor,
    blank: i64,
    zero_infinity: bool,
    reduction: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let log_probs = tensor_arg(log_probs, "log_probs")?;
        let targets = tensor_arg(targets, "targets")?;
        let input_lengths = tensor_arg(input_lengths, "input_lengths")?;
        let target_lengths = tensor_arg(target_lengths, "target_lengths")?;
        let reduction = LossReduction::from_i32(reduction)?;
        emit(out, ops::ctc(&log_probs, &targets, &input_lengths, &target_lengths, blank, zero_infinity, reduction)?)
    })
}
