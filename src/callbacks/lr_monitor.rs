//! LearningRateMonitor: logs every optimizer's learning rates, per step or
//! per epoch, as `lr-<Optimizer>` (Lightning's names), with momentum and
//! weight decay if asked.
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use crate::trainer::module::Interval;

/// When learning rates are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggingInterval {
    /// Every `log_every_n_steps` steps.
    Step,
    /// At the start of each epoch.
    Epoch,
    /// Both (Lightning's `None`).
    Any,
}

/// The LearningRateMonitor callback.
pub struct LearningRateMonitor {
    interval: LoggingInterval,
    log_momentum: bool,
    log_weight_decay: bool,
}

impl LearningRateMonitor {
    /// `interval`: "step", "epoch", or "" / "none" for both; logs the
    /// learning rates only.
    pub fn new(interval: &str) -> Result<Self> {
        Self::with_options(interval, false, false)
    }

    /// As [`Self::new`], also logging `<name>-momentum` (momentum, or beta1
    /// for the Adam family; 0 without either) and `<name>-weight_decay`.
    pub fn with_options(interval: &str, log_momentum: bool, log_weight_decay: bool) -> Result<Self> {
        let interval = match interval {
            "step" => LoggingInterval::Step,
            "epoch" => LoggingInterval::Epoch,
            "" | "none" => LoggingInterval::Any,
            other => {
                return Err(Error::invalid(format!(
                    "logging_interval must be \"step\", \"epoch\" or \"none\", got {other:?}"
                )))
            }
        };
        Ok(LearningRateMonitor { interval, log_momentum, log_weight_decay })
    }

    /// Logs the groups whose scheduler steps at `due` (every group when
    /// `due` is `None`) and the groups without a scheduler, as Lightning's
    /// `_extract_stats`; the values also become callback metrics.
    fn log(&self, ctx: &mut HookContext, due: Option<Interval>) {
        let mut stats = Vec::new();
        for g in ctx.state.learning_rates.iter().filter(|g| due.is_none() || g.interval.is_none() || g.interval == due)
        {
            stats.push((g.name.clone(), g.lr));
            if self.log_momentum {
                stats.push((format!("{}-momentum", g.name), g.momentum));
            }
            if self.log_weight_decay {
                stats.push((format!("{}-weight_decay", g.name), g.weight_decay));
            }
        }
        ctx.state.callback_metrics.extend_values(stats.iter().cloned());
        if !stats.is_empty() {
            ctx.state.log_requests.push((ctx.state.log_step, stats));
        }
    }
}

impl Callback for LearningRateMonitor {
    fn name(&self) -> String {
        "LearningRateMonitor".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        // As Lightning: with logging_interval None, a batch start logs the
        // step-interval schedulers and an epoch start the epoch-interval
        // ones; with "step" or "epoch" every optimizer is logged.
        match ctx.hook {
            // As Lightning's on_train_start: a fit without a logger is refused.
            Hook::TrainStart if !ctx.state.has_loggers => {
                return Err(Error::invalid(
                    "LearningRateMonitor needs a logger: the trainer has logger=false and no logger added",
                ));
            }
            Hook::TrainBatchStart if self.interval != LoggingInterval::Epoch => {
                let n = ctx.state.log_every_n_steps.max(1);
                if (ctx.state.log_step + 1) % n == 0 || ctx.state.should_stop {
                    let due = (self.interval == LoggingInterval::Any).then_some(Interval::Step);
                    self.log(ctx, due);
                }
            }
            Hook::TrainEpochStart if self.interval != LoggingInterval::Step => {
                let due = (self.interval == LoggingInterval::Any).then_some(Interval::Epoch);
                self.log(ctx, due);
            }
            _ => {}
        }
        Ok(())
    }
}
