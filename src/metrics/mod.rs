//! Metrics that accumulate over an epoch on the predictions' device and
//! compute at its end, as torchmetrics does: accuracy, precision, recall,
//! F1 and AUROC for binary and multiclass classification; MAE, MSE and
//! RMSE for regression. Under a distributed job `compute` sums the states
//! of every rank first (torchmetrics' `sync_on_compute`).
use crate::error::{Error, Result};
use tch::{Kind, Tensor};

mod auroc;
mod classification;
mod regression;

#[cfg(test)]
mod tests;

pub use auroc::Auroc;
pub use classification::StatScores;
pub use regression::Regression;

/// What a metric computes (in C, `fulmen_metric_kind`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Accuracy: (tp + tn) / all for binary, tp / (tp + fn) per class.
    Accuracy = 0,
    /// Precision: tp / (tp + fp).
    Precision = 1,
    /// Recall: tp / (tp + fn).
    Recall = 2,
    /// F1: 2 tp / (2 tp + fp + fn).
    F1 = 3,
    /// Area under the ROC curve (one-vs-rest per class for multiclass).
    Auroc = 4,
    /// Mean absolute error.
    MeanAbsoluteError = 5,
    /// Mean squared error.
    MeanSquaredError = 6,
    /// Root mean squared error (torchmetrics' `squared=False`).
    RootMeanSquaredError = 7,
}

impl MetricKind {
    /// Reads the C value.
    pub fn from_i32(v: i32) -> Result<MetricKind> {
        use MetricKind::*;
        Ok(match v {
            0 => Accuracy,
            1 => Precision,
            2 => Recall,
            3 => F1,
            4 => Auroc,
            5 => MeanAbsoluteError,
            6 => MeanSquaredError,
            7 => RootMeanSquaredError,
            _ => return Err(Error::invalid(format!("{v} is not a fulmen_metric_kind"))),
        })
    }

    /// torchmetrics' class name.
    pub fn name(self) -> &'static str {
        use MetricKind::*;
        match self {
            Accuracy => "Accuracy",
            Precision => "Precision",
            Recall => "Recall",
            F1 => "F1Score",
            Auroc => "AUROC",
            MeanAbsoluteError => "MeanAbsoluteError",
            MeanSquaredError => "MeanSquaredError",
            RootMeanSquaredError => "RootMeanSquaredError",
        }
    }
}

/// How per-class scores combine (in C, `fulmen_average`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Average {
    /// Counts summed over classes, then the score.
    Micro = 0,
    /// Unweighted mean of the classes that occur (in targets or predictions).
    Macro = 1,
    /// Mean weighted by each class's support (its count in the targets).
    Weighted = 2,
}

impl Average {
    /// Reads the C value.
    pub fn from_i32(v: i32) -> Result<Average> {
        match v {
            0 => Ok(Average::Micro),
            1 => Ok(Average::Macro),
            2 => Ok(Average::Weighted),
            _ => Err(Error::invalid(format!("{v} is not a fulmen_average (0 micro, 1 macro, 2 weighted)"))),
        }
    }
}

/// The most classes a classification metric takes (its state grows with
/// the square of the count).
pub const MAX_CLASSES: i64 = 4096;
/// The most thresholds of a binned AUROC.
pub const MAX_THRESHOLDS: i64 = 100_000;

/// How a metric is built; [`MetricOptions::new`] gives torchmetrics'
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricOptions {
    /// What to compute.
    pub kind: MetricKind,
    /// 0 for a binary task (one score per sample), >= 2 for multiclass
    /// (a score per class, or a class index, per sample). Unused by the
    /// regression metrics.
    pub num_classes: i64,
    /// Multiclass averaging (default macro, as torchmetrics).
    pub average: Average,
    /// Binary decision threshold on probabilities (default 0.5).
    pub threshold: f64,
    /// AUROC: 0 keeps every score for the exact curve; n >= 2 bins the
    /// curve at n thresholds evenly spaced in [0, 1] (constant memory).
    pub thresholds: i64,
    /// Sum the states over the ranks of a distributed job at compute
    /// (default true; then every rank must call compute).
    pub sync_on_compute: bool,
}

impl MetricOptions {
    /// torchmetrics' defaults for `kind` over `num_classes` classes.
    pub fn new(kind: MetricKind, num_classes: i64) -> Self {
        MetricOptions {
            kind,
            num_classes,
            average: Average::Macro,
            threshold: 0.5,
            thresholds: 0,
            sync_on_compute: true,
        }
    }
}

/// A metric's accumulated state and its computation.
pub trait Metric: Send {
    /// The options it was built with.
    fn options(&self) -> &MetricOptions;
    /// Adds a batch of predictions and targets.
    fn update(&mut self, preds: &Tensor, target: &Tensor) -> Result<()>;
    /// The state as numbers that add up over ranks (counts, sums); `None`
    /// when it cannot be summed (an exact AUROC keeps every score).
    fn summable_state(&self) -> Result<Option<Vec<f64>>>;
    /// The value from a (possibly summed) state of `summable_state`.
    fn compute_from(&self, state: &[f64]) -> Result<f64>;
    /// The value from this rank's own state (by default from its summable
    /// state).
    fn compute_local(&self) -> Result<f64> {
        let state = self.summable_state()?.ok_or_else(|| Error::state("this metric keeps no summable state"))?;
        self.compute_from(&state)
    }
    /// Forgets everything updated so far.
    fn reset(&mut self);
}

/// Builds the metric `opts` describes.
pub fn build(opts: MetricOptions) -> Result<Box<dyn Metric>> {
    use MetricKind::*;
    match opts.kind {
        Accuracy | Precision | Recall | F1 => Ok(Box::new(StatScores::new(opts)?)),
        Auroc => Ok(Box::new(self::Auroc::new(opts)?)),
        MeanAbsoluteError | MeanSquaredError | RootMeanSquaredError => Ok(Box::new(Regression::new(opts))),
    }
}

/// Sums host values over the ranks in place.
pub type SumOverRanks<'a> = &'a dyn Fn(&mut [f64]) -> Result<()>;

/// Computes `metric`, summing its state over the ranks of the current
/// distributed job when it syncs on compute (a collective: every rank
/// calls it). `reduce` sums the values over the ranks in place.
pub fn compute(metric: &dyn Metric, reduce: Option<SumOverRanks>) -> Result<f64> {
    let Some(reduce) = reduce.filter(|_| metric.options().sync_on_compute) else {
        return metric.compute_local();
    };
    let mut state = metric.summable_state()?.ok_or_else(|| {
        Error::new(
            crate::error::ErrorCode::Unsupported,
            format!(
                "{} with thresholds=0 keeps every score and cannot sync over ranks; bin it (thresholds >= 2) \
             or set sync_on_compute off",
                metric.options().kind.name()
            ),
        )
    })?;
    reduce(&mut state)?;
    metric.compute_from(&state)
}

/// Computes `metric` summed over the current distributed job's ranks (if a
/// job with more than one rank is running), else locally.
pub fn compute_in_job(metric: &dyn Metric) -> Result<f64> {
    match crate::distributed::current().filter(|c| c.world_size() > 1) {
        Some(ctx) => {
            let reduce = |v: &mut [f64]| {
                ctx.group.reduce_values(v, crate::distributed::ReduceOp::Sum).map_err(|e| ctx.explain(e))
            };
            compute(metric, Some(&reduce))
        }
        None => compute(metric, None),
    }
}

/// `num / den`, 0 when `den` is 0 (torchmetrics' `_safe_divide`).
pub(crate) fn safe_div(num: f64, den: f64) -> f64 {
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// The target as int64 class indices, checked to lie in `[0, classes)` and
/// to be whole numbers (a float target of 0. / 1. is accepted).
pub(crate) fn class_indices(target: &Tensor, classes: i64, what: &str) -> Result<Tensor> {
    let t = if target.is_floating_point() {
        let whole = target.f_eq_tensor(&target.f_round()?)?.f_all()?;
        if !bool::try_from(&whole)? {
            return Err(Error::invalid(format!("{what}: the target holds values that are not class indices")));
        }
        target.f_to_kind(Kind::Int64)?
    } else if target.kind() == Kind::Bool || is_integer(target.kind()) {
        target.f_to_kind(Kind::Int64)?
    } else {
        return Err(Error::invalid(format!(
            "{what}: the target must be integer, bool or float, not {:?}",
            target.kind()
        )));
    };
    if t.numel() > 0 {
        let low = i64::try_from(&t.f_min()?)?;
        let high = i64::try_from(&t.f_max()?)?;
        if low < 0 || high >= classes {
            return Err(Error::invalid(format!(
                "{what}: the target holds class {} outside [0, {classes})",
                if low < 0 { low } else { high }
            )));
        }
    }
    Ok(t)
}

/// Whether `k` is an integer dtype.
pub(crate) fn is_integer(k: Kind) -> bool {
    matches!(k, Kind::Uint8 | Kind::Int8 | Kind::Int16 | Kind::Int | Kind::Int64)
}

/// Probabilities from scores: as torchmetrics, `squash` (sigmoid or
/// softmax) is applied unless every value already lies in [0, 1].
pub(crate) fn probabilities(preds: &Tensor, squash: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let inside = preds.f_ge(0.0)?.f_logical_and(&preds.f_le(1.0)?)?.f_all()?;
    if bool::try_from(&inside)? {
        Ok(preds.shallow_clone())
    } else {
        squash(preds)
    }
}
