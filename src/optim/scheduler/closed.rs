//! Schedulers with a closed form: StepLR, MultiStepLR, ExponentialLR,
//! CosineAnnealingLR, LinearLR, ConstantLR, PolynomialLR and
//! CosineAnnealingWarmRestarts. Each also has torch's chainable form
//! (`get_lr`: the new lr from the group's current one), which a
//! ChainedScheduler composes.
use super::{Base, Lookup, LrScheduler};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// The error of a step whose torch form has no lr for a param group added
/// after the scheduler was built (torch's `zip(..., strict=True)` fails).
fn no_appended_lr(name: &str, epoch: i64) -> Error {
    Error::state(format!(
        "{name}: torch's schedule has no lr at step {epoch} for a param group added after the scheduler was built"
    ))
}

/// Implements `LrScheduler` from `lr_at`, `hypers` and `with_hypers`.
macro_rules! closed_form {
    ($t:ty, $name:literal) => {
        impl $t {
            /// The lrs at step `epoch` of the groups appended to the
            /// optimizer since construction (BackboneFinetuning's): torch's
            /// step moves them in its chainable form, and fails where that
            /// form needs a base lr they lack.
            fn appended_lrs(&self, opt: &dyn Optimizer, epoch: i64) -> Result<Vec<f64>> {
                opt.param_groups()
                    .iter()
                    .skip(self.base.base_lrs.len())
                    .map(|g| self.chained_lr(g.lr, None, epoch).ok_or_else(|| no_appended_lr($name, epoch)))
                    .collect()
            }

            /// Writes the lrs of `self.base.last_epoch` into the optimizer:
            /// the closed form's for the groups it was built with, then
            /// `appended` for the groups after them.
            fn apply_epoch(&mut self, opt: &mut dyn Optimizer, appended: Vec<f64>) {
                let epoch = self.base.last_epoch;
                let mut lrs: Vec<f64> = self.base.base_lrs.iter().map(|b| self.lr_at(*b, epoch)).collect();
                lrs.extend(appended);
                self.base.apply(opt, lrs);
            }
        }

        impl LrScheduler for $t {
            fn name(&self) -> &'static str {
                $name
            }

            fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
                self.base.check_groups(opt, $name)?;
                let appended = self.appended_lrs(opt, self.base.last_epoch + 1)?;
                self.base.last_epoch += 1;
                self.apply_epoch(opt, appended);
                Ok(())
            }

            /// torch's closed form lists the base lrs only: no group may
            /// have been appended.
            fn jump_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
                self.base.check_groups_exact(opt, $name)?;
                self.base.last_epoch = epoch;
                self.apply_epoch(opt, Vec::new());
                Ok(())
            }

            fn chained_step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
                self.chain_to(opt, self.base.last_epoch + 1)
            }

            fn chain_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
                self.base.check_groups(opt, $name)?;
                let lrs = opt
                    .param_groups()
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        self.chained_lr(g.lr, self.base.base_lrs.get(i).copied(), epoch)
                            .ok_or_else(|| no_appended_lr($name, epoch))
                    })
                    .collect::<Result<_>>()?;
                self.base.last_epoch = epoch;
                self.base.apply(opt, lrs);
                Ok(())
            }

            fn last_lr(&self) -> Vec<f64> {
                self.base.last_lr.clone()
            }

            fn state_dict(&self) -> Vec<(String, f64)> {
                let mut out = self.base.state();
                out.extend(self.hypers());
                out
            }

            fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
                let l = Lookup::new($name, state)?;
                let base = self.base.load(&l)?;
                let mut new = self.with_hypers(&l)?;
                l.finish()?;
                new.base = base;
                *self = new;
                Ok(())
            }
        }
    };
}

/// Multiplies the lr by `gamma` every `step_size` steps (`StepLR`).
#[derive(Debug, Clone)]
pub struct StepLr {
    base: Base,
    step_size: i64,
    gamma: f64,
}

impl StepLr {
    /// `lr = base_lr * gamma^(epoch / step_size)`; `step_size >= 1`.
    pub fn new(opt: &mut dyn Optimizer, step_size: i64, gamma: f64) -> Result<Self> {
        check_step_size(step_size).map_err(Error::invalid)?;
        check_finite("gamma", gamma).map_err(Error::invalid)?;
        let mut s = StepLr { base: Base::attach(opt), step_size, gamma };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        base_lr * self.gamma.powf(epoch.div_euclid(self.step_size) as f64)
    }

    /// torch's chainable `get_lr`: times `gamma` at each non-zero
    /// multiple of `step_size`.
    fn chained_lr(&self, lr: f64, _base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        Some(if epoch == 0 || epoch % self.step_size != 0 { lr } else { lr * self.gamma })
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        vec![("step_size".into(), self.step_size as f64), ("gamma".into(), self.gamma)]
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let (step_size, gamma) = (l.int("step_size")?, l.get("gamma")?);
        check_step_size(step_size).map_err(Error::format)?;
        check_finite("gamma", gamma).map_err(Error::format)?;
        Ok(StepLr { base: self.base.clone(), step_size, gamma })
    }
}
closed_form!(StepLr, "step_lr");

/// Multiplies the lr by `gamma` at every milestone (`MultiStepLR`).
#[derive(Debug, Clone)]
pub struct MultiStepLr {
    base: Base,
    milestones: Vec<i64>,
    gamma: f64,
}

impl MultiStepLr {
    /// `lr = base_lr * gamma^(number of milestones <= epoch)`; a milestone
    /// listed twice counts twice, as in torch.
    pub fn new(opt: &mut dyn Optimizer, milestones: &[i64], gamma: f64) -> Result<Self> {
        check_finite("gamma", gamma).map_err(Error::invalid)?;
        let mut milestones = milestones.to_vec();
        milestones.sort_unstable();
        let mut s = MultiStepLr { base: Base::attach(opt), milestones, gamma };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        let passed = self.milestones.partition_point(|m| *m <= epoch);
        base_lr * self.gamma.powf(passed as f64)
    }

    /// torch's chainable `get_lr`: times `gamma` to the number of times
    /// `epoch` is listed.
    fn chained_lr(&self, lr: f64, _base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        let times = self.milestones.iter().filter(|m| **m == epoch).count();
        Some(if times == 0 { lr } else { lr * self.gamma.powf(times as f64) })
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        let mut out =
            vec![("gamma".to_string(), self.gamma), ("milestones.len".to_string(), self.milestones.len() as f64)];
        out.extend(self.milestones.iter().enumerate().map(|(i, m)| (format!("milestones.{i}"), *m as f64)));
        out
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let gamma = l.get("gamma")?;
        check_finite("gamma", gamma).map_err(Error::format)?;
        let n = l.int("milestones.len")?;
        if !(0..=1_000_000).contains(&n) {
            return Err(l.bad("milestones.len", n as f64));
        }
        let mut milestones = (0..n).map(|i| l.int(&format!("milestones.{i}"))).collect::<Result<Vec<_>>>()?;
        milestones.sort_unstable();
        Ok(MultiStepLr { base: self.base.clone(), milestones, gamma })
    }
}
closed_form!(MultiStepLr, "multi_step_lr");

/// Multiplies the lr by `gamma` every step (`ExponentialLR`).
#[derive(Debug, Clone)]
pub struct ExponentialLr {
    base: Base,
    gamma: f64,
}

impl ExponentialLr {
    /// `lr = base_lr * gamma^epoch`.
    pub fn new(opt: &mut dyn Optimizer, gamma: f64) -> Result<Self> {
        check_finite("gamma", gamma).map_err(Error::invalid)?;
        let mut s = ExponentialLr { base: Base::attach(opt), gamma };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        base_lr * self.gamma.powf(epoch as f64)
    }

    /// torch's chainable `get_lr`: times `gamma` each step.
    fn chained_lr(&self, lr: f64, _base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        Some(if epoch == 0 { lr } else { lr * self.gamma })
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        vec![("gamma".into(), self.gamma)]
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let gamma = l.get("gamma")?;
        check_finite("gamma", gamma).map_err(Error::format)?;
        Ok(ExponentialLr { base: self.base.clone(), gamma })
    }
}
closed_form!(ExponentialLr, "exponential_lr");

/// Cosine annealing from the base lr to `eta_min` over `t_max` steps
/// (`CosineAnnealingLR`, without restarts; past `t_max` the cosine goes on).
#[derive(Debug, Clone)]
pub struct CosineAnnealingLr {
    base: Base,
    t_max: i64,
    eta_min: f64,
}

impl CosineAnnealingLr {
    /// `lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2`;
    /// `t_max >= 1`.
    pub fn new(opt: &mut dyn Optimizer, t_max: i64, eta_min: f64) -> Result<Self> {
        check_t_max(t_max, eta_min).map_err(Error::invalid)?;
        let mut s = CosineAnnealingLr { base: Base::attach(opt), t_max, eta_min };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        let angle = std::f64::consts::PI * epoch as f64 / self.t_max as f64;
        self.eta_min + (base_lr - self.eta_min) * (1.0 + angle.cos()) / 2.0
    }

    /// torch's chainable `get_lr`: the ratio of successive cosine points
    /// applied to the current lr (past `t_max`, the climb back up).
    /// At a restart torch's `get_lr` pairs the groups with the base lrs:
    /// a group appended after construction (no `base_lr`) has none.
    fn chained_lr(&self, lr: f64, base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        use std::f64::consts::PI;
        let t_max = self.t_max as f64;
        if epoch == 0 {
            Some(lr)
        } else if (epoch - 1 - self.t_max).rem_euclid(2 * self.t_max) == 0 {
            base_lr.map(|b| lr + (b - self.eta_min) * (1.0 - (PI / t_max).cos()) / 2.0)
        } else {
            let ratio = (1.0 + (PI * epoch as f64 / t_max).cos()) / (1.0 + (PI * (epoch - 1) as f64 / t_max).cos());
            Some(ratio * (lr - self.eta_min) + self.eta_min)
        }
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        vec![("t_max".into(), self.t_max as f64), ("eta_min".into(), self.eta_min)]
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let (t_max, eta_min) = (l.int("t_max")?, l.get("eta_min")?);
        check_t_max(t_max, eta_min).map_err(Error::format)?;
        Ok(CosineAnnealingLr { base: self.base.clone(), t_max, eta_min })
    }
}
closed_form!(CosineAnnealingLr, "cosine_annealing_lr");

/// Linear change of the lr factor from `start_factor` to `end_factor` over
/// `total_iters` steps (`LinearLR`, the usual linear warm-up).
#[derive(Debug, Clone)]
pub struct LinearLr {
    base: Base,
    start_factor: f64,
    end_factor: f64,
    total_iters: i64,
}

impl LinearLr {
    /// `lr = base_lr * (start + (end - start) * min(total_iters, epoch) / total_iters)`;
    /// `0 < start_factor <= 1`, `0 <= end_factor <= 1`, `total_iters >= 1`.
    pub fn new(opt: &mut dyn Optimizer, start_factor: f64, end_factor: f64, total_iters: i64) -> Result<Self> {
        check_linear(start_factor, end_factor, total_iters).map_err(Error::invalid)?;
        let mut s = LinearLr { base: Base::attach(opt), start_factor, end_factor, total_iters };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        let done = self.total_iters.min(epoch) as f64;
        let delta = self.end_factor - self.start_factor;
        base_lr * (self.start_factor + delta * done / self.total_iters as f64)
    }

    /// torch's chainable `get_lr`: `start_factor` first, then the ratio of
    /// successive factors until `total_iters`.
    fn chained_lr(&self, lr: f64, _base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        let delta = self.end_factor - self.start_factor;
        Some(if epoch == 0 {
            lr * self.start_factor
        } else if epoch > self.total_iters {
            lr
        } else {
            lr * (1.0 + delta / (self.total_iters as f64 * self.start_factor + (epoch - 1) as f64 * delta))
        })
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        vec![
            ("start_factor".into(), self.start_factor),
            ("end_factor".into(), self.end_factor),
            ("total_iters".into(), self.total_iters as f64),
        ]
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let (start_factor, end_factor) = (l.get("start_factor")?, l.get("end_factor")?);
        let total_iters = l.int("total_iters")?;
        check_linear(start_factor, end_factor, total_iters).map_err(Error::format)?;
        Ok(LinearLr { base: self.base.clone(), start_factor, end_factor, total_iters })
    }
}
closed_form!(LinearLr, "linear_lr");

/// The lr factor `factor` until `total_iters` steps, then 1 (`ConstantLR`).
#[derive(Debug, Clone)]
pub struct ConstantLr {
    base: Base,
    factor: f64,
    total_iters: i64,
}

impl ConstantLr {
    /// `lr = base_lr * (factor if epoch < total_iters else 1)`;
    /// `0 <= factor <= 1`, `total_iters >= 0`.
    pub fn new(opt: &mut dyn Optimizer, factor: f64, total_iters: i64) -> Result<Self> {
        check_constant(factor, total_iters).map_err(Error::invalid)?;
        let mut s = ConstantLr { base: Base::attach(opt), factor, total_iters };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        let done = if epoch >= self.total_iters { 1.0 } else { 0.0 };
        base_lr * (self.factor + done * (1.0 - self.factor))
    }

    /// torch's chainable `get_lr`: times `factor` first, divided back out
    /// at `total_iters`.
    fn chained_lr(&self, lr: f64, _base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        Some(if epoch == 0 {
            lr * self.factor
        } else if epoch != self.total_iters {
            lr
        } else {
            lr * (1.0 / self.factor)
        })
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        vec![("factor".into(), self.factor), ("total_iters".into(), self.total_iters as f64)]
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let (factor, total_iters) = (l.get("factor")?, l.int("total_iters")?);
        check_constant(factor, total_iters).map_err(Error::format)?;
        Ok(ConstantLr { base: self.base.clone(), factor, total_iters })
    }
}
closed_form!(ConstantLr, "constant_lr");

/// Polynomial decay of the lr to 0 over `total_iters` steps
/// (`PolynomialLR`).
#[derive(Debug, Clone)]
pub struct PolynomialLr {
    base: Base,
    total_iters: i64,
    power: f64,
}

impl PolynomialLr {
    /// `lr = base_lr * (1 - min(total_iters, epoch) / total_iters)^power`;
    /// `total_iters >= 1`, `power` finite.
    pub fn new(opt: &mut dyn Optimizer, total_iters: i64, power: f64) -> Result<Self> {
        check_polynomial(total_iters, power).map_err(Error::invalid)?;
        let mut s = PolynomialLr { base: Base::attach(opt), total_iters, power };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        let done = self.total_iters.min(epoch) as f64;
        base_lr * (1.0 - done / self.total_iters as f64).powf(self.power)
    }

    /// torch's chainable `get_lr`: the ratio of successive decay factors.
    fn chained_lr(&self, lr: f64, _base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        if epoch == 0 || epoch > self.total_iters {
            return Some(lr);
        }
        let total = self.total_iters as f64;
        let decay = ((1.0 - epoch as f64 / total) / (1.0 - (epoch - 1) as f64 / total)).powf(self.power);
        Some(lr * decay)
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        vec![("total_iters".into(), self.total_iters as f64), ("power".into(), self.power)]
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let (total_iters, power) = (l.int("total_iters")?, l.get("power")?);
        check_polynomial(total_iters, power).map_err(Error::format)?;
        Ok(PolynomialLr { base: self.base.clone(), total_iters, power })
    }
}
closed_form!(PolynomialLr, "polynomial_lr");

/// Cosine annealing restarted every `t_0` steps, each period `t_mult` times
/// longer than the one before (`CosineAnnealingWarmRestarts`, SGDR).
#[derive(Debug, Clone)]
pub struct CosineAnnealingWarmRestarts {
    base: Base,
    t_0: i64,
    t_mult: i64,
    eta_min: f64,
}

impl CosineAnnealingWarmRestarts {
    /// `lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * t_cur / t_i)) / 2`
    /// with torch's integer `t_cur` / `t_i` after `epoch` steps; `t_0 >= 1`,
    /// `t_mult >= 1`, `eta_min` finite.
    pub fn new(opt: &mut dyn Optimizer, t_0: i64, t_mult: i64, eta_min: f64) -> Result<Self> {
        check_restarts(t_0, t_mult, eta_min).map_err(Error::invalid)?;
        let mut s = CosineAnnealingWarmRestarts { base: Base::attach(opt), t_0, t_mult, eta_min };
        s.apply_epoch(opt, Vec::new());
        Ok(s)
    }

    /// torch's `(T_cur, T_i)` after `epoch` steps (its step loop, in closed
    /// form: at most 63 periods fit in an i64 when `t_mult >= 2`).
    fn period(&self, epoch: i64) -> (i64, i64) {
        let epoch = epoch.max(0);
        if self.t_mult == 1 {
            return (epoch % self.t_0, self.t_0);
        }
        let (mut t_cur, mut t_i) = (epoch, self.t_0);
        while t_cur >= t_i {
            t_cur -= t_i;
            match t_i.checked_mul(self.t_mult) {
                Some(next) => t_i = next,
                None => break,
            }
        }
        (t_cur, t_i)
    }

    fn lr_at(&self, base_lr: f64, epoch: i64) -> f64 {
        let (t_cur, t_i) = self.period(epoch);
        let angle = std::f64::consts::PI * t_cur as f64 / t_i as f64;
        self.eta_min + (base_lr - self.eta_min) * (1.0 + angle.cos()) / 2.0
    }

    /// torch's `get_lr` is its closed form (from `base_lr`, not the
    /// current lr).
    /// Absolute in torch, from the base lrs: none for an appended group.
    fn chained_lr(&self, _lr: f64, base_lr: Option<f64>, epoch: i64) -> Option<f64> {
        base_lr.map(|b| self.lr_at(b, epoch))
    }

    fn hypers(&self) -> Vec<(String, f64)> {
        vec![("t_0".into(), self.t_0 as f64), ("t_mult".into(), self.t_mult as f64), ("eta_min".into(), self.eta_min)]
    }

    fn with_hypers(&self, l: &Lookup) -> Result<Self> {
        let (t_0, t_mult, eta_min) = (l.int("t_0")?, l.int("t_mult")?, l.get("eta_min")?);
        check_restarts(t_0, t_mult, eta_min).map_err(Error::format)?;
        Ok(CosineAnnealingWarmRestarts { base: self.base.clone(), t_0, t_mult, eta_min })
    }
}
closed_form!(CosineAnnealingWarmRestarts, "cosine_annealing_warm_restarts");

fn check_constant(factor: f64, total_iters: i64) -> std::result::Result<(), String> {
    if !(0.0..=1.0).contains(&factor) {
        return Err(format!("Constant multiplicative factor expected to be between 0 and 1, got {factor}"));
    }
    if total_iters < 0 {
        return Err(format!("total_iters must be >= 0, got {total_iters}"));
    }
    Ok(())
}

fn check_polynomial(total_iters: i64, power: f64) -> std::result::Result<(), String> {
    if total_iters < 1 {
        return Err(format!("total_iters must be >= 1, got {total_iters}"));
    }
    check_finite("power", power)
}

fn check_restarts(t_0: i64, t_mult: i64, eta_min: f64) -> std::result::Result<(), String> {
    if t_0 < 1 {
        return Err(format!("Expected positive integer T_0, but got {t_0}"));
    }
    if t_mult < 1 {
        return Err(format!("Expected integer T_mult >= 1, but got {t_mult}"));
    }
    check_finite("eta_min", eta_min)
}

fn check_finite(what: &str, v: f64) -> std::result::Result<(), String> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(format!("{what} must be finite, got {v}"))
    }
}

fn check_step_size(step_size: i64) -> std::result::Result<(), String> {
    if step_size < 1 {
        return Err(format!("step_size must be >= 1, got {step_size}"));
    }
    Ok(())
}

fn check_t_max(t_max: i64, eta_min: f64) -> std::result::Result<(), String> {
    if t_max < 1 {
        return Err(format!("t_max must be >= 1, got {t_max}"));
    }
    check_finite("eta_min", eta_min)
}

fn check_linear(start: f64, end: f64, total_iters: i64) -> std::result::Result<(), String> {
    if !(start > 0.0 && start <= 1.0) {
        return Err(format!(
            "Starting multiplicative factor expected to be greater than 0 and less or equal to 1, got {start}"
        ));
    }
    if !(0.0..=1.0).contains(&end) {
        return Err(format!("Ending multiplicative factor expected to be between 0 and 1, got {end}"));
    }
    if total_iters < 1 {
        return Err(format!("total_iters must be >= 1, got {total_iters}"));
    }
    Ok(())
}
