//! `ChainedScheduler`: several schedulers on one optimizer, all stepped at
//! each step, each in torch's chainable form, so their factors compose (a
//! constant warm-up factor times an exponential decay).
use super::{Lookup, LrScheduler};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// The most schedulers one ChainedScheduler runs.
pub(crate) const MAX_CHAINED: usize = 64;

const NAME: &str = "chained_scheduler";

/// Steps every scheduler in order at each step (torch's
/// `ChainedScheduler`). Closed-form kinds step in torch's chainable form
/// (`get_lr` from the current lr); LambdaLR, CyclicLR, OneCycleLR and
/// CosineAnnealingWarmRestarts write their absolute lrs, as in torch.
pub struct ChainedLr {
    schedulers: Vec<Box<dyn LrScheduler>>,
    /// Steps taken (not in torch's state; rebuilt from the parts' counters).
    steps: i64,
    last_lr: Vec<f64>,
}

impl ChainedLr {
    /// Takes `schedulers` (1 to [`MAX_CHAINED`]), all built on `opt` and
    /// none stepped yet. torch builds them one after another, each
    /// constructor stepping from the lr the one before left; fulmen's
    /// constructors wrote their own closed forms, so the chain puts every
    /// group's lr back to its `initial_lr` and replays those steps in
    /// order. ReduceLROnPlateau cannot take part (it steps on a metric), nor
    /// can a SequentialLR or another chain.
    pub fn new(opt: &mut dyn Optimizer, schedulers: Vec<Box<dyn LrScheduler>>) -> Result<Self> {
        if schedulers.is_empty() || schedulers.len() > MAX_CHAINED {
            return Err(Error::invalid(format!(
                "ChainedScheduler expects 1 to {MAX_CHAINED} schedulers, got {}",
                schedulers.len()
            )));
        }
        for (i, s) in schedulers.iter().enumerate() {
            if s.reduce_on_plateau() {
                return Err(Error::invalid(format!(
                    "ChainedScheduler does not support ReduceLROnPlateau (scheduler {i}): it steps on a metric"
                )));
            }
            if !s.fresh() {
                return Err(Error::invalid(format!(
                    "ChainedScheduler expects schedulers that have not stepped; scheduler {i} ({}) has",
                    s.name()
                )));
            }
        }
        let mut chain = ChainedLr { schedulers, steps: 0, last_lr: Vec::new() };
        super::replay_constructors(opt, chain.schedulers.iter_mut()).map_err(|e| e.context("ChainedScheduler"))?;
        chain.last_lr = opt.param_groups().iter().map(|g| g.lr).collect();
        Ok(chain)
    }
}

impl LrScheduler for ChainedLr {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Steps each scheduler in order, each from the lrs the one before
    /// wrote.
    fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        let epoch = self.steps + 1;
        for (i, s) in self.schedulers.iter_mut().enumerate() {
            s.chain_to(opt, epoch).map_err(|e| e.context(format!("{NAME} scheduler {i}")))?;
        }
        self.steps = epoch;
        self.last_lr = opt.param_groups().iter().map(|g| g.lr).collect();
        Ok(())
    }

    /// A replay of the constructors (step 0, for a chain sharing its
    /// optimizer with other schedulers) replays its parts'.
    fn chain_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        if epoch != 0 || self.steps != 0 {
            return Err(Error::invalid(format!("{NAME} cannot be part of a ChainedScheduler")));
        }
        for (i, s) in self.schedulers.iter_mut().enumerate() {
            s.chain_to(opt, 0).map_err(|e| e.context(format!("{NAME} scheduler {i}")))?;
        }
        self.last_lr = opt.param_groups().iter().map(|g| g.lr).collect();
        Ok(())
    }

    fn fresh(&self) -> bool {
        self.steps == 0
    }

    fn last_lr(&self) -> Vec<f64> {
        self.last_lr.clone()
    }

    /// torch keeps the chain's `_last_lr` and each part's state; the step
    /// count is each part's `last_epoch`.
    fn state_dict(&self) -> Vec<(String, f64)> {
        let mut out = vec![("chain.len".to_string(), self.schedulers.len() as f64)];
        out.extend(self.last_lr.iter().enumerate().map(|(i, v)| (format!("last_lr.{i}"), *v)));
        out.extend(super::join_parts(&self.schedulers));
        out
    }

    /// Restores every scheduler's state (their kinds and count must match);
    /// on failure nothing changes.
    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        let n = self.schedulers.len();
        let (own, parts) = super::split_parts(state, n, NAME)?;
        let l = Lookup::new(NAME, &own)?;
        let count = l.int("chain.len")?;
        if count != n as i64 {
            return Err(l.bad("chain.len", count as f64));
        }
        let last_lr = super::load_last_lr(&l, self.last_lr.len())?;
        l.finish()?;
        // Every part has stepped as often as the chain.
        let steps: Vec<f64> =
            parts.iter().map(|p| p.iter().find(|(k, _)| k == "last_epoch").map_or(0.0, |(_, v)| *v)).collect();
        if steps.windows(2).any(|w| w[0] != w[1]) {
            return Err(Error::format(format!("{NAME} state dict: its schedulers are at different steps {steps:?}")));
        }
        super::load_parts(&mut self.schedulers, &parts, NAME)?;
        self.steps = steps.first().copied().unwrap_or(0.0) as i64;
        self.last_lr = last_lr;
        Ok(())
    }
}
