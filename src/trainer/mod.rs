//! The Trainer: Lightning's fit / validate / test / predict loops with
//! hooks, callbacks, loggers and checkpoints.
mod after_run;
mod automatic;
pub mod context;
pub mod datamodule;
pub mod device;
pub(crate) mod device_metrics;
mod epoch_loop;
mod eval;
mod eval_loop;
mod fit_data;
mod fit_loop;
mod graph_capture;
mod graphed_eval;
mod graphed_step;
pub mod hooks;
pub mod interrupt;
pub mod loop_progress;
mod manual;
mod manual_closure;
mod manual_optimization;
pub mod metric_map;
pub mod metrics;
pub mod module;
mod next_fit;
pub mod optimization;
pub mod option_table;
pub mod options;
mod prefetch;
pub mod profiler;
pub mod progress;
mod resume;
mod run;
pub mod run_settings;
pub mod running_loss;
mod save;
mod slurm;
pub mod source;
mod start;
mod strategy;
pub mod torch_profiler;

pub use context::{AddedPredictions, Stage, StepContext};
pub use datamodule::DataModule;
pub use eval::EvalResults;
pub use eval_loop::Prediction;
pub(crate) use fit_data::LOADERS_MAX;
pub use hooks::{Callback, Hook, HookContext, TrainerState};
pub use metrics::{LogFlags, MetricStore};
pub use module::{Interval, LightningModule, OptimizerConfig, OptimizerSetup, SchedulerConfig, SharedModel};
pub use optimization::{OptimizationContext, OptimizationHooks, OptimizationSlot};
pub use options::{
    BatchLimit, ClipAlgorithm, Deterministic, LoggerChoice, ProfilerKind, TrainerOptions, ValCheckInterval,
};
pub use source::{BatchIter, BatchSource};

use crate::callbacks::ModelCheckpoint;
use crate::error::Result;
use crate::loggers::Logger;
use std::path::PathBuf;

/// Runs a [`LightningModule`] through training and evaluation loops.
pub struct Trainer {
    opts: TrainerOptions,
    /// Callbacks added by the user, kept across runs.
    callbacks: Vec<Box<dyn Callback>>,
    /// Built-in callbacks of the last run (progress bar, default
    /// ModelCheckpoint, max_time Timer).
    defaults: Vec<Box<dyn Callback>>,
    /// Loggers added by the user (host loggers), kept across runs.
    extra_loggers: Vec<Box<dyn Logger>>,
    /// The `logger` option's CSV / TensorBoard loggers: the first run
    /// makes them in a new `version_N` folder, and every later run (fit,
    /// validate, test, predict) logs there too, as Lightning's trainer
    /// keeps its loggers.
    file_loggers: Vec<Box<dyn Logger>>,
    /// State of the last run.
    pub state: TrainerState,
    /// The simple profiler's report of the last run, when profiling.
    profiler_report: Option<String>,
    /// The model of the last run, not kept alive (Lightning's attached
    /// module); `None` before any run.
    attached: Option<std::sync::Weak<std::sync::Mutex<crate::nn::Module>>>,
    /// What the last fit left for `save_checkpoint` and the queries after
    /// it.
    last_fit: Option<after_run::FitRemains>,
    /// The fit loop's state the last fit left, whatever the model and the
    /// runs since (Lightning's trainer keeps its `fit_loop`): the next fit
    /// without a checkpoint goes on from it.
    fit_loop: Option<next_fit::FitLoopState>,
    /// The checkpoint IO plugin every checkpoint goes through; `None`:
    /// local files.
    checkpoint_io: Option<std::sync::Arc<dyn crate::checkpoint::io::CheckpointIo>>,
}

impl Trainer {
    /// Creates a trainer; the options are checked here.
    pub fn new(opts: TrainerOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Trainer {
            opts,
            callbacks: Vec::new(),
            defaults: Vec::new(),
            extra_loggers: Vec::new(),
            file_loggers: Vec::new(),
            state: TrainerState::default(),
            profiler_report: None,
            attached: None,
            last_fit: None,
            fit_loop: None,
            checkpoint_io: None,
        })
    }

    /// Sends every checkpoint this trainer saves, loads or removes through
    /// `io` (Lightning's `plugins=[CheckpointIO]`), replacing any set
    /// before; `None` goes back to local files.
    pub fn set_checkpoint_io(&mut self, io: Option<std::sync::Arc<dyn crate::checkpoint::io::CheckpointIo>>) {
        self.checkpoint_io = io;
    }

    /// A writer for this trainer's checkpoints (its plugin, its
    /// `async_checkpoint_io` option).
    fn checkpoint_writer(&self) -> crate::checkpoint::io::CheckpointWriter {
        crate::checkpoint::io::CheckpointWriter::new(self.checkpoint_io.clone(), self.opts.async_checkpoint_io)
    }

    /// The simple profiler's report of the last run (`profiler="simple"`),
    /// if any.
    pub fn profiler_report(&self) -> Option<&str> {
        self.profiler_report.as_deref()
    }

    /// The options.
    pub fn options(&self) -> &TrainerOptions {
        &self.opts
    }

    /// Adds a callback (called before the LightningModule's own hooks).
    pub fn add_callback(&mut self, cb: Box<dyn Callback>) {
        self.callbacks.push(cb);
    }

    /// Whether a callback of this name was added.
    pub fn has_callback(&self, name: &str) -> bool {
        self.callbacks.iter().any(|c| c.name() == name)
    }

    /// Adds a logger that receives every logged metric besides the file
    /// loggers.
    pub fn add_logger(&mut self, logger: Box<dyn Logger>) {
        self.extra_loggers.push(logger);
    }

    /// Optimizer steps taken in the last fit.
    pub fn global_step(&self) -> i64 {
        self.state.global_step
    }

    /// Epochs completed in the last fit.
    pub fn current_epoch(&self) -> i64 {
        self.state.epoch
    }

    /// Latest value of every logged metric (Lightning's `callback_metrics`).
    /// After a run that failed mid-epoch, device values may still be
    /// pending: `snapshot` or `read` them (`Deref` shows numbers only).
    pub fn callback_metrics(&self) -> &metric_map::MetricMap {
        &self.state.callback_metrics
    }

    /// The log folder of the last run, when a file logger was active.
    pub fn log_dir(&self) -> Option<&PathBuf> {
        self.state.log_dir.as_ref()
    }

    /// The first ModelCheckpoint of the last run (the user's, else the
    /// default one), as Lightning's `trainer.checkpoint_callback`.
    pub fn checkpoint_callback(&self) -> Option<&ModelCheckpoint> {
        self.callbacks
            .iter()
            .chain(self.defaults.iter())
            .find_map(|c| c.as_any().and_then(|a| a.downcast_ref::<ModelCheckpoint>()))
    }
}

/// Switches the module's model to training or evaluation mode.
fn set_mode(module: &dyn LightningModule, training: bool) -> Result<()> {
    if let Some(m) = module.model() {
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        g.set_training(training)?;
    }
    Ok(())
}

/// Number of samples in a batch: the first dimension of its first tensor.
fn batch_size_of(batch: &[tch::Tensor]) -> i64 {
    batch.first().and_then(|t| t.size().first().copied()).unwrap_or(1)
}
