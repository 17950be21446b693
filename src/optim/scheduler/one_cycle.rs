//! The 1cycle policy, `torch.optim.lr_scheduler.OneCycleLR`.
use super::{out_of_range, Base, Lookup, LrScheduler};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// How OneCycleLR interpolates within a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnealStrategy {
    /// Cosine annealing (torch's default `"cos"`).
    Cos,
    /// Linear annealing (`"linear"`).
    Linear,
}

impl AnnealStrategy {
    fn anneal(self, start: f64, end: f64, pct: f64) -> f64 {
        match self {
            AnnealStrategy::Cos => {
                let cos_out = (std::f64::consts::PI * pct).cos() + 1.0;
                end + (start - end) / 2.0 * cos_out
            }
            AnnealStrategy::Linear => (end - start) * pct + start,
        }
    }
}

/// Options of [`OneCycleLr`]; [`OneCycleOptions::new`] gives torch's defaults
/// for everything but `max_lr` and `total_steps`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OneCycleOptions {
    /// Peak learning rate (every group).
    pub max_lr: f64,
    /// Number of steps in the cycle (`>= 1`).
    pub total_steps: i64,
    /// Fraction of the cycle spent increasing the lr (default 0.3).
    pub pct_start: f64,
    /// Annealing strategy (default cosine).
    pub anneal_strategy: AnnealStrategy,
    /// Momentum (SGD/RMSprop) or beta1 (Adam) cycled inversely to the lr
    /// between `base_momentum` and `max_momentum` (default true, as torch).
    pub cycle_momentum: bool,
    /// Lower momentum bound (default 0.85).
    pub base_momentum: f64,
    /// Upper momentum bound (default 0.95).
    pub max_momentum: f64,
    /// `initial_lr = max_lr / div_factor` (default 25).
    pub div_factor: f64,
    /// `min_lr = initial_lr / final_div_factor` (default 1e4).
    pub final_div_factor: f64,
    /// Use the three-phase schedule (default false).
    pub three_phase: bool,
}

impl OneCycleOptions {
    /// torch's defaults with the given peak lr and cycle length.
    pub fn new(max_lr: f64, total_steps: i64) -> Self {
        OneCycleOptions {
            max_lr,
            total_steps,
            pct_start: 0.3,
            anneal_strategy: AnnealStrategy::Cos,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
        }
    }

    /// The phases: (end step, start lr, end lr, start momentum, end momentum)
    /// with values 0 initial_lr, 1 max_lr, 2 min_lr / 0 max_momentum,
    /// 1 base_momentum.
    fn phases(&self) -> Vec<(f64, usize, usize, usize, usize)> {
        let total = self.total_steps as f64;
        if self.three_phase {
            vec![
                (self.pct_start * total - 1.0, 0, 1, 0, 1),
                (2.0 * self.pct_start * total - 2.0, 1, 0, 1, 0),
                (total - 1.0, 0, 2, 0, 0),
            ]
        } else {
            vec![(self.pct_start * total - 1.0, 0, 1, 0, 1), (total - 1.0, 1, 2, 1, 0)]
        }
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.total_steps < 1 {
            return Err(format!("Expected positive integer total_steps, but got {}", self.total_steps));
        }
        if !(0.0..=1.0).contains(&self.pct_start) {
            return Err(format!("Expected float between 0 and 1 pct_start, but got {}", self.pct_start));
        }
        for (what, v) in
            [("max_lr", self.max_lr), ("div_factor", self.div_factor), ("final_div_factor", self.final_div_factor)]
        {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{what} must be finite and > 0, got {v}"));
            }
        }
        if !(self.base_momentum.is_finite() && self.max_momentum.is_finite()) {
            return Err("base_momentum and max_momentum must be finite".into());
        }
        let mut start = 0.0;
        for (end, ..) in self.phases() {
            if end == start {
                return Err(format!(
                    "pct_start {} with total_steps {} gives an empty phase (torch divides by zero)",
                    self.pct_start, self.total_steps
                ));
            }
            start = end;
        }
        Ok(())
    }
}

/// OneCycleLR: warm-up from `max_lr / div_factor` to `max_lr`, then annealing
/// to `initial_lr / final_div_factor` (optionally three phases), cycling
/// momentum inversely. Stepping past `total_steps` is an `OutOfRange` error.
///
/// As torch, it keeps the values the options resolve to: `min_lr` (torch's
/// per-group `min_lr`) and the phases' end steps (`_schedule_phases`), so a
/// state read from torch resumes with torch's exact numbers.
#[derive(Debug, Clone)]
pub struct OneCycleLr {
    base: Base,
    opts: OneCycleOptions,
    /// Each group's range (torch's per-group `max_lr`, `min_lr`,
    /// `max_momentum`, `base_momentum`).
    ranges: Vec<GroupRange>,
    phase_ends: Vec<f64>,
}

/// One param group's range: what torch keeps in the group.
#[derive(Debug, Clone, Copy, PartialEq)]
struct GroupRange {
    max_lr: f64,
    min_lr: f64,
    max_momentum: f64,
    base_momentum: f64,
}

/// The per-group lists a state keeps, with their keys.
const RANGE_KEYS: [&str; 4] = ["max_lrs", "min_lrs", "max_momentums", "base_momentums"];

impl GroupRange {
    fn values(&self) -> [f64; 4] {
        [self.max_lr, self.min_lr, self.max_momentum, self.base_momentum]
    }
}

impl OneCycleLr {
    /// Sets every group's `initial_lr` to `max_lr / div_factor` (and its
    /// momentum to `max_momentum` when cycling), then writes the lr of step 0.
    pub fn new(opt: &mut dyn Optimizer, opts: OneCycleOptions) -> Result<Self> {
        Self::with_max_lrs(opt, opts, &[])
    }

    /// As [`OneCycleLr::new`] with a peak learning rate per param group
    /// (torch's `max_lr` given as a list; `opts.max_lr` is then unused):
    /// each group starts at its `max_lr / div_factor` and ends at that over
    /// `final_div_factor`. An empty `max_lrs` gives every group
    /// `opts.max_lr`.
    pub fn with_max_lrs(opt: &mut dyn Optimizer, opts: OneCycleOptions, max_lrs: &[f64]) -> Result<Self> {
        let groups = opt.param_groups().len();
        if !max_lrs.is_empty() && max_lrs.len() != groups {
            return Err(Error::invalid(format!(
                "expected {groups} max_lrs (one per param group), got {}",
                max_lrs.len()
            )));
        }
        if let Some(bad) = max_lrs.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            return Err(Error::invalid(format!("max_lr must be finite and > 0, got {bad}")));
        }
        let opts = OneCycleOptions { max_lr: max_lrs.first().copied().unwrap_or(opts.max_lr), ..opts };
        opts.validate().map_err(Error::invalid)?;
        if opts.cycle_momentum && crate::optim::momentum_key(opt.name()).is_none() {
            return Err(Error::invalid(format!(
                "optimizer must support momentum or beta1 with `cycle_momentum` option enabled ({} has neither)",
                opt.name()
            )));
        }
        let mut ranges = Vec::with_capacity(groups);
        for (i, g) in opt.param_groups_mut().iter_mut().enumerate() {
            let max_lr = max_lrs.get(i).copied().unwrap_or(opts.max_lr);
            let initial_lr = max_lr / opts.div_factor;
            g.initial_lr = Some(initial_lr);
            if opts.cycle_momentum {
                g.momentum = opts.max_momentum;
            }
            ranges.push(GroupRange {
                max_lr,
                min_lr: initial_lr / opts.final_div_factor,
                max_momentum: opts.max_momentum,
                base_momentum: opts.base_momentum,
            });
        }
        let phase_ends = opts.phases().iter().map(|p| p.0).collect();
        let mut s = OneCycleLr { base: Base::attach(opt), opts, ranges, phase_ends };
        s.apply_step(opt, 0)?;
        Ok(s)
    }

    /// Writes the lr (and momentum) of `step_num` into the optimizer.
    fn apply_step(&mut self, opt: &mut dyn Optimizer, step_num: i64) -> Result<()> {
        let o = self.opts;
        if step_num > o.total_steps {
            return Err(out_of_range(format!(
                "one_cycle_lr: tried to step {step_num} times; the specified number of total steps is {}",
                o.total_steps
            )));
        }
        let phases = o.phases();
        let step = step_num as f64;
        let mut lrs = Vec::with_capacity(self.base.base_lrs.len());
        for ((g, initial_lr), r) in opt.param_groups_mut().iter_mut().zip(&self.base.base_lrs).zip(&self.ranges) {
            let lr_values = [*initial_lr, r.max_lr, r.min_lr];
            let momenta = [r.max_momentum, r.base_momentum];
            let mut start_step = 0.0;
            for (i, (&(_, s_lr, e_lr, s_m, e_m), &end_step)) in phases.iter().zip(&self.phase_ends).enumerate() {
                if step <= end_step || i == phases.len() - 1 {
                    let pct = (step - start_step) / (end_step - start_step);
                    let anneal = |a: f64, b: f64| o.anneal_strategy.anneal(a, b, pct);
                    lrs.push(anneal(lr_values[s_lr], lr_values[e_lr]));
                    if o.cycle_momentum {
                        g.momentum = anneal(momenta[s_m], momenta[e_m]);
                    }
                    break;
                }
                start_step = end_step;
            }
        }
        self.base.last_epoch = step_num;
        self.base.apply(opt, lrs);
        Ok(())
    }
}

impl LrScheduler for OneCycleLr {
    fn name(&self) -> &'static str {
        "one_cycle_lr"
    }

    fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        self.base.check_groups_exact(opt, "one_cycle_lr")?;
        self.apply_step(opt, self.base.last_epoch + 1)
    }

    fn jump_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        self.base.check_groups_exact(opt, "one_cycle_lr")?;
        self.apply_step(opt, epoch)
    }

    /// torch's form is absolute: a chained step is a plain one.
    fn chain_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        self.jump_to(opt, epoch)
    }

    fn last_lr(&self) -> Vec<f64> {
        self.base.last_lr.clone()
    }

    fn state_dict(&self) -> Vec<(String, f64)> {
        let o = &self.opts;
        let mut out = self.base.state();
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        for (k, v) in [
            ("max_lr", o.max_lr),
            ("total_steps", o.total_steps as f64),
            ("pct_start", o.pct_start),
            ("anneal_linear", flag(o.anneal_strategy == AnnealStrategy::Linear)),
            ("cycle_momentum", flag(o.cycle_momentum)),
            ("base_momentum", o.base_momentum),
            ("max_momentum", o.max_momentum),
            ("div_factor", o.div_factor),
            ("final_div_factor", o.final_div_factor),
            ("three_phase", flag(o.three_phase)),
            ("min_lr", self.ranges.first().map_or(0.0, |r| r.min_lr)),
            ("ranges.len", self.ranges.len() as f64),
        ] {
            out.push((k.to_string(), v));
        }
        out.extend(self.phase_ends.iter().enumerate().map(|(i, e)| (format!("phase_end.{i}"), *e)));
        for (i, r) in self.ranges.iter().enumerate() {
            out.extend(RANGE_KEYS.iter().zip(r.values()).map(|(k, v)| (format!("{k}.{i}"), v)));
        }
        out
    }

    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        let l = Lookup::new("one_cycle_lr", state)?;
        let base = self.base.load(&l)?;
        let opts = OneCycleOptions {
            max_lr: l.get("max_lr")?,
            total_steps: l.int("total_steps")?,
            pct_start: l.get("pct_start")?,
            anneal_strategy: if l.flag("anneal_linear")? { AnnealStrategy::Linear } else { AnnealStrategy::Cos },
            cycle_momentum: l.flag("cycle_momentum")?,
            base_momentum: l.get("base_momentum")?,
            max_momentum: l.get("max_momentum")?,
            div_factor: l.get("div_factor")?,
            final_div_factor: l.get("final_div_factor")?,
            three_phase: l.flag("three_phase")?,
        };
        opts.validate().map_err(|m| Error::format(format!("one_cycle_lr state dict: {m}")))?;
        // The resolved values (older states lack them: derived as at
        // construction).
        let min_lr = l.optional("min_lr")?.unwrap_or(opts.max_lr / opts.div_factor / opts.final_div_factor);
        // Each group's range; older states keep one for all groups.
        let groups = base.base_lrs.len();
        let ranges: Vec<GroupRange> = match l.optional("ranges.len")? {
            Some(n) if n != groups as f64 => return Err(l.bad("ranges.len", n)),
            Some(_) => (0..groups)
                .map(|i| {
                    let v = |k: &str| l.get(&format!("{k}.{i}"));
                    Ok(GroupRange {
                        max_lr: v(RANGE_KEYS[0])?,
                        min_lr: v(RANGE_KEYS[1])?,
                        max_momentum: v(RANGE_KEYS[2])?,
                        base_momentum: v(RANGE_KEYS[3])?,
                    })
                })
                .collect::<Result<_>>()?,
            None => vec![
                GroupRange {
                    max_lr: opts.max_lr,
                    min_lr,
                    max_momentum: opts.max_momentum,
                    base_momentum: opts.base_momentum
                };
                groups
            ],
        };
        let bad_range = ranges.iter().any(|r| {
            let lrs_ok = r.max_lr.is_finite() && r.max_lr > 0.0 && r.min_lr.is_finite() && r.min_lr >= 0.0;
            !(lrs_ok && r.max_momentum.is_finite() && r.base_momentum.is_finite())
        });
        if bad_range {
            return Err(Error::format(format!(
                "one_cycle_lr state dict: a param group's range is invalid: {ranges:?}"
            )));
        }
        let derived = opts.phases();
        let mut phase_ends = Vec::with_capacity(derived.len());
        for (i, p) in derived.iter().enumerate() {
            phase_ends.push(l.optional(&format!("phase_end.{i}"))?.unwrap_or(p.0));
        }
        // As `validate`: no empty phase (torch would divide by zero), the
        // last one ending at the last step; a finite min_lr >= 0.
        let mut start = 0.0;
        let empty = phase_ends.iter().any(|&e| {
            let bad = !e.is_finite() || e == start;
            start = e;
            bad
        });
        let last = opts.total_steps as f64 - 1.0;
        if empty || !(min_lr.is_finite() && min_lr >= 0.0) || phase_ends.last() != Some(&last) {
            return Err(Error::format(format!(
                "one_cycle_lr state dict: phase ends {phase_ends:?} (an empty phase, or not ending at step {last}) \
                 or min_lr {min_lr}"
            )));
        }
        l.finish()?;
        self.base = base;
        self.opts = opts;
        self.ranges = ranges;
        self.phase_ends = phase_ends;
        Ok(())
    }
}
