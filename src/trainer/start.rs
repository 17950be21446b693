//! The one set-up every run (fit, validate, test, predict) starts with, as
//! Lightning's `Trainer._run`: the run's settings, the seed, the strategy
//! with its accelerator, device and precision, and the model placed (and
//! for fitting wrapped) by it.
use super::run_settings::RunSettings;
use super::strategy::{self, RunStrategy};
use super::{LightningModule, Trainer};
use crate::error::Result;

impl Trainer {
    /// Applies the run's settings (callback timeout, anomaly detection,
    /// deterministic algorithms, signal watch: restored when the returned
    /// guard drops), seeds the generators, resolves the strategy (joining
    /// a DDP job) and sets the model up on its device.
    pub(crate) fn start_run(
        &mut self,
        module: &mut dyn LightningModule,
        fitting: bool,
    ) -> Result<(RunSettings, RunStrategy)> {
        self.attach(&*module, fitting);
        let settings = RunSettings::enter(&self.opts)?;
        if let Some(s) = self.opts.seed {
            crate::seed_everything(s);
        }
        let mut strategy = strategy::setup(&self.opts)?;
        strategy.setup_model(module, fitting)?;
        Ok((settings, strategy))
    }
}
