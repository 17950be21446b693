//! LearningRateMonitor: logs every optimizer's learning rates, per step or
//! per epoch, as `lr-<Optimizer>` (Lightning's names).
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};

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
}

impl LearningRateMonitor {
    /// `interval`: "step", "epoch", or "" / "none" for both.
    pub fn new(interval: &str) -> Result<Self> {
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
        Ok(LearningRateMonitor { interval })
    }

    fn log(ctx: &mut HookContext) {
        let rates = ctx.state.learning_rates.clone();
        ctx.state.log_requests.extend(rates);
    }
}

impl Callback for LearningRateMonitor {
    fn name(&self) -> String {
        "LearningRateMonitor".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match ctx.hook {
            Hook::TrainBatchStart if self.interval != LoggingInterval::Epoch => {
                let n = ctx.state.log_every_n_steps.max(1);
                if (ctx.state.global_step + 1) % n == 0 {
                    Self::log(ctx);
                }
            }
            Hook::TrainEpochStart if self.interval != LoggingInterval::Step => Self::log(ctx),
            _ => {}
        }
        Ok(())
    }
}
