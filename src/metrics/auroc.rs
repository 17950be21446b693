//! AUROC, as torchmetrics' `BinaryAUROC` / `MulticlassAUROC`: exact (every
//! score kept, the ROC curve through each distinct score) or binned at n
//! thresholds evenly spaced in [0, 1] (two histograms per class, constant
//! memory, summable over ranks).
use super::MAX_THRESHOLDS;
use super::{class_indices, probabilities, safe_div, Average, Metric, MetricKind, MetricOptions, MAX_CLASSES};
use crate::error::{Error, Result};
use crate::tensor::device::to_device_of;
use tch::{Device, Kind, Tensor};

/// The most cells (classes x thresholds) of a binned AUROC's state.
const MAX_BINNED_CELLS: i64 = 1 << 22;

/// The AUROC metric.
#[derive(Debug)]
pub struct Auroc {
    opts: MetricOptions,
    /// Exact mode: probabilities (N, or N x C) and targets, per update.
    kept: Vec<(Tensor, Tensor)>,
    /// Binned mode: per class, counts of negatives then positives by how
    /// many thresholds their score reaches (C x 2 x (n + 1)).
    hist: Option<Tensor>,
}

impl Auroc {
    /// Checks the options; the state starts empty.
    pub fn new(opts: MetricOptions) -> Result<Self> {
        if opts.kind != MetricKind::Auroc {
            return Err(Error::invalid(format!("{} is not AUROC", opts.kind.name())));
        }
        if opts.num_classes != 0 && !(2..=MAX_CLASSES).contains(&opts.num_classes) {
            return Err(Error::invalid(format!(
                "AUROC: num_classes must be 0 (binary) or in [2, {MAX_CLASSES}], got {}",
                opts.num_classes
            )));
        }
        if opts.num_classes >= 2 && opts.average == Average::Micro {
            return Err(Error::invalid("AUROC: a multiclass AUROC averages macro or weighted, not micro"));
        }
        if opts.thresholds != 0 && !(2..=MAX_THRESHOLDS).contains(&opts.thresholds) {
            return Err(Error::invalid(format!(
                "AUROC: thresholds must be 0 (exact) or in [2, {MAX_THRESHOLDS}], got {}",
                opts.thresholds
            )));
        }
        if opts.num_classes.max(1) * (opts.thresholds + 1) > MAX_BINNED_CELLS {
            return Err(Error::invalid(format!(
                "AUROC: {} classes x {} thresholds exceed {MAX_BINNED_CELLS} histogram cells",
                opts.num_classes, opts.thresholds
            )));
        }
        Ok(Auroc { opts, kept: Vec::new(), hist: None })
    }

    fn columns(&self) -> i64 {
        self.opts.num_classes.max(1)
    }

    /// Probabilities (N x C', C' = 1 for binary) and targets (N) as class
    /// indices, checked.
    fn prepare(&self, preds: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
        if !preds.is_floating_point() {
            return Err(Error::invalid(format!("AUROC: predictions must be float scores, not {:?}", preds.kind())));
        }
        if self.opts.num_classes == 0 {
            if preds.size() != target.size() {
                return Err(Error::invalid(format!(
                    "AUROC: scores of shape {:?} and targets of shape {:?} differ",
                    preds.size(),
                    target.size()
                )));
            }
            let p = probabilities(preds, |p| Ok(p.f_sigmoid()?))?;
            let t = class_indices(target, 2, "AUROC")?;
            return Ok((p.f_reshape([-1, 1])?, t.f_reshape([-1])?));
        }
        let c = self.opts.num_classes;
        if preds.dim() != 2 || preds.size()[1] != c || target.dim() != 1 || target.size()[0] != preds.size()[0] {
            return Err(Error::invalid(format!(
                "AUROC: scores of shape {:?} do not fit targets of shape {:?} with {c} classes (expected (N, C) and (N))",
                preds.size(),
                target.size()
            )));
        }
        let p = probabilities(preds, |p| Ok(p.f_softmax(1, p.kind())?))?;
        Ok((p, class_indices(target, c, "AUROC")?))
    }

    /// Binned counts of one update: C x 2 x (n + 1).
    fn binned(&self, probs: &Tensor, target: &Tensor) -> Result<Tensor> {
        let n = self.opts.thresholds;
        let c = self.columns();
        // torchmetrics' thresholds: torch.linspace(0, 1, n) in float32, the
        // comparison in float32 at least (half scores are promoted).
        let probs = match probs.kind() {
            Kind::Half | Kind::BFloat16 => probs.f_to_kind(Kind::Float)?,
            _ => probs.shallow_clone(),
        };
        let thresholds = to_device_of(&Tensor::f_linspace(0.0, 1.0, n, (Kind::Float, tch::Device::Cpu))?, &probs)?
            .f_to_kind(probs.kind())?;
        // How many thresholds each score reaches (score >= threshold).
        let reached = probs.contiguous().f_bucketize(&thresholds, false, true)?;
        let positive = if self.opts.num_classes == 0 { target.f_reshape([-1, 1])? } else { target.f_one_hot(c)? };
        let class = to_device_of(&Tensor::f_arange(c, (Kind::Int64, tch::Device::Cpu))?, &probs)?.f_reshape([1, c])?;
        let cell = class.f_mul_scalar(2 * (n + 1))?.f_add(&positive.f_mul_scalar(n + 1)?)?.f_add(&reached)?;
        Ok(cell.f_reshape([-1])?.f_bincount(None::<Tensor>, c * 2 * (n + 1))?.f_reshape([c, 2, n + 1])?)
    }

    /// AUC of one class from binned counts (negatives, positives by reach).
    fn binned_auc(neg: &[f64], pos: &[f64]) -> f64 {
        // Scores reaching threshold j are those in buckets above j.
        let n = neg.len() - 1;
        let (total_neg, total_pos): (f64, f64) = (neg.iter().sum(), pos.iter().sum());
        let mut fpr = Vec::with_capacity(n);
        let mut tpr = Vec::with_capacity(n);
        let (mut fp, mut tp) = (0.0, 0.0);
        // From the highest threshold down: the curve rises from (0, 0).
        for j in (0..n).rev() {
            fp += neg[j + 1];
            tp += pos[j + 1];
            fpr.push(safe_div(fp, total_neg));
            tpr.push(safe_div(tp, total_pos));
        }
        trapezoid(&fpr, &tpr)
    }

    /// Exact AUC of one class: the ROC through every distinct score.
    fn exact_auc(scores: &[f64], positive: &[bool]) -> f64 {
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        let (mut fps, mut tps) = (vec![0.0], vec![0.0]);
        let (mut fp, mut tp) = (0.0, 0.0);
        for (k, &i) in order.iter().enumerate() {
            if positive[i] {
                tp += 1.0;
            } else {
                fp += 1.0;
            }
            let last_of_value = k + 1 == order.len() || scores[order[k + 1]] != scores[i];
            if last_of_value {
                fps.push(fp);
                tps.push(tp);
            }
        }
        // torchmetrics: a curve without negatives (positives) is all zeros.
        let fpr: Vec<f64> = fps.iter().map(|v| if fp > 0.0 { v / fp } else { 0.0 }).collect();
        let tpr: Vec<f64> = tps.iter().map(|v| if tp > 0.0 { v / tp } else { 0.0 }).collect();
        trapezoid(&fpr, &tpr)
    }

    /// Averages per-class AUCs with the classes' supports.
    fn average(&self, aucs: &[f64], support: &[f64]) -> f64 {
        if self.opts.num_classes == 0 {
            return aucs[0];
        }
        match self.opts.average {
            Average::Weighted => {
                let total: f64 = support.iter().sum();
                aucs.iter().zip(support).map(|(a, s)| a * safe_div(*s, total)).sum()
            }
            _ => aucs.iter().sum::<f64>() / aucs.len() as f64,
        }
    }
}

/// `torch.trapz(y, x)`.
fn trapezoid(x: &[f64], y: &[f64]) -> f64 {
    x.windows(2).zip(y.windows(2)).map(|(x, y)| (x[1] - x[0]) * (y[1] + y[0]) / 2.0).sum()
}

impl Metric for Auroc {
    fn options(&self) -> &MetricOptions {
        &self.opts
    }

    fn update(&mut self, preds: &Tensor, target: &Tensor) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        let (probs, target) = self.prepare(preds, target)?;
        let target = to_device_of(&target, &probs)?;
        if self.opts.thresholds == 0 {
            // Copies: the caller may refill its tensors for the next batch.
            self.kept.push((probs.f_detach()?.copy(), target.copy()));
            return Ok(());
        }
        let counts = self.binned(&probs, &target)?;
        self.hist = Some(match self.hist.take() {
            Some(h) => h.f_add(&to_device_of(&counts, &h)?)?,
            None => counts,
        });
        Ok(())
    }

    fn summable_state(&self) -> Result<Option<Vec<f64>>> {
        if self.opts.thresholds == 0 {
            return Ok(None);
        }
        let len = (self.columns() * 2 * (self.opts.thresholds + 1)) as usize;
        Ok(Some(match &self.hist {
            Some(h) => Vec::<f64>::try_from(&h.f_to_kind(Kind::Double)?.f_to_device(Device::Cpu)?.f_reshape([-1])?)?,
            None => vec![0.0; len],
        }))
    }

    fn compute_from(&self, state: &[f64]) -> Result<f64> {
        let width = (self.opts.thresholds + 1) as usize;
        if state.iter().all(|v| *v == 0.0) {
            return Err(Error::state("AUROC computed before any update"));
        }
        let mut aucs = Vec::new();
        let mut support = Vec::new();
        for class in state.chunks(2 * width) {
            let (neg, pos) = class.split_at(width);
            aucs.push(Self::binned_auc(neg, pos));
            support.push(pos.iter().sum());
        }
        Ok(self.average(&aucs, &support))
    }

    fn compute_local(&self) -> Result<f64> {
        if let Some(state) = self.summable_state()? {
            return self.compute_from(&state);
        }
        if self.kept.is_empty() {
            return Err(Error::state("AUROC computed before any update"));
        }
        let probs: Vec<Tensor> = self.kept.iter().map(|(p, _)| p.shallow_clone()).collect();
        let targets: Vec<Tensor> = self.kept.iter().map(|(_, t)| t.shallow_clone()).collect();
        let probs = Tensor::f_cat(&probs, 0)?.f_to_kind(Kind::Double)?.f_to_device(Device::Cpu)?;
        let targets = Vec::<i64>::try_from(&Tensor::f_cat(&targets, 0)?.f_to_device(Device::Cpu)?)?;
        let c = self.columns();
        let mut aucs = Vec::new();
        let mut support = Vec::new();
        for class in 0..c {
            let scores = Vec::<f64>::try_from(&probs.f_select(1, class)?.f_contiguous()?)?;
            let want = if self.opts.num_classes == 0 { 1 } else { class };
            let positive: Vec<bool> = targets.iter().map(|t| *t == want).collect();
            support.push(positive.iter().filter(|p| **p).count() as f64);
            aucs.push(Self::exact_auc(&scores, &positive));
        }
        Ok(self.average(&aucs, &support))
    }

    fn reset(&mut self) {
        self.kept.clear();
        self.hist = None;
    }
}
