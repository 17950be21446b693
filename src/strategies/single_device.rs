//! One process on one device (Lightning's `SingleDeviceStrategy`): the
//! trait's provided behaviour on the run's placement, nothing spread.
use super::strategy::Strategy;
use crate::accelerators::Accelerator;
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use crate::trainer::device::Placement;
use crate::trainer::TrainerOptions;
use std::sync::Arc;

/// The strategy of a run on one device.
pub(crate) struct SingleDeviceStrategy {
    placement: Placement,
}

impl SingleDeviceStrategy {
    /// The strategy on the one device of `list` (more than one is refused)
    /// with the options' precision; sets the device up.
    pub(crate) fn connect(acc: Arc<dyn Accelerator>, list: &[Device], opts: &TrainerOptions) -> Result<Self> {
        if list.len() > 1 {
            return Err(Error::invalid(format!(
                "devices={:?} selects {} devices of {:?}, but strategy {:?} runs on one: use strategy=\"ddp\" \
                 (or \"auto\") or devices=1",
                opts.devices,
                list.len(),
                acc.name(),
                opts.strategy.name
            )));
        }
        let placement = Placement::on(acc, list[0], &opts.precision, opts.grad_scaler)?;
        Ok(SingleDeviceStrategy { placement })
    }
}

impl Strategy for SingleDeviceStrategy {
    fn placement(&self) -> &Placement {
        &self.placement
    }

    fn placement_mut(&mut self) -> &mut Placement {
        &mut self.placement
    }
}
