//! `torch.optim.lr_scheduler.ReduceLROnPlateau`.
use super::{Lookup, LrScheduler};
use crate::checkpoint::numbers::Infinity;
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// Whether a lower or a higher metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlateauMode {
    /// Lower is better (a loss; torch's default `"min"`).
    Min,
    /// Higher is better (an accuracy; `"max"`).
    Max,
}

/// How `threshold` is applied to decide that a metric improved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThresholdMode {
    /// Relative: better than `best * (1 -/+ threshold)` (default `"rel"`).
    Rel,
    /// Absolute: better than `best -/+ threshold` (`"abs"`).
    Abs,
}

/// Options of [`ReduceLrOnPlateau`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlateauOptions {
    /// Min or max mode (default min).
    pub mode: PlateauMode,
    /// Factor the lr is multiplied by on a plateau, `< 1` (default 0.1).
    pub factor: f64,
    /// Bad epochs tolerated before reducing (default 10).
    pub patience: u64,
    /// Threshold of a significant improvement (default 1e-4).
    pub threshold: f64,
    /// Relative or absolute threshold (default relative).
    pub threshold_mode: ThresholdMode,
    /// Epochs to wait after a reduction before counting again (default 0).
    pub cooldown: u64,
    /// Lower bound of every group's lr (default 0).
    pub min_lr: f64,
    /// Reductions smaller than this are skipped (default 1e-8).
    pub eps: f64,
}

impl Default for PlateauOptions {
    fn default() -> Self {
        PlateauOptions {
            mode: PlateauMode::Min,
            factor: 0.1,
            patience: 10,
            threshold: 1e-4,
            threshold_mode: ThresholdMode::Rel,
            cooldown: 0,
            min_lr: 0.0,
            eps: 1e-8,
        }
    }
}

impl PlateauOptions {
    fn validate(&self) -> std::result::Result<(), String> {
        if !(self.factor < 1.0 && self.factor >= 0.0) {
            return Err(format!("Factor should be < 1.0 (and >= 0), got {}", self.factor));
        }
        for (what, v) in [("threshold", self.threshold), ("min_lr", self.min_lr), ("eps", self.eps)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{what} must be finite and >= 0, got {v}"));
            }
        }
        Ok(())
    }
}

/// Reduces every group's lr by `factor` when the metric passed to `step` has
/// not improved for more than `patience` steps (`ReduceLROnPlateau`).
#[derive(Debug, Clone)]
pub struct ReduceLrOnPlateau {
    opts: PlateauOptions,
    /// Each group's lower bound (torch's `min_lrs`; `opts.min_lr` for all
    /// unless given per group).
    min_lrs: Vec<f64>,
    /// Whether the bounds were given per group (torch's `default_min_lr`
    /// None): a group added later then has none, and a reduction is
    /// refused, as torch refuses it.
    per_group: bool,
    best: f64,
    num_bad_epochs: u64,
    cooldown_counter: u64,
    last_epoch: i64,
    last_lr: Vec<f64>,
}

impl ReduceLrOnPlateau {
    /// A scheduler for `opt`; it does not change the lr until a plateau.
    pub fn new(opt: &mut dyn Optimizer, opts: PlateauOptions) -> Result<Self> {
        opts.validate().map_err(Error::invalid)?;
        Ok(ReduceLrOnPlateau {
            opts,
            min_lrs: vec![opts.min_lr; opt.param_groups().len()],
            per_group: false,
            best: worst(opts.mode),
            num_bad_epochs: 0,
            cooldown_counter: 0,
            last_epoch: 0,
            last_lr: opt.param_groups().iter().map(|g| g.lr).collect(),
        })
    }

    /// A scheduler for `opt` with a lower bound per param group (torch's
    /// `min_lr` given as a list): `min_lrs` has one finite value >= 0 for
    /// each group.
    pub fn with_min_lrs(opt: &mut dyn Optimizer, opts: PlateauOptions, min_lrs: &[f64]) -> Result<Self> {
        let groups = opt.param_groups().len();
        if min_lrs.len() != groups {
            return Err(Error::invalid(format!(
                "expected {groups} min_lrs (one per param group), got {}",
                min_lrs.len()
            )));
        }
        if let Some(bad) = min_lrs.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
            return Err(Error::invalid(format!("min_lr must be finite and >= 0, got {bad}")));
        }
        let mut s = Self::new(opt, opts)?;
        s.min_lrs = min_lrs.to_vec();
        s.per_group = true;
        Ok(s)
    }

    /// Each param group's lower bound of the lr.
    pub fn min_lrs(&self) -> &[f64] {
        &self.min_lrs
    }

    /// Best metric seen so far.
    pub fn best(&self) -> f64 {
        self.best
    }

    /// Bad epochs counted since the last improvement or reduction.
    pub fn num_bad_epochs(&self) -> u64 {
        self.num_bad_epochs
    }

    /// Steps left in the current cooldown.
    pub fn cooldown_counter(&self) -> u64 {
        self.cooldown_counter
    }

    fn is_better(&self, a: f64, best: f64) -> bool {
        let t = self.opts.threshold;
        match (self.opts.mode, self.opts.threshold_mode) {
            (PlateauMode::Min, ThresholdMode::Rel) => a < best * (1.0 - t),
            (PlateauMode::Min, ThresholdMode::Abs) => a < best - t,
            (PlateauMode::Max, ThresholdMode::Rel) => a > best * (t + 1.0),
            (PlateauMode::Max, ThresholdMode::Abs) => a > best + t,
        }
    }
}

fn worst(mode: PlateauMode) -> f64 {
    match mode {
        PlateauMode::Min => f64::INFINITY,
        PlateauMode::Max => f64::NEG_INFINITY,
    }
}

impl LrScheduler for ReduceLrOnPlateau {
    fn name(&self) -> &'static str {
        "reduce_lr_on_plateau"
    }

    fn reduce_on_plateau(&self) -> bool {
        true
    }

    fn step(&mut self, opt: &mut dyn Optimizer, metric: Option<f64>) -> Result<()> {
        let current =
            metric.ok_or_else(|| Error::invalid("reduce_lr_on_plateau: step needs the monitored metric, got None"))?;
        self.last_epoch += 1;
        if self.is_better(current, self.best) {
            self.best = current;
            self.num_bad_epochs = 0;
        } else {
            self.num_bad_epochs += 1;
        }
        if self.cooldown_counter > 0 {
            self.cooldown_counter -= 1;
            self.num_bad_epochs = 0;
        }
        if self.num_bad_epochs > self.opts.patience {
            // torch's `_reduce_lr`: groups added since construction take the
            // one min_lr, or (bounds given per group) the reduction fails.
            let groups = opt.param_groups().len();
            if self.min_lrs.len() != groups {
                if self.per_group {
                    return Err(Error::state(format!(
                        "reduce_lr_on_plateau: the optimizer has {groups} param groups but {} min_lrs were given; \
                         give one per group",
                        self.min_lrs.len()
                    )));
                }
                self.min_lrs = vec![self.opts.min_lr; groups];
            }
            for (g, min_lr) in opt.param_groups_mut().iter_mut().zip(self.min_lrs.iter().copied()) {
                let old_lr = g.lr;
                let new_lr = (old_lr * self.opts.factor).max(min_lr);
                if old_lr - new_lr > self.opts.eps {
                    g.lr = new_lr;
                }
            }
            self.cooldown_counter = self.opts.cooldown;
            self.num_bad_epochs = 0;
        }
        self.last_lr = opt.param_groups().iter().map(|g| g.lr).collect();
        Ok(())
    }

    /// Its constructor leaves the lr as it is: so does its first step in a
    /// replay of the constructors ([`LrScheduler::chain_to`] 0); it takes
    /// no other.
    fn chain_to(&mut self, _opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        if epoch == 0 && self.last_epoch == 0 {
            return Ok(());
        }
        Err(Error::invalid("reduce_lr_on_plateau steps on a metric: it cannot be part of a ChainedScheduler"))
    }

    fn last_lr(&self) -> Vec<f64> {
        self.last_lr.clone()
    }

    fn state_dict(&self) -> Vec<(String, f64)> {
        let o = &self.opts;
        let mut out: Vec<(String, f64)> = [
            ("last_epoch", self.last_epoch as f64),
            ("best", self.best),
            ("num_bad_epochs", self.num_bad_epochs as f64),
            ("cooldown_counter", self.cooldown_counter as f64),
            ("mode_max", if o.mode == PlateauMode::Max { 1.0 } else { 0.0 }),
            ("factor", o.factor),
            ("patience", o.patience as f64),
            ("threshold", o.threshold),
            ("threshold_abs", if o.threshold_mode == ThresholdMode::Abs { 1.0 } else { 0.0 }),
            ("cooldown", o.cooldown as f64),
            ("min_lr", o.min_lr),
            ("eps", o.eps),
            ("last_lr.len", self.last_lr.len() as f64),
            ("min_lrs.len", self.min_lrs.len() as f64),
            ("min_lr_per_group", if self.per_group { 1.0 } else { 0.0 }),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        out.extend(self.last_lr.iter().enumerate().map(|(i, v)| (format!("last_lr.{i}"), *v)));
        out.extend(self.min_lrs.iter().enumerate().map(|(i, v)| (format!("min_lrs.{i}"), *v)));
        out
    }

    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        let l = Lookup::new("reduce_lr_on_plateau", state)?;
        let count = |k: &str| -> Result<u64> {
            let v = l.int(k)?;
            u64::try_from(v).map_err(|_| l.bad(k, v as f64))
        };
        let opts = PlateauOptions {
            mode: if l.flag("mode_max")? { PlateauMode::Max } else { PlateauMode::Min },
            factor: l.get("factor")?,
            patience: count("patience")?,
            threshold: l.get("threshold")?,
            threshold_mode: if l.flag("threshold_abs")? { ThresholdMode::Abs } else { ThresholdMode::Rel },
            cooldown: count("cooldown")?,
            min_lr: l.get("min_lr")?,
            eps: l.get("eps")?,
        };
        opts.validate().map_err(|m| Error::format(format!("reduce_lr_on_plateau state dict: {m}")))?;
        let n = count("last_lr.len")?;
        if n > 1_000_000 {
            return Err(l.bad("last_lr.len", n as f64));
        }
        let last_lr: Vec<f64> = (0..n).map(|i| l.get(&format!("last_lr.{i}"))).collect::<Result<_>>()?;
        // Older states keep one min_lr for every group (as many as the
        // last_lr values the state holds); a list may be shorter than the
        // groups, as torch's is after a group was added.
        let min_lrs: Vec<f64> = match l.optional("min_lrs.len")? {
            Some(len) if !((0.0..=1e6).contains(&len) && len.fract() == 0.0) => return Err(l.bad("min_lrs.len", len)),
            Some(len) => (0..len as u64).map(|i| l.get(&format!("min_lrs.{i}"))).collect::<Result<_>>()?,
            None => vec![opts.min_lr; last_lr.len()],
        };
        let per_group = l.optional("min_lr_per_group")?.is_some_and(|v| v == 1.0);
        if let Some(bad) = min_lrs.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
            return Err(Error::format(format!("reduce_lr_on_plateau state dict: min_lr {bad}")));
        }
        // torch starts `best` at the mode's worst, an infinity, and takes
        // an infinite metric as it is.
        let best = l.get_or("best", Infinity::Allowed)?;
        let new = ReduceLrOnPlateau {
            opts,
            min_lrs,
            per_group,
            best,
            num_bad_epochs: count("num_bad_epochs")?,
            cooldown_counter: count("cooldown_counter")?,
            last_epoch: l.int("last_epoch")?,
            last_lr,
        };
        l.finish()?;
        *self = new;
        Ok(())
    }
}
