//! The one set-up every run (fit, validate, test, predict) starts with, as
//! Lightning's `Trainer._run`: the run's settings, the seed, the strategy
//! with its accelerator, device and precision, and the model placed (and
//! for fitting wrapped) by it.
use super::run_settings::RunSettings;
use super::strategy::{self, RunStrategy};
use super::{LightningModule, Trainer};
use crate::error::{Result, ResultExt};

impl Trainer {
    /// Refuses a logger added to a barebones trainer, applies the run's
    /// settings (callback timeout, anomaly detection, deterministic
    /// algorithms, cuDNN benchmark, barebones, signal watch: restored when
    /// the returned guard drops), seeds the generators, resolves the strategy (joining
    /// a DDP job) and sets the model up on its device.
    pub(crate) fn start_run(
        &mut self,
        module: &mut dyn LightningModule,
        fitting: bool,
    ) -> Result<(RunSettings, RunStrategy)> {
        if self.opts.barebones && !self.extra_loggers.is_empty() {
            let names: Vec<&str> = self.extra_loggers.iter().map(|l| l.name()).collect();
            return Err(super::options::barebones_refusal(
                &format!("logger={names:?}"),
                "Logging can impact raw speed",
            ));
        }
        self.attach(&*module, fitting);
        self.attach_module_callbacks(module)?;
        let settings = RunSettings::enter(&self.opts)?;
        if let Some(s) = self.opts.seed {
            crate::seed_everything(s);
        }
        let mut strategy = strategy::setup(&self.opts)?;
        strategy.setup_model(module, fitting)?;
        Ok((settings, strategy))
    }

    /// Lightning's `_attach_model_callbacks`: the callbacks the module's
    /// `configure_callbacks` returns join the trainer's for this run and
    /// the ones after it, each replacing the trainer's callbacks of its
    /// kind (Lightning's type); ModelCheckpoints still run last in fit.
    fn attach_module_callbacks(&mut self, module: &mut dyn LightningModule) -> Result<()> {
        let added = module.configure_callbacks().ctx("configure_callbacks")?;
        if added.is_empty() {
            return Ok(());
        }
        let kinds: Vec<String> = added.iter().map(|c| c.kind()).collect();
        self.callbacks.retain(|c| !kinds.contains(&c.kind()));
        self.callbacks.extend(added);
        Ok(())
    }
}
