//! A trainer's second `fit` goes on from the loop progress its last fit
//! left, as Lightning's trainer keeps its `fit_loop`: the epoch and the
//! global step continue, a finished run trains nothing until its limits
//! are raised (`trainer.fit_loop.max_epochs = n` in Lightning,
//! [`Trainer::set_max_epochs`] here), and the optimizers are configured
//! anew.
use super::loop_progress::FitProgress;
use super::Trainer;
use crate::error::Result;

/// The fit loop's state a fit leaves on its trainer for the next fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FitLoopState {
    /// Every count of the loop, as the fit left it.
    pub progress: FitProgress,
    /// Lightning's `global_step`: optimizer steps taken.
    pub global_step: i64,
    /// Training batches that stepped (the loggers' step).
    pub batches_stepped: i64,
}

impl FitLoopState {
    /// The progress a new fit (not resuming from a checkpoint) starts
    /// from, as Lightning's `_FitLoop.on_run_start` leaves it: in an
    /// epoch-based run an epoch whose training batches were processed
    /// counts as completed, so a fit that failed in its epoch-end hooks
    /// goes on with the next epoch, and one that failed inside an epoch
    /// runs that epoch again from its first batch.
    pub fn for_next_fit(&self, iteration_based: bool) -> FitProgress {
        let mut p = self.progress;
        if !iteration_based {
            p.epoch.current.completed = p.epoch.current.processed;
        }
        p
    }

    /// The epoch a new fit trains first (Lightning's `current_epoch`).
    pub fn next_epoch(progress: &FitProgress) -> i64 {
        progress.epoch.current.completed
    }
}

/// Which limit a fit at `epoch` and `global_step` reached (Lightning's
/// `_FitLoop.done`): the condition of the fit loop, and before its first
/// epoch the reason it skips itself with its `on_train_start` /
/// `on_train_end`; `None` while there is more to train.
pub(crate) fn limit_reached(max_epochs: Option<i64>, max_steps: i64, epoch: i64, global_step: i64) -> Option<String> {
    if max_steps >= 0 && global_step >= max_steps {
        return Some(format!("`max_steps={max_steps}` reached"));
    }
    match max_epochs {
        Some(m) if epoch >= m => Some(format!("`max_epochs={m}` reached")),
        _ => None,
    }
}

impl Trainer {
    /// Sets the epoch limit of the next fits (Lightning's
    /// `trainer.fit_loop.max_epochs`): -1 for none. A trainer whose fit
    /// ended at its limit trains on from there once the limit is raised.
    pub fn set_max_epochs(&mut self, max_epochs: i64) -> Result<()> {
        let mut opts = self.opts.clone();
        opts.max_epochs = Some(max_epochs);
        opts.validate()?;
        self.opts = opts;
        Ok(())
    }

    /// Sets the step limit of the next fits (Lightning's
    /// `trainer.fit_loop.max_steps`): -1 for none.
    pub fn set_max_steps(&mut self, max_steps: i64) -> Result<()> {
        let mut opts = self.opts.clone();
        opts.max_steps = max_steps;
        opts.validate()?;
        self.opts = opts;
        Ok(())
    }
}

#[cfg(test)]
#[path = "next_fit_tests.rs"]
mod tests;
