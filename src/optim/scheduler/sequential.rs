//! `SequentialLR`: schedulers that take turns at milestones (a linear
//! warm-up, then a cosine decay).
use super::{Lookup, LrScheduler};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// Runs `schedulers[0]` until `milestones[0]`, then `schedulers[1]` from
/// its own step 0, and so on (torch's `SequentialLR`).
pub struct SequentialLr {
    schedulers: Vec<Box<dyn LrScheduler>>,
    milestones: Vec<i64>,
    last_epoch: i64,
    last_lr: Vec<f64>,
}

const NAME: &str = "sequential_lr";

/// Checks `count` schedulers and their `milestones` (one fewer, >= 0,
/// increasing), as `SequentialLr::new` does.
pub fn check_milestones(count: usize, milestones: &[i64]) -> std::result::Result<(), String> {
    if count == 0 {
        return Err("SequentialLR expects at least one scheduler".into());
    }
    if milestones.len() != count - 1 {
        return Err(format!(
            "SequentialLR expects one milestone fewer than schedulers: {count} schedulers, {} milestones",
            milestones.len()
        ));
    }
    if milestones.iter().any(|m| *m < 0) || milestones.windows(2).any(|w| w[0] > w[1]) {
        return Err(format!("SequentialLR milestones must be >= 0 and in increasing order, got {milestones:?}"));
    }
    Ok(())
}

impl SequentialLr {
    /// Takes `schedulers`, all built on `opt`, and `milestones` (one fewer,
    /// increasing). As torch, every group's lr goes back to its
    /// `initial_lr` and the scheduler of step 0 starts at its step 0.
    /// ReduceLROnPlateau cannot take part (it steps on a metric).
    pub fn new(opt: &mut dyn Optimizer, schedulers: Vec<Box<dyn LrScheduler>>, milestones: Vec<i64>) -> Result<Self> {
        check_milestones(schedulers.len(), &milestones).map_err(Error::invalid)?;
        if let Some(p) = schedulers.iter().position(|s| s.reduce_on_plateau()) {
            return Err(Error::invalid(format!(
                "SequentialLR cannot run ReduceLROnPlateau (scheduler {p}): it steps on a metric"
            )));
        }
        for g in opt.param_groups_mut() {
            if let Some(initial) = g.initial_lr {
                g.lr = initial;
            }
        }
        let mut s = SequentialLr { schedulers, milestones, last_epoch: 0, last_lr: Vec::new() };
        let first = s.current(0);
        s.schedulers[first].jump_to(opt, 0)?;
        s.last_lr = s.schedulers[first].last_lr();
        Ok(s)
    }

    /// The scheduler that runs step `epoch` (torch's `bisect_right`).
    fn current(&self, epoch: i64) -> usize {
        self.milestones.partition_point(|m| *m <= epoch)
    }
}

impl LrScheduler for SequentialLr {
    fn name(&self) -> &'static str {
        NAME
    }

    fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        let epoch = self.last_epoch + 1;
        let idx = self.current(epoch);
        let s = &mut self.schedulers[idx];
        if idx > 0 && self.milestones[idx - 1] == epoch {
            s.jump_to(opt, 0)?;
        } else {
            s.step(opt, None)?;
        }
        self.last_epoch = epoch;
        self.last_lr = s.last_lr();
        Ok(())
    }

    /// Its parts step in their closed forms, which would overwrite what
    /// another scheduler of the optimizer wrote: refused.
    fn chained_step(&mut self, _opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        Err(Error::invalid("a SequentialLR cannot share its optimizer with another scheduler"))
    }

    fn last_lr(&self) -> Vec<f64> {
        self.last_lr.clone()
    }

    fn state_dict(&self) -> Vec<(String, f64)> {
        let mut out = vec![
            ("last_epoch".to_string(), self.last_epoch as f64),
            ("milestones.len".to_string(), self.milestones.len() as f64),
        ];
        out.extend(self.milestones.iter().enumerate().map(|(i, m)| (format!("milestones.{i}"), *m as f64)));
        out.extend(self.last_lr.iter().enumerate().map(|(i, v)| (format!("last_lr.{i}"), *v)));
        out.extend(super::join_parts(&self.schedulers));
        out
    }

    /// Restores the counter, the milestones and every scheduler's state
    /// (their kinds must match); on failure nothing changes.
    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        let n = self.schedulers.len();
        let (own, parts) = super::split_parts(state, n, NAME)?;
        let l = Lookup::new(NAME, &own)?;
        let last_epoch = l.int("last_epoch")?;
        let count = l.int("milestones.len")?;
        if count != self.milestones.len() as i64 {
            return Err(l.bad("milestones.len", count as f64));
        }
        let milestones =
            (0..self.milestones.len()).map(|i| l.int(&format!("milestones.{i}"))).collect::<Result<Vec<_>>>()?;
        check_milestones(n, &milestones).map_err(|m| Error::format(format!("{NAME} state dict: {m}")))?;
        let last_lr = super::load_last_lr(&l, self.last_lr.len())?;
        l.finish()?;
        super::load_parts(&mut self.schedulers, &parts, NAME)?;
        self.last_epoch = last_epoch;
        self.milestones = milestones;
        self.last_lr = last_lr;
        Ok(())
    }
}
