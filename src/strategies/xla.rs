//! XLA (Lightning's `XLAStrategy`, a DDP strategy for TPUs): one process
//! per XLA device, joined and launched as for DDP and run by
//! [`DdpStrategy`]; only the xla accelerator runs it.
use super::ddp::DdpStrategy;
use crate::accelerators::Accelerator;
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use crate::trainer::TrainerOptions;
use std::sync::Arc;

/// Refuses `strategy="xla"` on an accelerator other than xla (checked
/// before `devices` picks a strategy).
pub(crate) fn check_accelerator(acc: &dyn Accelerator) -> Result<()> {
    if acc.name() != "xla" {
        return Err(Error::invalid(format!(
            "strategy \"xla\" runs on the xla accelerator, not {:?}: set accelerator=\"xla\" (or \"tpu\")",
            acc.name()
        )));
    }
    Ok(())
}

/// The XLA strategy over `list`: DDP's, one rank per device.
pub(crate) fn connect(acc: Arc<dyn Accelerator>, list: &[Device], opts: &TrainerOptions) -> Result<DdpStrategy> {
    DdpStrategy::connect(acc, list, opts)
}
