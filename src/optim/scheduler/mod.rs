//! Learning-rate schedulers with the schedules of `torch.optim.lr_scheduler`.
//!
//! StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR and LinearLR use
//! torch's closed forms (`_get_closed_form_lr`) from `base_lrs` and the epoch
//! counter, so the lr after `n` steps does not depend on the step history
//! (torch's default chainable form gives the same values up to rounding when
//! nothing else changes the lr). OneCycleLR and ReduceLROnPlateau follow
//! torch's only form. Inside a ChainedScheduler, where each scheduler
//! starts from the lr the one before wrote, they step in torch's chainable
//! form instead (`LrScheduler::chain_to`).
//!
//! Like torch, constructing a scheduler records `initial_lr` in every group
//! (if unset) and writes the lr of epoch 0 into the optimizer.
use super::Optimizer;
use crate::checkpoint::numbers::{finite_or, Infinity};
use crate::error::{Error, ErrorCode, Result};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

mod chained;
mod closed;
mod cyclic;
mod lambda;
mod one_cycle;
mod plateau;
mod sequential;
mod swa_lr;

pub use chained::ChainedLr;
pub(crate) use chained::MAX_CHAINED;
pub use closed::{
    ConstantLr, CosineAnnealingLr, CosineAnnealingWarmRestarts, ExponentialLr, LinearLr, MultiStepLr, PolynomialLr,
    StepLr,
};
pub use cyclic::{CyclicLr, CyclicLrOptions, CyclicMode};
pub use lambda::{LambdaLr, LrLambda};
pub use one_cycle::{AnnealStrategy, OneCycleLr, OneCycleOptions};
pub use plateau::{PlateauMode, PlateauOptions, ReduceLrOnPlateau, ThresholdMode};
pub use sequential::{check_milestones as check_sequential_milestones, SequentialLr};
pub use swa_lr::SwaLr;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod cyclic_tests;

#[cfg(test)]
mod chained_tests;

#[cfg(test)]
mod appended_tests;

/// A learning-rate scheduler driving an optimizer's group learning rates.
pub trait LrScheduler: Send {
    /// Short name, e.g. `"step_lr"`, `"one_cycle_lr"`.
    fn name(&self) -> &'static str;

    /// True for ReduceLROnPlateau: it steps on a monitored metric, after
    /// validation, where the others step right after the optimizer.
    fn reduce_on_plateau(&self) -> bool {
        false
    }

    /// Advances one step (epoch or batch, as the caller decides) and writes
    /// the new lr(s) into the optimizer. `metric` is required by
    /// ReduceLROnPlateau (error if `None`) and ignored by the others.
    fn step(&mut self, opt: &mut dyn Optimizer, metric: Option<f64>) -> Result<()>;

    /// torch's `_update_lr(epoch)`, as SequentialLR calls it at a
    /// milestone: sets the step counter to `epoch` and writes that step's
    /// lrs. A scheduler that steps on a metric refuses.
    fn jump_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        let _ = (opt, epoch);
        Err(Error::invalid(format!("{} cannot be part of a SequentialLR", self.name())))
    }

    /// torch's step in its chainable form, as ChainedScheduler runs it:
    /// sets the step counter to `epoch` and writes lrs computed from the
    /// groups' current lrs (`get_lr`), where the closed form computes them
    /// from the base lrs. `epoch` 0 is the step a constructor takes. Kinds
    /// whose torch form is absolute (LambdaLR, CyclicLR, OneCycleLR,
    /// CosineAnnealingWarmRestarts) write what a step or the constructor
    /// writes. A scheduler that steps on a metric, or runs others, refuses.
    fn chain_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        let _ = (opt, epoch);
        Err(Error::invalid(format!("{} cannot be part of a ChainedScheduler", self.name())))
    }

    /// One step in torch's chainable form ([`LrScheduler::chain_to`] the
    /// next step), as schedulers sharing an optimizer step in torch, so
    /// their factors compose. Kinds whose step already starts from the
    /// current lr (ReduceLROnPlateau, MultiplicativeLR, a chain) or writes
    /// an absolute one (LambdaLR, CyclicLR, OneCycleLR) take their step.
    fn chained_step(&mut self, opt: &mut dyn Optimizer, metric: Option<f64>) -> Result<()> {
        self.step(opt, metric)
    }

    /// Whether it has not stepped since its constructor (its `last_epoch`
    /// is 0), as a ChainedScheduler and schedulers sharing an optimizer
    /// need their parts.
    fn fresh(&self) -> bool {
        self.state_dict().iter().find(|(k, _)| k == "last_epoch").is_none_or(|(_, v)| *v == 0.0)
    }

    /// The learning rates written by the last step (or the constructor).
    fn last_lr(&self) -> Vec<f64>;

    /// State and hyperparameters as named numbers (`last_epoch`,
    /// `base_lrs.N`, `last_lr.N`, `best`, `num_bad_epochs`, ...).
    fn state_dict(&self) -> Vec<(String, f64)>;

    /// Restores what `state_dict` produced; a `Format` error on missing,
    /// unknown or invalid entries, leaving the scheduler unchanged.
    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()>;
}

/// A scheduler's state: named numbers.
pub(crate) type State = Vec<(String, f64)>;

/// A composite scheduler's state (SequentialLR's, ChainedScheduler's) split
/// into its own entries and each of its `n` parts' (`schedulers.I.KEY`).
pub(crate) fn split_parts(state: &[(String, f64)], n: usize, kind: &str) -> Result<(State, Vec<State>)> {
    let mut own = Vec::new();
    let mut parts: Vec<Vec<(String, f64)>> = vec![Vec::new(); n];
    for (k, v) in state {
        match k.strip_prefix("schedulers.").and_then(|rest| rest.split_once('.')) {
            Some((i, key)) => {
                let i = i.parse::<usize>().ok().filter(|i| *i < n).ok_or_else(|| {
                    Error::format(format!("{kind} state dict: '{k}' names no scheduler of the {n} it runs"))
                })?;
                parts[i].push((key.to_string(), *v));
            }
            None => own.push((k.clone(), *v)),
        }
    }
    Ok((own, parts))
}

/// The parts' states under `schedulers.I.`, as [`split_parts`] reads them.
pub(crate) fn join_parts(schedulers: &[Box<dyn LrScheduler>]) -> State {
    let mut out = Vec::new();
    for (i, s) in schedulers.iter().enumerate() {
        out.extend(s.state_dict().into_iter().map(|(k, v)| (format!("schedulers.{i}.{k}"), v)));
    }
    out
}

/// torch's constructions of `schedulers` on one optimizer, one after
/// another: every group back to its `initial_lr`, then each scheduler's
/// first step ([`LrScheduler::chain_to`] 0) in order, from the lr the one
/// before left.
pub(crate) fn replay_constructors<'a>(
    opt: &mut dyn Optimizer,
    schedulers: impl IntoIterator<Item = &'a mut Box<dyn LrScheduler>>,
) -> Result<()> {
    for g in opt.param_groups_mut() {
        if let Some(initial) = g.initial_lr {
            g.lr = initial;
        }
    }
    for (i, s) in schedulers.into_iter().enumerate() {
        s.chain_to(opt, 0).map_err(|e| e.context(format!("scheduler {i}")))?;
    }
    Ok(())
}

/// Loads each part's state into `schedulers`; on a failure the parts
/// already loaded are put back as they were.
pub(crate) fn load_parts(
    schedulers: &mut [Box<dyn LrScheduler>],
    parts: &[Vec<(String, f64)>],
    kind: &str,
) -> Result<()> {
    let before: Vec<Vec<(String, f64)>> = schedulers.iter().map(|s| s.state_dict()).collect();
    for (i, part) in parts.iter().enumerate() {
        if let Err(e) = schedulers[i].load_state_dict(part) {
            for (s, old) in schedulers.iter_mut().zip(&before).take(i) {
                let _ = s.load_state_dict(old);
            }
            return Err(e.context(format!("{kind} scheduler {i}")));
        }
    }
    Ok(())
}

/// Epoch counter, base and last learning rates shared by the schedulers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Base {
    /// torch's `last_epoch` (0 after construction).
    pub last_epoch: i64,
    /// Per-group `initial_lr` at construction.
    pub base_lrs: Vec<f64>,
    /// Learning rates written last.
    pub last_lr: Vec<f64>,
}

impl Base {
    /// Records `initial_lr` (if unset) in every group and takes them as the
    /// base learning rates, as torch's `LRScheduler.__init__`.
    pub fn attach(opt: &mut dyn Optimizer) -> Base {
        let base_lrs = opt.param_groups_mut().iter_mut().map(|g| *g.initial_lr.get_or_insert(g.lr)).collect();
        Base { last_epoch: 0, base_lrs, last_lr: Vec::new() }
    }

    /// Fails when the optimizer has fewer groups than at construction.
    /// Groups appended since (BackboneFinetuning's) are taken as torch
    /// takes them: the closed forms move them in their chainable form, and
    /// fail where torch's has no value for them.
    pub fn check_groups(&self, opt: &dyn Optimizer, name: &str) -> Result<()> {
        let n = opt.param_groups().len();
        if n < self.base_lrs.len() {
            return Err(Error::state(format!(
                "{name}: the optimizer has {n} param groups but the scheduler was built for {}",
                self.base_lrs.len()
            )));
        }
        Ok(())
    }

    /// Fails when the optimizer's group count changed since construction,
    /// for the kinds whose torch form pairs every group with a value of the
    /// construction (LambdaLR, MultiplicativeLR, CyclicLR, OneCycleLR, and
    /// any closed form jumped to by a SequentialLR).
    pub fn check_groups_exact(&self, opt: &dyn Optimizer, name: &str) -> Result<()> {
        let n = opt.param_groups().len();
        if n != self.base_lrs.len() {
            return Err(Error::state(format!(
                "{name}: the optimizer has {n} param groups but the scheduler was built for {} (torch's \
                 {name} cannot take a group added later either)",
                self.base_lrs.len()
            )));
        }
        Ok(())
    }

    /// Writes `lrs` into the first groups of the optimizer and remembers
    /// every group's lr (torch's `_last_lr`).
    pub fn apply(&mut self, opt: &mut dyn Optimizer, lrs: Vec<f64>) {
        for (g, lr) in opt.param_groups_mut().iter_mut().zip(&lrs) {
            g.lr = *lr;
        }
        self.last_lr = opt.param_groups().iter().map(|g| g.lr).collect();
    }

    /// Serialises the counter and both lr lists.
    pub fn state(&self) -> Vec<(String, f64)> {
        let mut out = vec![("last_epoch".to_string(), self.last_epoch as f64)];
        out.extend(self.base_lrs.iter().enumerate().map(|(i, v)| (format!("base_lrs.{i}"), *v)));
        out.extend(self.last_lr.iter().enumerate().map(|(i, v)| (format!("last_lr.{i}"), *v)));
        out
    }

    /// Reads what `state` wrote: `base_lrs` keeps its length, `last_lr`
    /// has at least as many entries (groups appended after construction).
    pub fn load(&self, l: &Lookup) -> Result<Base> {
        let last_epoch = l.int("last_epoch")?;
        let n = self.base_lrs.len();
        let base_lrs = (0..n).map(|i| l.get(&format!("base_lrs.{i}"))).collect::<Result<_>>()?;
        Ok(Base { last_epoch, base_lrs, last_lr: load_last_lr(l, n)? })
    }
}

/// A state's `last_lr.I` entries: at least `n` (the groups at
/// construction), then any more (groups appended since), bounded by the
/// state's own entries.
pub(crate) fn load_last_lr(l: &Lookup, n: usize) -> Result<Vec<f64>> {
    let mut last_lr: Vec<f64> = (0..n).map(|i| l.get(&format!("last_lr.{i}"))).collect::<Result<_>>()?;
    while let Some(v) = l.optional(&format!("last_lr.{}", last_lr.len()))? {
        last_lr.push(v);
    }
    Ok(last_lr)
}

/// Reads named numbers of a scheduler state dict, remembering which were used.
pub(crate) struct Lookup<'a> {
    kind: &'static str,
    map: HashMap<&'a str, f64>,
    used: RefCell<HashSet<&'a str>>,
}

impl<'a> Lookup<'a> {
    /// Indexes `state`; duplicate names are an error.
    pub fn new(kind: &'static str, state: &'a [(String, f64)]) -> Result<Self> {
        let mut map = HashMap::new();
        for (k, v) in state {
            if map.insert(k.as_str(), *v).is_some() {
                return Err(Error::format(format!("{kind} state dict: duplicate key '{k}'")));
            }
        }
        Ok(Lookup { kind, map, used: RefCell::new(HashSet::new()) })
    }

    /// The value of `key`: a `Format` error when it is missing or not
    /// finite (a NaN or infinite learning rate, factor or count is never
    /// a scheduler's state).
    pub fn get(&self, key: &str) -> Result<f64> {
        self.get_or(key, Infinity::Refused)
    }

    /// The value of `key`, which may also be infinite where `infinity`
    /// allows it (a best score), never NaN.
    pub fn get_or(&self, key: &str, infinity: Infinity) -> Result<f64> {
        match self.map.get_key_value(key) {
            Some((k, v)) => {
                self.used.borrow_mut().insert(*k);
                finite_or(*v, infinity, &format!("{} state dict: '{key}'", self.kind))
            }
            None => Err(Error::format(format!(
                "{} state dict: missing key '{key}' (is it the state of a {} scheduler?)",
                self.kind, self.kind
            ))),
        }
    }

    /// The value of `key` when present (then counted as read and checked
    /// as [`Lookup::get`] checks it).
    pub fn optional(&self, key: &str) -> Result<Option<f64>> {
        if self.map.contains_key(key) {
            self.get(key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// An integer value.
    pub fn int(&self, key: &str) -> Result<i64> {
        let v = self.get(key)?;
        if v.fract() != 0.0 || !v.is_finite() || v.abs() > 9.0e15 {
            return Err(self.bad(key, v));
        }
        Ok(v as i64)
    }

    /// A flag stored as 0 or 1.
    pub fn flag(&self, key: &str) -> Result<bool> {
        let v = self.get(key)?;
        if v == 0.0 || v == 1.0 {
            Ok(v == 1.0)
        } else {
            Err(self.bad(key, v))
        }
    }

    /// A `Format` error for a bad value.
    pub fn bad(&self, key: &str, v: f64) -> Error {
        Error::format(format!("{} state dict: invalid '{key}' {v}", self.kind))
    }

    /// Fails on keys that were never read.
    pub fn finish(&self) -> Result<()> {
        let used = self.used.borrow();
        match self.map.keys().find(|k| !used.contains(*k)) {
            Some(k) => Err(Error::format(format!(
                "{} state dict: unexpected key '{k}' (state of another scheduler?)",
                self.kind
            ))),
            None => Ok(()),
        }
    }
}

/// An `OutOfRange` error.
pub(crate) fn out_of_range(message: String) -> Error {
    Error::new(ErrorCode::OutOfRange, message)
}
