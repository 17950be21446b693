//! What a Lightning user does after `trainer.fit` returns: save the run's
//! state (`trainer.save_checkpoint`) and read what the trainer knows of the
//! run (`logged_metrics`, `num_training_batches`, `should_stop`, ...).
use super::loop_progress::FitProgress;
use super::module::{LightningModule, OptimizerConfig, SharedModel};
use super::run::Run;
use super::save::{build_checkpoint, loop_info, CheckpointParts, DeviceState};
use super::Trainer;
use crate::checkpoint::LoopInfo;
use crate::error::{Error, Result, ResultExt};
use crate::nn::Module;
use crate::tensor::device::Device;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

/// What a fit leaves on the trainer for [`Trainer::save_checkpoint`] and
/// the queries after it (Lightning's trainer keeps its optimizers, loops
/// and precision plugin after a run), whether the fit ended or failed;
/// the next fit, or a run on another model, replaces it.
pub(crate) struct FitRemains {
    /// The optimizers configure_optimizers made, with their schedulers, as
    /// the fit left them.
    pub optimizers: Vec<OptimizerConfig>,
    /// The fit loop's progress.
    pub progress: FitProgress,
    /// How the fit counted batches.
    pub loop_info: LoopInfo,
    /// Training batches per epoch (`None`: a source of unknown length).
    pub num_training_batches: Option<usize>,
    /// Whether a stop was requested (a hook, EarlyStopping, a Timer).
    pub should_stop: bool,
    /// The precision plugin's state at the fit's end (or why it could not
    /// be read from the device).
    pub precision: Result<Vec<(String, f64)>>,
    /// Lightning's `estimated_stepping_batches` for the fit's training data
    /// (`Some(None)`: unbounded; `None`: the data never loaded).
    pub estimated_stepping_batches: Option<Option<i64>>,
}

impl FitRemains {
    /// Takes what `run`, a fit that returned, leaves: its optimizers move
    /// out of it.
    pub(super) fn of(run: &mut Run, estimated_stepping_batches: Option<Option<i64>>) -> Self {
        FitRemains {
            optimizers: std::mem::take(&mut run.optimizers),
            progress: run.progress,
            loop_info: loop_info(&*run.state),
            num_training_batches: run.state.num_train_batches,
            should_stop: run.state.should_stop,
            precision: run.strategy.precision().state_dict(),
            estimated_stepping_batches,
        }
    }
}

/// The model a run used, as the trainer remembers it (without keeping it
/// alive): `Weak::new()` for a module without one.
fn weak_model(model: Option<&SharedModel>) -> Weak<Mutex<Module>> {
    model.map_or_else(Weak::new, Arc::downgrade)
}

/// Whether `model` is the one `attached` remembers.
fn is_attached(attached: &Weak<Mutex<Module>>, model: &SharedModel) -> bool {
    std::ptr::eq(attached.as_ptr(), Arc::as_ptr(model))
}

/// The root device's generator state now and the precision state a fit
/// left: the strategy's part of a checkpoint saved after the run.
fn device_state_after(sync: Option<super::hooks::DeviceSync>, precision: Vec<(String, f64)>) -> Result<DeviceState> {
    let (device, rng) = match sync {
        Some(d) => (d.1, d.0.rng_state(d.1).ctx("the device's random state")?),
        None => (Device::Cpu, None),
    };
    Ok(DeviceState { device, rng, precision })
}

impl Trainer {
    /// Remembers the module of a run that starts (Lightning attaches it to
    /// the trainer); what the last fit left goes when this run is a fit or
    /// uses another model.
    pub(super) fn attach(&mut self, module: &dyn LightningModule, fitting: bool) {
        let model = module.model();
        let same = match (&self.attached, &model) {
            (Some(a), Some(m)) => is_attached(a, m),
            _ => false,
        };
        if fitting || !same {
            self.last_fit = None;
        }
        self.attached = Some(weak_model(model.as_ref()));
    }

    /// Lightning's `trainer.save_checkpoint(path, weights_only)` after a
    /// run: the weights of `module` (the module of the trainer's last run)
    /// and, unless `weights_only`, the last fit's optimizer and scheduler
    /// states, loop progress, callbacks' states and `on_save_checkpoint`
    /// entries, the generators' states as they are now and the precision
    /// state, in the `checkpoint_format` a run writes. A full checkpoint
    /// needs a fit; weights alone need any run (fit, validate, test or
    /// predict), as Lightning needs a model attached. Under DDP rank 0
    /// writes and the other ranks return at once.
    pub fn save_checkpoint(&mut self, module: &mut dyn LightningModule, path: &Path, weights_only: bool) -> Result<()> {
        self.check_attached(&*module)?;
        if self.state.global_rank != 0 {
            return Ok(());
        }
        let fit = self.last_fit.as_mut();
        if !weights_only && fit.as_ref().is_none_or(|f| f.optimizers.is_empty()) {
            return Err(Error::state(
                "cannot save a full checkpoint: no fit has configured optimizers on this trainer; fit first, or save \
                 with weights_only",
            ));
        }
        let start = FitProgress::default();
        let (progress, info, precision, optimizers) = match fit {
            Some(f) => (&f.progress, f.loop_info, f.precision.clone()?, f.optimizers.as_mut_slice()),
            None => (&start, loop_info(&self.state), Vec::new(), &mut [][..]),
        };
        let sync = self.state.device_sync.clone();
        let mut callbacks = super::fit_loop::fit_order(&mut self.defaults, &mut self.callbacks);
        let parts = CheckpointParts {
            stage: "fit",
            state: &mut self.state,
            callbacks: callbacks.as_mut_slice(),
            module,
            optimizers,
            progress,
            loop_info: info,
            optimizer_state: &|o| o.state_dict(),
        };
        // Whether asynchronous or not, the save is done when this returns.
        let mut writer =
            crate::checkpoint::io::CheckpointWriter::new(self.checkpoint_io.clone(), self.opts.async_checkpoint_io);
        let (format, prefix) = (self.opts.checkpoint_format, &self.opts.checkpoint_prefix);
        let result = build_checkpoint(parts, move || device_state_after(sync, precision), weights_only)
            .and_then(|ck| writer.save(&ck, path, format, prefix).ctx("saving a checkpoint"));
        writer.finish(result)
    }

    /// Refuses a save before any run, or of a module whose model is not
    /// the last run's.
    fn check_attached(&self, module: &dyn LightningModule) -> Result<()> {
        let Some(attached) = &self.attached else {
            return Err(Error::state(
                "cannot save a checkpoint before the trainer has run: call fit (or validate, test, predict for the \
                 weights alone) first",
            ));
        };
        let model = module.model().ok_or_else(|| {
            Error::state(
                "cannot save a checkpoint: the LightningModule has no model (pass one to fulmen_lightning_module_new)",
            )
        })?;
        if !is_attached(attached, &model) {
            return Err(Error::invalid(
                "the module's model is not the one of this trainer's last run: pass the module it ran",
            ));
        }
        Ok(())
    }

    /// Latest value of every metric logged for the loggers in the last run
    /// (Lightning's `trainer.logged_metrics`); see
    /// [`super::Trainer::callback_metrics`] for values still pending.
    pub fn logged_metrics(&self) -> &super::metric_map::MetricMap {
        &self.state.logged_metrics
    }

    /// What the last validate or test run returned (Lightning's return
    /// value: one dict per loader); empty after fit and predict, and when
    /// every loader's limit was 0.
    pub fn eval_results(&self) -> &[BTreeMap<String, f64>] {
        &self.state.eval_results
    }

    /// Latest value of every metric logged with `prog_bar` in the last run
    /// (Lightning's `trainer.progress_bar_metrics`); see
    /// [`super::Trainer::callback_metrics`] for values still pending.
    pub fn progress_bar_metrics(&self) -> &super::metric_map::MetricMap {
        &self.state.progress_metrics
    }

    /// Lightning's `trainer.estimated_stepping_batches` for the last fit's
    /// training data and this trainer's options (`None`: unbounded); an
    /// error before a fit has loaded its training data.
    pub fn estimated_stepping_batches(&self) -> Result<Option<i64>> {
        self.last_fit.as_ref().and_then(|f| f.estimated_stepping_batches).ok_or_else(|| {
            Error::state("estimated_stepping_batches is known once a fit has loaded its training data: fit first")
        })
    }

    /// Whether the last fit was asked to stop (Lightning's
    /// `trainer.should_stop`): by a hook, EarlyStopping or a Timer; false
    /// before a fit.
    pub fn should_stop(&self) -> bool {
        self.last_fit.as_ref().is_some_and(|f| f.should_stop)
    }

    /// Training batches per epoch of the last fit after
    /// `limit_train_batches` (Lightning's `trainer.num_training_batches`);
    /// `None` before a fit or for a source of unknown length (Lightning's
    /// `inf`).
    pub fn num_training_batches(&self) -> Option<usize> {
        self.last_fit.as_ref().and_then(|f| f.num_training_batches)
    }

    /// Whether the last batch the last fit trained on was its epoch's last
    /// (Lightning's `trainer.is_last_batch`); false before a fit.
    pub fn is_last_batch(&self) -> bool {
        self.last_fit.as_ref().is_some_and(|f| f.progress.batch.is_last_batch)
    }

    /// Batches of each validation loader in the last fit's validation or
    /// validate run, after `limit_val_batches` (`None`: a loader of unknown
    /// length; Lightning's `trainer.num_val_batches`); empty before one.
    pub fn num_val_batches(&self) -> &[Option<usize>] {
        &self.state.val_loader_batches
    }

    /// Batches of each test loader in the last test run, after
    /// `limit_test_batches` (Lightning's `trainer.num_test_batches`).
    pub fn num_test_batches(&self) -> &[Option<usize>] {
        &self.state.test_loader_batches
    }

    /// Batches of each predict loader in the last predict run, after
    /// `limit_predict_batches` (Lightning's `trainer.num_predict_batches`).
    pub fn num_predict_batches(&self) -> &[Option<usize>] {
        &self.state.predict_loader_batches
    }

    /// Batches of each validation loader the last fit's sanity check ran
    /// (Lightning's `trainer.num_sanity_val_batches`); empty without one.
    pub fn num_sanity_val_batches(&self) -> &[Option<usize>] {
        &self.state.sanity_loader_batches
    }

    /// The index of each device a run uses on this node (Lightning's
    /// `trainer.device_ids`: -1 for a CPU device), as the options resolve
    /// them.
    pub fn device_ids(&self) -> Result<Vec<i64>> {
        let (_, devices) = super::strategy::parallel_devices(&self.opts)?;
        let id = |d: &Device| if *d == Device::Cpu { -1 } else { d.index() as i64 };
        Ok(devices.iter().map(id).collect())
    }

    /// The first EarlyStopping callback of the trainer and its state
    /// (Lightning's `wait_count`, `stopped_epoch`, `best_score`).
    pub fn early_stopping(&self) -> Option<crate::callbacks::EarlyStoppingState> {
        crate::callbacks::EarlyStopping::first_state(self.callbacks.iter())
    }

    /// The GradScaler's scale at the end of the last fit (Lightning's
    /// `trainer.precision_plugin.scaler.get_scale()`); `None` without a fit
    /// or without a scaler (any precision but 16-mixed).
    pub fn grad_scale(&self) -> Option<f64> {
        self.last_fit.as_ref()?.precision.as_ref().ok()?.iter().find(|(k, _)| k == "scale").map(|(_, v)| *v)
    }

    /// Devices a run uses on this node (Lightning's `trainer.num_devices`):
    /// the last run's, or before any run the options' (`accelerator`,
    /// `devices`) resolved as a run resolves them.
    pub fn num_devices(&self) -> Result<usize> {
        if self.attached.is_some() {
            return Ok(self.state.num_devices);
        }
        Ok(super::strategy::parallel_devices(&self.opts)?.1.len())
    }

    /// This node's index in a distributed job (Lightning's
    /// `trainer.node_rank`): the last run's (0 but under DDP), or before
    /// any run the environment's (torchrun, SLURM, `NODE_RANK`).
    pub fn node_rank(&self) -> Result<usize> {
        if self.attached.is_some() {
            return Ok(self.state.node_rank);
        }
        let env = crate::distributed::ClusterEnv::detect(self.num_devices()?, self.opts.strategy.num_nodes)?;
        Ok(env.node_rank)
    }
}
