//! DeviceStatsMonitor: logs the accelerator's device statistics (memory,
//! utilization; psutil-style CPU figures on the CPU) around every training,
//! validation and test batch when the loggers are due, as Lightning's
//! callback of that name, under `DeviceStatsMonitor.<hook>/<stat>`.
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};

/// The DeviceStatsMonitor callback.
#[derive(Debug, Clone, Copy)]
pub struct DeviceStatsMonitor {
    cpu_stats: Option<bool>,
}

impl DeviceStatsMonitor {
    /// `cpu_stats`: `None` logs the device's statistics (the CPU's on a
    /// CPU), `Some(true)` adds the CPU's on another device, `Some(false)`
    /// logs nothing on a CPU.
    pub fn new(cpu_stats: Option<bool>) -> Self {
        DeviceStatsMonitor { cpu_stats }
    }
}

impl Callback for DeviceStatsMonitor {
    fn name(&self) -> String {
        "DeviceStatsMonitor".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        use Hook::*;
        // As Lightning's setup: a fit without a logger is refused.
        if ctx.hook == Setup && ctx.stage == "fit" && !ctx.state.has_loggers {
            return Err(Error::invalid(
                "DeviceStatsMonitor needs a logger: the trainer has logger=false and no logger added",
            ));
        }
        if !matches!(
            ctx.hook,
            TrainBatchStart | TrainBatchEnd | ValidationBatchStart | ValidationBatchEnd | TestBatchStart | TestBatchEnd
        ) || ctx.state.sanity_checking
        {
            return Ok(());
        }
        // Lightning's `should_update_logs`, and its step.
        let n = ctx.state.log_every_n_steps.max(1);
        let step = ctx.state.log_step;
        if (step + 1) % n != 0 && !ctx.state.should_stop {
            return Ok(());
        }
        let prefix = format!("DeviceStatsMonitor.{}", ctx.hook.name());
        ctx.state.device_stats_requests.push((prefix, self.cpu_stats, step));
        Ok(())
    }
}
