//! Generated from src/ffi/options_table.rs by tools/codegen/option_structs.rs (`make header`): do not edit.
//! The option structs of `fulmen/metrics.h`, each with its `*_default`
//! functions and, where the core has an options type for it, its
//! conversions to and from the core's options.
use crate::error::Error;
use crate::metrics::{Average, MetricKind, MetricOptions};

/// How a metric is built; start from `fulmen_metric_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_metric_options {
    /// A `fulmen_metric_kind`.
    pub kind: i32,
    /// 0: a binary task (one score or 0/1 label per sample, shaped as the
    /// targets); 2 to 4096: multiclass (scores (N, C, ...) or class indices
    /// (N, ...) for targets (N, ...)). Unused by MAE / MSE / RMSE.
    pub num_classes: i64,
    /// A `fulmen_average` for multiclass scores (default macro, as
    /// torchmetrics; AUROC takes macro or weighted).
    pub average: i32,
    /// Binary: probabilities above it count as positive (default 0.5).
    /// Scores outside [0, 1] go through a sigmoid first (softmax for
    /// multiclass AUROC), as torchmetrics.
    pub threshold: f64,
    /// AUROC: 0 (default) keeps every score for the exact curve; 2 to
    /// 100000 bins it at that many thresholds in [0, 1] (constant memory).
    pub thresholds: i64,
    /// Sum the states over the ranks of a running distributed job at
    /// compute (default true; then every rank must call compute).
    pub sync_on_compute: bool,
}

/// torchmetrics' defaults for `kind` (a `fulmen_metric_kind`) over
/// `num_classes` classes (0: binary).
#[no_mangle]
pub extern "C" fn fulmen_metric_options_default(kind: i32, num_classes: i64) -> fulmen_metric_options {
    let mut c: fulmen_metric_options = MetricOptions::new(MetricKind::from_i32(kind).unwrap_or(MetricKind::Accuracy), num_classes).into();
    c.kind = kind;
    c
}

impl From<MetricOptions> for fulmen_metric_options {
    fn from(d: MetricOptions) -> Self {
        fulmen_metric_options {
            kind: d.kind as i32,
            num_classes: d.num_classes,
            average: d.average as i32,
            threshold: d.threshold,
            thresholds: d.thresholds,
            sync_on_compute: d.sync_on_compute,
        }
    }
}

impl TryFrom<fulmen_metric_options> for MetricOptions {
    type Error = Error;

    fn try_from(o: fulmen_metric_options) -> Result<Self, Error> {
        Ok(MetricOptions {
            kind: MetricKind::from_i32(o.kind)?,
            num_classes: o.num_classes,
            average: Average::from_i32(o.average)?,
            threshold: o.threshold,
            thresholds: o.thresholds,
            sync_on_compute: o.sync_on_compute,
        })
    }
}
