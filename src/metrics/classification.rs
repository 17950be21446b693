//! Accuracy, precision, recall and F1 from a confusion matrix accumulated
//! on the predictions' device (torchmetrics' `BinaryStatScores` /
//! `MulticlassStatScores` family, top-1, no ignore_index).
use super::{
    class_indices, is_integer, probabilities, safe_div, Average, Metric, MetricKind, MetricOptions, MAX_CLASSES,
};
use crate::error::{Error, Result};
use crate::tensor::device::to_device_of;
use tch::{Kind, Tensor};

/// A confusion-matrix metric (accuracy, precision, recall or F1).
#[derive(Debug)]
pub struct StatScores {
    opts: MetricOptions,
    /// Rows: target class, columns: predicted class (2 x 2 for binary);
    /// `None` until the first update.
    confusion: Option<Tensor>,
}

impl StatScores {
    /// Checks the options; the state starts empty.
    pub fn new(opts: MetricOptions) -> Result<Self> {
        let name = opts.kind.name();
        if !matches!(opts.kind, MetricKind::Accuracy | MetricKind::Precision | MetricKind::Recall | MetricKind::F1) {
            return Err(Error::invalid(format!("{name} is not a confusion-matrix metric")));
        }
        if opts.num_classes != 0 && !(2..=MAX_CLASSES).contains(&opts.num_classes) {
            return Err(Error::invalid(format!(
                "{name}: num_classes must be 0 (binary) or in [2, {MAX_CLASSES}], got {}",
                opts.num_classes
            )));
        }
        if opts.num_classes == 0 && !(opts.threshold.is_finite() && (0.0..=1.0).contains(&opts.threshold)) {
            return Err(Error::invalid(format!("{name}: threshold must be in [0, 1], got {}", opts.threshold)));
        }
        Ok(StatScores { opts, confusion: None })
    }

    fn classes(&self) -> i64 {
        self.opts.num_classes.max(2)
    }

    /// Predicted and target class indices, flattened.
    fn labels(&self, preds: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
        let name = self.opts.kind.name();
        let binary = self.opts.num_classes == 0;
        let pred = if binary {
            same_shape(name, preds, target)?;
            if preds.is_floating_point() {
                probabilities(preds, |p| Ok(p.f_sigmoid()?))?.f_gt(self.opts.threshold)?.f_to_kind(Kind::Int64)?
            } else {
                class_indices(preds, 2, &format!("{name} (integer predictions)"))?
            }
        } else if preds.is_floating_point() {
            if preds.dim() != target.dim() + 1
                || preds.size().get(1) != Some(&self.opts.num_classes)
                || preds.size()[0] != target.size().first().copied().unwrap_or(-1)
                || preds.size()[2..] != target.size()[1..]
            {
                return Err(Error::invalid(format!(
                    "{name}: scores of shape {:?} do not fit targets of shape {:?} with {} classes \
                     (expected (N, C, ...) scores for (N, ...) targets)",
                    preds.size(),
                    target.size(),
                    self.opts.num_classes
                )));
            }
            preds.f_argmax(1, false)?
        } else if is_integer(preds.kind()) {
            same_shape(name, preds, target)?;
            class_indices(preds, self.opts.num_classes, &format!("{name} (predicted classes)"))?
        } else {
            return Err(Error::invalid(format!("{name}: predictions of dtype {:?}", preds.kind())));
        };
        let target = to_device_of(&class_indices(target, self.classes(), name)?, &pred)?;
        Ok((pred.f_reshape([-1])?, target.f_reshape([-1])?))
    }

    /// Per-class (tp, fp, fn) and the total from a flattened confusion.
    fn counts(&self, m: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>, f64) {
        let c = self.classes() as usize;
        let (mut tp, mut fp, mut fneg) = (vec![0.0; c], vec![0.0; c], vec![0.0; c]);
        let mut total = 0.0;
        for t in 0..c {
            for p in 0..c {
                let v = m[t * c + p];
                total += v;
                if t == p {
                    tp[t] += v;
                } else {
                    fneg[t] += v;
                    fp[p] += v;
                }
            }
        }
        (tp, fp, fneg, total)
    }

    fn score(&self, tp: f64, fp: f64, fneg: f64) -> f64 {
        match self.opts.kind {
            MetricKind::Precision => safe_div(tp, tp + fp),
            MetricKind::F1 => safe_div(2.0 * tp, 2.0 * tp + fp + fneg),
            _ => safe_div(tp, tp + fneg),
        }
    }
}

/// Fails unless the two tensors have one shape.
fn same_shape(name: &str, preds: &Tensor, target: &Tensor) -> Result<()> {
    if preds.size() != target.size() {
        return Err(Error::invalid(format!(
            "{name}: predictions of shape {:?} and targets of shape {:?} differ",
            preds.size(),
            target.size()
        )));
    }
    Ok(())
}

impl Metric for StatScores {
    fn options(&self) -> &MetricOptions {
        &self.opts
    }

    fn update(&mut self, preds: &Tensor, target: &Tensor) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        let (pred, target) = self.labels(preds, target)?;
        let c = self.classes();
        let cells = target.f_mul_scalar(c)?.f_add(&pred)?;
        let counts = cells.f_bincount(None::<Tensor>, c * c)?.f_reshape([c, c])?;
        self.confusion = Some(match self.confusion.take() {
            Some(m) => m.f_add(&to_device_of(&counts, &m)?)?,
            None => counts,
        });
        Ok(())
    }

    fn summable_state(&self) -> Result<Option<Vec<f64>>> {
        let c = self.classes();
        Ok(Some(match &self.confusion {
            Some(m) => {
                Vec::<f64>::try_from(&m.f_to_kind(Kind::Double)?.f_to_device(tch::Device::Cpu)?.f_reshape([-1])?)?
            }
            None => vec![0.0; (c * c) as usize],
        }))
    }

    fn compute_from(&self, state: &[f64]) -> Result<f64> {
        let (tp, fp, fneg, total) = self.counts(state);
        if total == 0.0 {
            return Err(Error::state(format!("{} computed before any update", self.opts.kind.name())));
        }
        if self.opts.num_classes == 0 {
            let (tp, fp, fneg) = (tp[1], fp[1], fneg[1]);
            return Ok(match self.opts.kind {
                MetricKind::Accuracy => safe_div(total - fp - fneg, total),
                _ => self.score(tp, fp, fneg),
            });
        }
        Ok(match self.opts.average {
            Average::Micro => self.score(tp.iter().sum(), fp.iter().sum(), fneg.iter().sum()),
            Average::Macro | Average::Weighted => {
                let (mut num, mut den) = (0.0, 0.0);
                for i in 0..tp.len() {
                    // torchmetrics leaves out a class absent from both the
                    // targets and the predictions.
                    if tp[i] + fp[i] + fneg[i] == 0.0 {
                        continue;
                    }
                    let w = if self.opts.average == Average::Macro { 1.0 } else { tp[i] + fneg[i] };
                    num += w * self.score(tp[i], fp[i], fneg[i]);
                    den += w;
                }
                safe_div(num, den)
            }
        })
    }

    fn reset(&mut self) {
        self.confusion = None;
    }
}
