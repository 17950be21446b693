//! CyclicLR, `torch.optim.lr_scheduler.CyclicLR` (built-in scale modes).
use super::{Base, Lookup, LrScheduler};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// How the amplitude of each cycle scales (torch's `mode`; in C,
/// `fulmen_cyclic_mode`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CyclicMode {
    /// Constant amplitude.
    Triangular = 0,
    /// The amplitude halves every cycle.
    Triangular2 = 1,
    /// The amplitude scales by `gamma ** iteration`.
    ExpRange = 2,
}

impl CyclicMode {
    /// Reads the C value.
    pub fn from_i32(v: i32) -> Result<CyclicMode> {
        match v {
            0 => Ok(CyclicMode::Triangular),
            1 => Ok(CyclicMode::Triangular2),
            2 => Ok(CyclicMode::ExpRange),
            _ => Err(Error::invalid(format!(
                "{v} is not a fulmen_cyclic_mode (0 triangular, 1 triangular2, 2 exp_range)"
            ))),
        }
    }
}

/// Options of [`CyclicLr`]; [`CyclicLrOptions::new`] gives torch's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CyclicLrOptions {
    /// Lower learning rate (every group).
    pub base_lr: f64,
    /// Upper learning rate (every group).
    pub max_lr: f64,
    /// Steps of the increasing half (default 2000).
    pub step_size_up: i64,
    /// Steps of the decreasing half; `None` = `step_size_up`.
    pub step_size_down: Option<i64>,
    /// Amplitude scaling (default triangular).
    pub mode: CyclicMode,
    /// `ExpRange`'s factor (default 1).
    pub gamma: f64,
    /// Cycle the momentum (or Adam's beta1) inversely (default true).
    pub cycle_momentum: bool,
    /// Lower momentum (default 0.8).
    pub base_momentum: f64,
    /// Upper momentum (default 0.9).
    pub max_momentum: f64,
}

impl CyclicLrOptions {
    /// torch's defaults between `base_lr` and `max_lr`.
    pub fn new(base_lr: f64, max_lr: f64) -> Self {
        CyclicLrOptions {
            base_lr,
            max_lr,
            step_size_up: 2000,
            step_size_down: None,
            mode: CyclicMode::Triangular,
            gamma: 1.0,
            cycle_momentum: true,
            base_momentum: 0.8,
            max_momentum: 0.9,
        }
    }

    /// Checks the options (torch divides by the cycle's size).
    pub fn validate(&self) -> std::result::Result<(), String> {
        for (name, v) in [("base_lr", self.base_lr), ("max_lr", self.max_lr), ("gamma", self.gamma)] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{name} must be finite and >= 0, got {v}"));
            }
        }
        if !(self.base_momentum.is_finite() && self.max_momentum.is_finite()) {
            return Err("base_momentum and max_momentum must be finite".into());
        }
        let down = self.step_size_down.unwrap_or(self.step_size_up);
        if self.step_size_up < 1 || down < 1 {
            return Err(format!("step_size_up ({}) and step_size_down ({down}) must be >= 1", self.step_size_up));
        }
        Ok(())
    }

    /// Steps in a cycle and the rising part's share of it.
    fn cycle(&self) -> (f64, f64) {
        let up = self.step_size_up as f64;
        let down = self.step_size_down.map_or(up, |d| d as f64);
        let total = up + down;
        (total, up / total)
    }

    /// torch's `scale_fn` of the built-in modes, with its `scale_mode`.
    fn scale(&self, cycle: f64, iteration: f64) -> f64 {
        match self.mode {
            CyclicMode::Triangular => 1.0,
            CyclicMode::Triangular2 => 1.0 / 2f64.powf(cycle - 1.0),
            CyclicMode::ExpRange => self.gamma.powf(iteration),
        }
    }
}

/// CyclicLR: the lr climbs from `base_lr` to `max_lr` in `step_size_up`
/// steps and returns in `step_size_down`, cycle after cycle; the momentum
/// (beta1 for the Adam family) moves the other way. Usually stepped per
/// batch.
#[derive(Debug, Clone)]
pub struct CyclicLr {
    base: Base,
    opts: CyclicLrOptions,
    /// Each group's upper lr and momentum bounds (torch's `max_lrs`,
    /// `base_momentums`, `max_momentums`); the lower lr is `base_lrs`.
    ranges: Vec<[f64; 3]>,
}

/// The per-group lists a state keeps, in the order of a range's values.
const RANGE_KEYS: [&str; 3] = ["max_lrs", "base_momentums", "max_momentums"];

impl CyclicLr {
    /// Sets every group's lr (and `initial_lr`) to `base_lr` and, when
    /// cycling momentum, its momentum to `max_momentum`, as torch does.
    pub fn new(opt: &mut dyn Optimizer, opts: CyclicLrOptions) -> Result<Self> {
        Self::with_ranges(opt, opts, &[], &[])
    }

    /// As [`CyclicLr::new`] with each param group's own range (torch's
    /// `base_lr` and `max_lr` given as lists; the options' values are then
    /// unused): `base_lrs` and `max_lrs` hold one finite value >= 0 per
    /// group, or are empty for the options' value in every group.
    pub fn with_ranges(
        opt: &mut dyn Optimizer,
        opts: CyclicLrOptions,
        base_lrs: &[f64],
        max_lrs: &[f64],
    ) -> Result<Self> {
        let groups = opt.param_groups().len();
        for (what, values) in [("base_lrs", base_lrs), ("max_lrs", max_lrs)] {
            if !values.is_empty() && values.len() != groups {
                return Err(Error::invalid(format!(
                    "expected {groups} {what} (one per param group), got {}",
                    values.len()
                )));
            }
            if let Some(bad) = values.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
                return Err(Error::invalid(format!("{what} must be finite and >= 0, got {bad}")));
            }
        }
        let opts = CyclicLrOptions {
            base_lr: base_lrs.first().copied().unwrap_or(opts.base_lr),
            max_lr: max_lrs.first().copied().unwrap_or(opts.max_lr),
            ..opts
        };
        opts.validate().map_err(Error::invalid)?;
        if opts.cycle_momentum && crate::optim::momentum_key(opt.name()).is_none() {
            return Err(Error::invalid(format!(
                "optimizer must support momentum or beta1 with `cycle_momentum` option enabled ({} has neither)",
                opt.name()
            )));
        }
        let lower = |i: usize| base_lrs.get(i).copied().unwrap_or(opts.base_lr);
        for (i, g) in opt.param_groups_mut().iter_mut().enumerate() {
            g.lr = lower(i);
            // torch's setdefault: an earlier scheduler's initial_lr stays.
            g.initial_lr.get_or_insert(lower(i));
            if opts.cycle_momentum {
                g.momentum = opts.max_momentum;
            }
        }
        let mut base = Base::attach(opt);
        base.base_lrs = (0..groups).map(lower).collect();
        let ranges = (0..groups)
            .map(|i| [max_lrs.get(i).copied().unwrap_or(opts.max_lr), opts.base_momentum, opts.max_momentum])
            .collect();
        let mut s = CyclicLr { base, opts, ranges };
        s.apply_step(opt, 0);
        Ok(s)
    }

    /// Writes the lr (and momentum) of step `n`: torch's `get_lr`.
    fn apply_step(&mut self, opt: &mut dyn Optimizer, n: i64) {
        let o = self.opts;
        let (total, ratio) = o.cycle();
        let epoch = n as f64;
        let cycle = (1.0 + epoch / total).floor();
        let x = 1.0 + epoch / total - cycle;
        let factor = if x <= ratio { x / ratio } else { (x - 1.0) / (ratio - 1.0) };
        let scale = o.scale(cycle, epoch);
        let lrs: Vec<f64> =
            self.base.base_lrs.iter().zip(&self.ranges).map(|(b, r)| b + (r[0] - b) * factor * scale).collect();
        if o.cycle_momentum {
            for (g, [_, base_m, max_m]) in opt.param_groups_mut().iter_mut().zip(&self.ranges) {
                g.momentum = max_m - (max_m - base_m) * factor * scale;
            }
        }
        self.base.last_epoch = n;
        self.base.apply(opt, lrs);
    }
}

impl LrScheduler for CyclicLr {
    fn name(&self) -> &'static str {
        "cyclic_lr"
    }

    fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        self.base.check_groups_exact(opt, "cyclic_lr")?;
        self.apply_step(opt, self.base.last_epoch + 1);
        Ok(())
    }

    fn jump_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        self.base.check_groups_exact(opt, "cyclic_lr")?;
        self.apply_step(opt, epoch);
        Ok(())
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
        let mode = match o.mode {
            CyclicMode::Triangular => 0.0,
            CyclicMode::Triangular2 => 1.0,
            CyclicMode::ExpRange => 2.0,
        };
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        for (k, v) in [
            ("base_lr", o.base_lr),
            ("max_lr", o.max_lr),
            ("step_size_up", o.step_size_up as f64),
            ("step_size_down", o.step_size_down.unwrap_or(o.step_size_up) as f64),
            ("mode", mode),
            ("gamma", o.gamma),
            ("cycle_momentum", flag(o.cycle_momentum)),
            ("base_momentum", o.base_momentum),
            ("max_momentum", o.max_momentum),
            ("ranges.len", self.ranges.len() as f64),
        ] {
            out.push((k.to_string(), v));
        }
        for (i, r) in self.ranges.iter().enumerate() {
            out.extend(RANGE_KEYS.iter().zip(r).map(|(k, v)| (format!("{k}.{i}"), *v)));
        }
        out
    }

    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        let l = Lookup::new("cyclic_lr", state)?;
        let base = self.base.load(&l)?;
        let mode = match l.int("mode")? {
            0 => CyclicMode::Triangular,
            1 => CyclicMode::Triangular2,
            2 => CyclicMode::ExpRange,
            m => return Err(l.bad("mode", m as f64)),
        };
        let opts = CyclicLrOptions {
            base_lr: l.get("base_lr")?,
            max_lr: l.get("max_lr")?,
            step_size_up: l.int("step_size_up")?,
            step_size_down: Some(l.int("step_size_down")?),
            mode,
            gamma: l.get("gamma")?,
            cycle_momentum: l.flag("cycle_momentum")?,
            base_momentum: l.get("base_momentum")?,
            max_momentum: l.get("max_momentum")?,
        };
        opts.validate().map_err(|m| Error::format(format!("cyclic_lr state dict: {m}")))?;
        // Each group's range; older states keep one for all groups.
        let groups = base.base_lrs.len();
        let ranges: Vec<[f64; 3]> = match l.optional("ranges.len")? {
            Some(n) if n != groups as f64 => return Err(l.bad("ranges.len", n)),
            Some(_) => (0..groups)
                .map(|i| {
                    let v = |k: &str| l.get(&format!("{k}.{i}"));
                    Ok([v(RANGE_KEYS[0])?, v(RANGE_KEYS[1])?, v(RANGE_KEYS[2])?])
                })
                .collect::<Result<_>>()?,
            None => vec![[opts.max_lr, opts.base_momentum, opts.max_momentum]; groups],
        };
        if ranges.iter().any(|r| !(r.iter().all(|v| v.is_finite()) && r[0] >= 0.0)) {
            return Err(Error::format(format!("cyclic_lr state dict: a param group's range is invalid: {ranges:?}")));
        }
        l.finish()?;
        self.base = base;
        self.opts = opts;
        self.ranges = ranges;
        Ok(())
    }
}
