//! Loss functions with torch.nn.functional's options and semantics:
//! cross-entropy and NLL (class weights, ignore_index, label smoothing),
//! BCE with and without logits (weights, pos_weight), MSE, L1, Huber,
//! smooth L1, KL divergence, cosine embedding, margin ranking, CTC.
use super::checks::{broadcast_shapes, check_floating};
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::deferred::{defer, deferring, CheckKind};
use tch::{Device, Kind, Reduction, Tensor};

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
    /// Sum divided by the batch size (dimension 0): KL divergence only,
    /// PyTorch's `reduction="batchmean"`.
    BatchMean = 3,
}

impl LossReduction {
    /// The C value, or INVALID_ARGUMENT naming it.
    pub fn from_i32(r: i32) -> Result<Self> {
        Ok(match r {
            0 => Self::None,
            1 => Self::Mean,
            2 => Self::Sum,
            3 => Self::BatchMean,
            _ => return Err(Error::invalid(format!("{r} is not a fulmen_reduction (0..=3)"))),
        })
    }

    /// libtorch's reduction; BatchMean is refused (only KL divergence has it).
    fn torch(self, what: &str) -> Result<Reduction> {
        match self {
            Self::None => Ok(Reduction::None),
            Self::Mean => Ok(Reduction::Mean),
            Self::Sum => Ok(Reduction::Sum),
            Self::BatchMean => Err(Error::invalid(format!("{what}: FULMEN_REDUCTION_BATCH_MEAN is for kl_div only"))),
        }
    }
}

fn same_shape_float(x: &Tensor, t: &Tensor, what: &str) -> Result<()> {
    check_floating(x, what)?;
    check_floating(t, what)?;
    if x.size() != t.size() {
        return Err(Error::shape(format!("{what}: input {:?} and target {:?} differ", x.size(), t.size())));
    }
    Ok(())
}

/// libtorch's CPU "Target N is out of bounds" as an OUT_OF_RANGE error
/// naming the class count.
fn range_error(e: tch::TchError, what: &str, logits: &Tensor) -> Error {
    let e = Error::from(e);
    if e.code != ErrorCode::OutOfRange {
        return e;
    }
    let classes = logits.size().get(1).or(logits.size().first()).copied().unwrap_or(0);
    Error::new(e.code, format!("{what}: a target is outside [0, {classes}): {}", e.message))
}

/// Number of classes of (N, C, ...) or (C) logits.
fn class_count(logits: &Tensor) -> i64 {
    let s = logits.size();
    if s.len() == 1 {
        s[0]
    } else {
        s.get(1).copied().unwrap_or(0)
    }
}

/// A class target outside the logits' classes, found in a training loop.
const TARGET_OUT_OF_RANGE: CheckKind =
    CheckKind { code: ErrorCode::OutOfRange, what: "a loss's class target lay outside its logits' classes" };

/// Checks class-index targets for (N, C, ...) logits: integers, shape
/// (N, ...), values in [0, C) except `ignore_index`.
fn class_targets(logits: &Tensor, target: &Tensor, what: &str, ignore_index: i64) -> Result<Tensor> {
    check_floating(logits, what)?;
    let (ls, ts) = (logits.size(), target.size());
    if ls.is_empty() {
        return Err(Error::shape(format!("{what}: logits must have a class dimension, got shape {ls:?}")));
    }
    let mut expect = ls.clone();
    if ls.len() == 1 {
        expect.clear();
    } else {
        expect.remove(1);
    }
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
    if t.numel() > 0 && t.device() != Device::Cpu {
        let classes = class_count(logits);
        let valid = t.f_ne(ignore_index)?;
        let bad = t.f_lt(0)?.f_logical_or(&t.f_ge(classes)?)?.f_logical_and(&valid)?;
        if deferring(&t) {
            // Read later by the trainer; meanwhile a bad target is ignored,
            // so the kernel cannot assert.
            defer(TARGET_OUT_OF_RANGE, &bad)?;
            return Ok(t.f_masked_fill(&bad, ignore_index)?);
        }
        if bad.f_any()?.f_int64_value(&[])? != 0 {
            return Err(Error::new(ErrorCode::OutOfRange, format!("{what}: a target is outside [0, {classes})")));
        }
    }
    Ok(t)
}

/// Checks an optional per-class weight: floating, 1-D of C entries.
fn check_class_weight(weight: Option<&Tensor>, classes: i64, what: &str) -> Result<()> {
    if let Some(w) = weight {
        check_floating(w, what)?;
        if w.size() != [classes] {
            return Err(Error::shape(format!("{what}: weight must have shape [{classes}], got {:?}", w.size())));
        }
    }
    Ok(())
}

/// Cross-entropy of raw logits against class indices or probabilities, as
/// `F.cross_entropy(logits, target, weight, ignore_index=..., label_smoothing=...)`.
pub fn cross_entropy_with_options(
    logits: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    ignore_index: i64,
    label_smoothing: f64,
    reduction: LossReduction,
) -> Result<Tensor> {
    let r = reduction.torch("cross_entropy")?;
    if !(0.0..=1.0).contains(&label_smoothing) {
        return Err(Error::invalid(format!("cross_entropy: label_smoothing = {label_smoothing}, must be in [0, 1]")));
    }
    check_floating(logits, "cross_entropy")?;
    check_class_weight(weight, class_count(logits), "cross_entropy")?;
    if crate::tensor::dtype::is_floating(target.f_kind()?) {
        if logits.size() != target.size() {
            return Err(Error::shape(format!(
                "cross_entropy: probability targets {:?} must match logits {:?}",
                target.size(),
                logits.size()
            )));
        }
        return Ok(logits.f_cross_entropy_loss(target, weight, r, ignore_index, label_smoothing)?);
    }
    let t = class_targets(logits, target, "cross_entropy", ignore_index)?;
    logits
        .f_cross_entropy_loss(&t, weight, r, ignore_index, label_smoothing)
        .map_err(|e| range_error(e, "cross_entropy", logits))
}

/// Cross-entropy with PyTorch's defaults (`F.cross_entropy(logits, target)`).
pub fn cross_entropy(logits: &Tensor, target: &Tensor, reduction: LossReduction) -> Result<Tensor> {
    cross_entropy_with_options(logits, target, None, -100, 0.0, reduction)
}

/// Negative log-likelihood, as `F.nll_loss(log_probs, target, weight, ignore_index=...)`.
pub fn nll_with_options(
    log_probs: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    ignore_index: i64,
    reduction: LossReduction,
) -> Result<Tensor> {
    let r = reduction.torch("nll")?;
    let t = class_targets(log_probs, target, "nll", ignore_index)?;
    check_class_weight(weight, class_count(log_probs), "nll")?;
    log_probs.f_nll_loss(&t, weight, r, ignore_index).map_err(|e| range_error(e, "nll", log_probs))
}

/// Negative log-likelihood with PyTorch's defaults.
pub fn nll(log_probs: &Tensor, target: &Tensor, reduction: LossReduction) -> Result<Tensor> {
    nll_with_options(log_probs, target, None, -100, reduction)
}

/// Mean squared error (`F.mse_loss`).
pub fn mse(input: &Tensor, target: &Tensor, reduction: LossReduction) -> Result<Tensor> {
    same_shape_float(input, target, "mse")?;
    Ok(input.f_mse_loss(target, reduction.torch("mse")?)?)
}

/// Mean absolute error (`F.l1_loss`).
pub fn l1(input: &Tensor, target: &Tensor, reduction: LossReduction) -> Result<Tensor> {
    same_shape_float(input, target, "l1")?;
    Ok(input.f_l1_loss(target, reduction.torch("l1")?)?)
}

fn check_broadcast_to(w: Option<&Tensor>, shape: &[i64], what: &str) -> Result<()> {
    if let Some(w) = w {
        check_floating(w, what)?;
        if broadcast_shapes(&w.size(), shape).map_or(true, |s| s != shape) {
            return Err(Error::shape(format!("{what}: {:?} does not broadcast to {shape:?}", w.size())));
        }
    }
    Ok(())
}

/// Binary cross-entropy of raw logits, as
/// `F.binary_cross_entropy_with_logits(logits, target, weight, pos_weight=...)`.
pub fn bce_with_logits_with_options(
    logits: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    pos_weight: Option<&Tensor>,
    reduction: LossReduction,
) -> Result<Tensor> {
    same_shape_float(logits, target, "bce_with_logits")?;
    check_broadcast_to(weight, &logits.size(), "bce_with_logits weight")?;
    check_broadcast_to(pos_weight, &logits.size(), "bce_with_logits pos_weight")?;
    Ok(logits.f_binary_cross_entropy_with_logits(target, weight, pos_weight, reduction.torch("bce_with_logits")?)?)
}

/// Binary cross-entropy of raw logits with PyTorch's defaults.
pub fn bce_with_logits(logits: &Tensor, target: &Tensor, reduction: LossReduction) -> Result<Tensor> {
    bce_with_logits_with_options(logits, target, None, None, reduction)
}

/// Binary cross-entropy of probabilities in [0, 1] (`F.binary_cross_entropy`).
pub fn bce(probs: &Tensor, target: &Tensor, weight: Option<&Tensor>, reduction: LossReduction) -> Result<Tensor> {
    same_shape_float(probs, target, "bce")?;
    check_broadcast_to(weight, &probs.size(), "bce weight")?;
    Ok(probs.f_binary_cross_entropy(target, weight, reduction.torch("bce")?)?)
}

/// Huber loss: quadratic below `delta`, linear above (`F.huber_loss`).
pub fn huber(input: &Tensor, target: &Tensor, delta: f64, reduction: LossReduction) -> Result<Tensor> {
    same_shape_float(input, target, "huber")?;
    if !(delta > 0.0 && delta.is_finite()) {
        return Err(Error::invalid(format!("huber: delta = {delta}, must be positive and finite")));
    }
    Ok(input.f_huber_loss(target, reduction.torch("huber")?, delta)?)
}

/// Smooth L1 loss: quadratic below `beta` (divided by it), linear above
/// (`F.smooth_l1_loss`).
pub fn smooth_l1(input: &Tensor, target: &Tensor, beta: f64, reduction: LossReduction) -> Result<Tensor> {
    same_shape_float(input, target, "smooth_l1")?;
    if !(beta >= 0.0 && beta.is_finite()) {
        return Err(Error::invalid(format!("smooth_l1: beta = {beta}, must be non-negative and finite")));
    }
    Ok(input.f_smooth_l1_loss(target, reduction.torch("smooth_l1")?, beta)?)
}

/// KL divergence of log-probabilities `input` from `target` (probabilities,
/// or log-probabilities with `log_target`) (`F.kl_div`); BatchMean divides
/// the sum by the batch size.
pub fn kl_div(input: &Tensor, target: &Tensor, log_target: bool, reduction: LossReduction) -> Result<Tensor> {
    same_shape_float(input, target, "kl_div")?;
    if reduction != LossReduction::BatchMean {
        return Ok(input.f_kl_div(target, reduction.torch("kl_div")?, log_target)?);
    }
    let sum = input.f_kl_div(target, Reduction::Sum, log_target)?;
    match input.size().first() {
        Some(n) => Ok(sum.f_div_scalar(*n as f64)?),
        None => Ok(sum),
    }
}

fn pair_with_labels(x1: &Tensor, x2: &Tensor, target: &Tensor, what: &str) -> Result<()> {
    check_floating(x1, what)?;
    check_floating(x2, what)?;
    if x1.size() != x2.size() {
        return Err(Error::shape(format!("{what}: inputs {:?} and {:?} differ", x1.size(), x2.size())));
    }
    if target.numel() > 0 {
        let bad = target.f_ne(1)?.f_logical_and(&target.f_ne(-1)?)?.f_any()?.f_int64_value(&[])?;
        if bad != 0 {
            return Err(Error::invalid(format!("{what}: target values must be 1 or -1")));
        }
    }
    Ok(())
}

/// Cosine embedding loss of pairs (N, D) labelled 1 (similar) or -1
/// (`F.cosine_embedding_loss`).
pub fn cosine_embedding(
    x1: &Tensor,
    x2: &Tensor,
    target: &Tensor,
    margin: f64,
    reduction: LossReduction,
) -> Result<Tensor> {
    pair_with_labels(x1, x2, target, "cosine_embedding")?;
    let n = x1.size();
    let want: Vec<i64> = if n.len() == 2 { vec![n[0]] } else { vec![] };
    if n.is_empty() || n.len() > 2 || target.size() != want {
        return Err(Error::shape(format!(
            "cosine_embedding: inputs (N, D) or (D) with a target of shape {want:?}, got {n:?} and {:?}",
            target.size()
        )));
    }
    if !(-1.0..=1.0).contains(&margin) {
        return Err(Error::invalid(format!("cosine_embedding: margin = {margin}, must be in [-1, 1]")));
    }
    Ok(Tensor::f_cosine_embedding_loss(x1, x2, target, margin, reduction.torch("cosine_embedding")?)?)
}

/// Margin ranking loss `max(0, -target * (x1 - x2) + margin)`, target 1 or
/// -1 (`F.margin_ranking_loss`).
pub fn margin_ranking(
    x1: &Tensor,
    x2: &Tensor,
    target: &Tensor,
    margin: f64,
    reduction: LossReduction,
) -> Result<Tensor> {
    pair_with_labels(x1, x2, target, "margin_ranking")?;
    if target.size() != x1.size() {
        return Err(Error::shape(format!(
            "margin_ranking: target {:?} must match the inputs {:?}",
            target.size(),
            x1.size()
        )));
    }
    Ok(Tensor::f_margin_ranking_loss(x1, x2, target, margin, reduction.torch("margin_ranking")?)?)
}

fn lengths(t: &Tensor, n: i64, bound: i64, what: &str) -> Result<()> {
    let k = t.f_kind()?;
    if k != Kind::Int64 && k != Kind::Int {
        return Err(Error::dtype(format!("ctc: {what} must be i64 or i32, got {k:?}")));
    }
    if t.size() != [n] {
        return Err(Error::shape(format!("ctc: {what} must have shape [{n}], got {:?}", t.size())));
    }
    if n > 0 {
        let (lo, hi) = (t.f_min()?.f_int64_value(&[])?, t.f_max()?.f_int64_value(&[])?);
        if lo < 0 || hi > bound {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("ctc: {what} span [{lo}, {hi}], allowed [0, {bound}]"),
            ));
        }
    }
    Ok(())
}

/// Connectionist temporal classification loss of `log_probs` (T, N, C)
/// against padded `targets` (N, S) with per-sample lengths (`F.ctc_loss`);
/// Mean divides each loss by its target length, then averages.
pub fn ctc(
    log_probs: &Tensor,
    targets: &Tensor,
    input_lengths: &Tensor,
    target_lengths: &Tensor,
    blank: i64,
    zero_infinity: bool,
    reduction: LossReduction,
) -> Result<Tensor> {
    check_floating(log_probs, "ctc")?;
    let ls = log_probs.size();
    let ts = targets.size();
    if ls.len() != 3 || ts.len() != 2 || ts[0] != ls[1] {
        return Err(Error::shape(format!("ctc: log_probs (T, N, C) and targets (N, S), got {ls:?} and {ts:?}")));
    }
    let (t_max, n, classes) = (ls[0], ls[1], ls[2]);
    if blank < 0 || blank >= classes {
        return Err(Error::new(ErrorCode::OutOfRange, format!("ctc: blank = {blank} outside [0, {classes})")));
    }
    lengths(input_lengths, n, t_max, "input_lengths")?;
    lengths(target_lengths, n, ts[1], "target_lengths")?;
    let k = targets.f_kind()?;
    if k != Kind::Int64 && k != Kind::Int {
        return Err(Error::dtype(format!("ctc: targets must be i64 or i32, got {k:?}")));
    }
    // Only labels within each target's length count: torch ignores the
    // padding after them (often -1).
    let steps =
        crate::tensor::device::to_device_of(&Tensor::f_arange(ts[1], (Kind::Int64, tch::Device::Cpu))?, targets)?;
    let lengths = crate::tensor::device::to_device_of(&target_lengths.f_to_kind(Kind::Int64)?, targets)?;
    let within = steps.f_unsqueeze(0)?.f_lt_tensor(&lengths.f_unsqueeze(1)?)?;
    let labels = targets.f_masked_select(&within)?;
    if labels.numel() > 0 {
        let (lo, hi) = (labels.f_min()?.f_int64_value(&[])?, labels.f_max()?.f_int64_value(&[])?);
        if lo < 0 || hi >= classes {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("ctc: target labels span [{lo}, {hi}], classes are [0, {classes})"),
            ));
        }
    }
    let il = input_lengths.f_to_kind(Kind::Int64)?;
    let tl = target_lengths.f_to_kind(Kind::Int64)?;
    Ok(Tensor::f_ctc_loss_tensor(log_probs, targets, &il, &tl, blank, reduction.torch("ctc")?, zero_infinity)?)
}
