//! DataParallel (Lightning's `DataParallelStrategy`): one process, the
//! model on the first device and, for every step, a replica on each other
//! device running its chunk of the batch ([`DpRun`]); losses averaged and
//! predictions gathered on the first device.
use super::data_parallel::DpRun;
use super::strategy::Strategy;
use crate::accelerators::Accelerator;
use crate::error::Result;
use crate::tensor::device::Device;
use crate::trainer::device::Placement;
use crate::trainer::{LightningModule, TrainerOptions};
use std::sync::Arc;
use tch::Tensor;

/// The strategy of a DataParallel run.
pub(crate) struct DpStrategy {
    /// The first device's placement: the model, the outputs, the step.
    placement: Placement,
    replicas: DpRun,
}

impl DpStrategy {
    /// DP over `list` (at least one device), the model on the first with
    /// the options' precision; sets that device up.
    pub(crate) fn connect(acc: Arc<dyn Accelerator>, list: Vec<Device>, opts: &TrainerOptions) -> Result<Self> {
        let placement = Placement::on(acc, list[0], &opts.precision, opts.grad_scaler)?;
        Ok(DpStrategy { placement, replicas: DpRun::new(list) })
    }
}

impl Strategy for DpStrategy {
    fn placement(&self) -> &Placement {
        &self.placement
    }

    fn placement_mut(&mut self) -> &mut Placement {
        &mut self.placement
    }

    fn is_data_parallel(&self) -> bool {
        true
    }

    /// Takes the module's model and checks it can be replicated, for every
    /// run (fit and evaluation alike).
    fn wrap_model(&mut self, module: &dyn LightningModule, _training: bool) -> Result<()> {
        self.replicas.setup_model(module)
    }

    fn for_each_chunk(&self, batch: &[Tensor], step: &mut dyn FnMut(&[Tensor]) -> Result<()>) -> Result<()> {
        self.replicas.run(batch, step)?;
        Ok(())
    }

    fn gather_loss(&self, losses: Vec<Tensor>) -> Result<Tensor> {
        self.replicas.gather_loss(losses)
    }

    fn gather_output(&self, outputs: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
        self.replicas.gather_outputs(outputs)
    }
}
