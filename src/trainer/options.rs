//! Trainer options, with Lightning's names and defaults.
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

/// How many batches of a loader an epoch uses (`limit_*_batches`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BatchLimit {
    /// Every batch.
    All,
    /// A fraction of the batches, in (0, 1].
    Fraction(f64),
    /// At most this many batches.
    Count(usize),
}

impl BatchLimit {
    /// Reads Lightning's convention: a float in [0, 1] is a fraction (1.0 =
    /// all), a whole number above 1 is a count.
    pub fn from_f64(v: f64) -> Result<Self> {
        if !v.is_finite() || v < 0.0 {
            return Err(Error::invalid(format!("batch limit {v} must be a fraction in [0, 1] or a count")));
        }
        if v == 1.0 {
            Ok(BatchLimit::All)
        } else if v < 1.0 {
            Ok(BatchLimit::Fraction(v))
        } else if v.fract() == 0.0 {
            Ok(BatchLimit::Count(v as usize))
        } else {
            Err(Error::invalid(format!("batch limit {v} above 1 must be a whole number of batches")))
        }
    }

    /// Number of batches to run out of `available` (None = unknown length).
    pub fn apply(self, available: Option<usize>) -> Option<usize> {
        match (self, available) {
            (BatchLimit::All, a) => a,
            (BatchLimit::Count(c), Some(a)) => Some(c.min(a)),
            (BatchLimit::Count(c), None) => Some(c),
            (BatchLimit::Fraction(f), Some(a)) => Some((a as f64 * f) as usize),
            (BatchLimit::Fraction(_), None) => None,
        }
    }

    /// Whether the limit turns batches off entirely.
    pub fn is_zero(self) -> bool {
        matches!(self, BatchLimit::Count(0)) || matches!(self, BatchLimit::Fraction(f) if f == 0.0)
    }
}

/// When validation runs inside a training epoch (`val_check_interval`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValCheckInterval {
    /// After this fraction of the epoch's batches (1.0: at its end).
    Fraction(f64),
    /// After every this many training batches.
    Batches(usize),
    /// When this much wall time passed since training started or the last
    /// validation ended, checked after each training batch (Lightning's
    /// time-based `val_check_interval`, "DD:HH:MM:SS").
    Time(Duration),
}

/// Lightning's `deterministic`: libtorch's deterministic algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deterministic {
    /// Left as they are (the default).
    Off,
    /// On: an op without a deterministic implementation fails.
    On,
    /// On, warn only (`"warn"`): such an op warns and runs.
    Warn,
}

/// How gradients are clipped (`gradient_clip_algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipAlgorithm {
    /// Scale all gradients so their joint 2-norm is at most the value.
    Norm,
    /// Clamp each gradient element into [-value, value].
    Value,
}

/// Which profiler times the run (Lightning's `profiler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfilerKind {
    /// None (the default).
    Off,
    /// Lightning's SimpleProfiler: wall time per hook and action, reported
    /// at the end of each run.
    Simple,
    /// The simple profiler's report, and libtorch's own profiler over the
    /// run (a Chrome trace and its longest operators), as Lightning's
    /// PyTorchProfiler.
    PyTorch,
}

/// The loggers a run writes to (Lightning's `logger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggerChoice {
    /// CSV logger (`metrics.csv`, `hparams.yaml`).
    pub csv: bool,
    /// TensorBoard event files.
    pub tensorboard: bool,
}

/// Options of a [`crate::trainer::Trainer`].
#[derive(Debug, Clone)]
pub struct TrainerOptions {
    /// Stop after this many epochs. `None` with `max_steps == -1` means
    /// 1000, as Lightning.
    pub max_epochs: Option<i64>,
    /// Train at least this many epochs before an early stop takes effect.
    pub min_epochs: Option<i64>,
    /// Stop after this many optimizer steps; -1 for no limit.
    pub max_steps: i64,
    /// Take at least this many optimizer steps before stopping early.
    pub min_steps: Option<i64>,
    /// Stop training after this much time.
    pub max_time: Option<Duration>,
    /// Batches per training epoch.
    pub limit_train_batches: BatchLimit,
    /// Batches per validation run.
    pub limit_val_batches: BatchLimit,
    /// Batches per test run.
    pub limit_test_batches: BatchLimit,
    /// Batches per predict run.
    pub limit_predict_batches: BatchLimit,
    /// When validation runs within an epoch.
    pub val_check_interval: ValCheckInterval,
    /// Validate every n epochs; `None` counts `val_check_interval` batches
    /// across epochs.
    pub check_val_every_n_epoch: Option<i64>,
    /// Validation batches run before training as a sanity check (-1: all).
    pub num_sanity_val_steps: i64,
    /// Accumulate gradients over this many batches per optimizer step.
    pub accumulate_grad_batches: i64,
    /// Clip gradients at this value (`None`: no clipping).
    pub gradient_clip_val: Option<f64>,
    /// Norm or value clipping.
    pub gradient_clip_algorithm: ClipAlgorithm,
    /// The profiler.
    pub profiler: ProfilerKind,
    /// Run only this many batches of each loop (0: off), without loggers
    /// or checkpoints, to check that everything runs.
    pub fast_dev_run: i64,
    /// Train and validate on the same few batches (off when `Count(0)`).
    pub overfit_batches: BatchLimit,
    /// Ask libtorch for deterministic algorithms.
    pub deterministic: Deterministic,
    /// `torch.backends.cudnn.benchmark` during the run (`None`: off when
    /// deterministic, else left as it is).
    pub benchmark: Option<bool>,
    /// Lightning's barebones mode: checkpointing, loggers, progress bar,
    /// model summary and sanity check off, and refused when turned on.
    pub barebones: bool,
    /// Optimizer steps between writes of step metrics to the loggers.
    pub log_every_n_steps: i64,
    /// Seed everything at the start of fit / validate / test / predict.
    pub seed: Option<u64>,
    /// Folder for logs and checkpoints (Lightning's `default_root_dir`).
    pub default_root_dir: PathBuf,
    /// Show progress on stderr.
    pub enable_progress_bar: bool,
    /// Add a ModelCheckpoint (saving the latest epoch) when none is given.
    pub enable_checkpointing: bool,
    /// Under DDP, shard every DataLoader over the ranks (Lightning's
    /// `use_distributed_sampler`).
    pub use_distributed_sampler: bool,
    /// Call the module's `train_dataloader` / `val_dataloader` again every
    /// this many epochs (Lightning's `reload_dataloaders_every_n_epochs`;
    /// 0: once). Loaders passed to fit are not reloaded.
    pub reload_dataloaders_every_n_epochs: i64,
    /// File format of the checkpoints the trainer writes.
    pub checkpoint_format: crate::checkpoint::CheckpointFormat,
    /// The LightningModule attribute (with its dot) holding the network in
    /// Lightning checkpoints; empty: none when writing, found when reading.
    pub checkpoint_prefix: String,
    /// Print the layer table when fit starts.
    pub enable_model_summary: bool,
    /// Evaluate without autograd (libtorch's no-grad mode).
    pub inference_mode: bool,
    /// Capture each kind of training, validation, test and predict step in
    /// a device graph and replay it (`trainer::graphed_step`,
    /// `trainer::graphed_eval`).
    pub cuda_graphs: bool,
    /// Eager runs of each kind of step before it is captured.
    pub cuda_graphs_warmup_steps: i64,
    /// A step that cannot be captured runs eagerly, with a warning, instead
    /// of failing the run.
    pub cuda_graphs_fallback: bool,
    /// Which file loggers run.
    pub logger: LoggerChoice,
    /// End the run with an error when a training loss is NaN or infinite
    /// (on an accelerator, read with the trainer's other values:
    /// [`crate::tensor::deferred`]).
    pub detect_nonfinite_loss: bool,
    /// Autograd's anomaly mode during the run (Lightning's `detect_anomaly`):
    /// a NaN gradient fails backward, naming the operation that made it.
    pub detect_anomaly: bool,
    /// A host callback that runs longer than this fails the run when it
    /// returns (fulmen cannot interrupt host code); `None`: no limit.
    pub callback_timeout: Option<std::time::Duration>,
    /// Stop on SIGINT / SIGTERM as Lightning does (see
    /// `trainer::interrupt`); off leaves the process's handlers alone.
    pub handle_signals: bool,
    /// Save checkpoints on a background thread (Lightning's
    /// `AsyncCheckpointIO`; see `checkpoint::io`).
    pub async_checkpoint_io: bool,
    /// Under SLURM, SIGUSR1 saves `hpc_ckpt_<n>.ckpt`, requeues the job and
    /// stops the fit, and fit resumes from the newest such checkpoint
    /// (Lightning's SLURMEnvironment `auto_requeue`; see `trainer::slurm`).
    pub slurm_auto_requeue: bool,
    /// Accelerator name ("auto", "cpu", "cuda", "gpu", "mps", "xla",
    /// "tpu", or a registered custom one).
    pub accelerator: String,
    /// Devices, in Lightning's forms ("auto", "1", "-1", "0,2", "[1]").
    pub devices: String,
    /// Precision ("32-true", "16-mixed", "bf16-mixed", "64-true", ...).
    pub precision: String,
    /// Loss-scaler settings for `16-mixed`; `None`: torch's defaults.
    pub grad_scaler: Option<crate::precision::GradScalerSettings>,
    /// The strategy ("auto", "single_device", "ddp", ...) and its settings.
    pub strategy: crate::strategies::StrategySpec,
}

impl Default for TrainerOptions {
    fn default() -> Self {
        TrainerOptions {
            max_epochs: None,
            min_epochs: None,
            max_steps: -1,
            min_steps: None,
            max_time: None,
            limit_train_batches: BatchLimit::All,
            limit_val_batches: BatchLimit::All,
            limit_test_batches: BatchLimit::All,
            limit_predict_batches: BatchLimit::All,
            val_check_interval: ValCheckInterval::Fraction(1.0),
            check_val_every_n_epoch: Some(1),
            num_sanity_val_steps: 2,
            accumulate_grad_batches: 1,
            gradient_clip_val: None,
            gradient_clip_algorithm: ClipAlgorithm::Norm,
            profiler: ProfilerKind::Off,
            fast_dev_run: 0,
            overfit_batches: BatchLimit::Count(0),
            deterministic: Deterministic::Off,
            benchmark: None,
            barebones: false,
            log_every_n_steps: 50,
            seed: None,
            default_root_dir: PathBuf::from("."),
            enable_progress_bar: true,
            enable_checkpointing: true,
            use_distributed_sampler: true,
            reload_dataloaders_every_n_epochs: 0,
            checkpoint_format: Default::default(),
            checkpoint_prefix: String::new(),
            enable_model_summary: true,
            inference_mode: true,
            cuda_graphs: false,
            cuda_graphs_warmup_steps: 3,
            cuda_graphs_fallback: false,
            logger: LoggerChoice { csv: true, tensorboard: true },
            detect_nonfinite_loss: true,
            detect_anomaly: false,
            callback_timeout: None,
            handle_signals: true,
            async_checkpoint_io: false,
            slurm_auto_requeue: false,
            accelerator: "auto".into(),
            devices: "auto".into(),
            precision: "32-true".into(),
            grad_scaler: None,
            strategy: crate::strategies::lookup("auto").expect("auto is registered"),
        }
    }
}

/// Lightning's error for `Trainer(barebones=True, <arg>)`; `why` is the
/// reason up to "so it is disabled in barebones mode".
pub(crate) fn barebones_refusal(arg: &str, why: &str) -> Error {
    Error::invalid(format!("`Trainer(barebones=True, {arg})` was passed. {why} so it is disabled in barebones mode."))
}

impl TrainerOptions {
    /// Checks the options for values Lightning would refuse.
    pub fn validate(&self) -> Result<()> {
        let non_negative = |name: &str, v: Option<i64>| match v {
            Some(x) if x < 0 => Err(Error::invalid(format!("{name} must be >= 0, got {x}"))),
            _ => Ok(()),
        };
        if let Some(e) = self.max_epochs {
            if e < -1 {
                return Err(Error::invalid(format!("max_epochs must be -1 (no limit) or >= 0, got {e}")));
            }
        }
        if self.max_steps < -1 {
            return Err(Error::invalid(format!("max_steps must be -1 (no limit) or >= 0, got {}", self.max_steps)));
        }
        non_negative("min_epochs", self.min_epochs)?;
        non_negative("min_steps", self.min_steps)?;
        if self.log_every_n_steps < 1 {
            return Err(Error::invalid(format!("log_every_n_steps must be >= 1, got {}", self.log_every_n_steps)));
        }
        if self.accumulate_grad_batches < 1 {
            return Err(Error::invalid(format!(
                "accumulate_grad_batches must be >= 1, got {}",
                self.accumulate_grad_batches
            )));
        }
        if let Some(n) = self.check_val_every_n_epoch {
            if n < 1 {
                return Err(Error::invalid(format!("check_val_every_n_epoch must be >= 1 or none, got {n}")));
            }
        }
        if self.reload_dataloaders_every_n_epochs < 0 {
            return Err(Error::invalid(format!(
                "`reload_dataloaders_every_n_epochs` should be an int >= 0, got {}",
                self.reload_dataloaders_every_n_epochs
            )));
        }
        if self.num_sanity_val_steps < -1 {
            return Err(Error::invalid(format!(
                "num_sanity_val_steps must be -1 (all) or >= 0, got {}",
                self.num_sanity_val_steps
            )));
        }
        if let Some(v) = self.gradient_clip_val {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::invalid(format!("gradient_clip_val must be finite and >= 0, got {v}")));
            }
        }
        match self.val_check_interval {
            ValCheckInterval::Fraction(f) if !(f > 0.0 && f <= 1.0) => {
                return Err(Error::invalid(format!(
                    "val_check_interval {f} must be a fraction in (0, 1] or a batch count"
                )))
            }
            ValCheckInterval::Batches(0) => return Err(Error::invalid("val_check_interval must be at least 1 batch")),
            ValCheckInterval::Batches(_) if self.check_val_every_n_epoch.is_none() => {}
            _ => {}
        }
        crate::precision::Precision::parse(&self.precision)?;
        crate::accelerators::DevicesSpec::parse(&self.devices)?;
        if self.fast_dev_run < 0 {
            return Err(Error::invalid(format!("fast_dev_run must be >= 0, got {}", self.fast_dev_run)));
        }
        self.check_barebones()
    }

    /// Lightning's refusals of `Trainer(barebones=True, ...)` with a
    /// feature that can impact raw speed turned on.
    fn check_barebones(&self) -> Result<()> {
        if !self.barebones {
            return Ok(());
        }
        let refused = if self.enable_checkpointing {
            Some(("enable_checkpointing=True".to_string(), "Checkpointing can impact raw speed"))
        } else if self.logger.csv || self.logger.tensorboard {
            let logger = match (self.logger.csv, self.logger.tensorboard) {
                (true, true) => "True",
                (true, false) => "'csv'",
                _ => "'tensorboard'",
            };
            Some((format!("logger={logger}"), "Logging can impact raw speed"))
        } else if self.enable_progress_bar {
            Some(("enable_progress_bar=True".to_string(), "The progress bar can impact raw speed"))
        } else if self.enable_model_summary {
            Some(("enable_model_summary=True".to_string(), "Model summary can impact raw speed"))
        } else if self.num_sanity_val_steps != 0 {
            Some((
                format!("num_sanity_val_steps={}", self.num_sanity_val_steps),
                "Sanity checking can impact raw speed",
            ))
        } else if self.fast_dev_run != 0 {
            Some((
                format!("fast_dev_run={}", self.fast_dev_run),
                "Development run is not meant for raw speed evaluation",
            ))
        } else if self.detect_anomaly {
            Some(("detect_anomaly=True".to_string(), "Anomaly detection can impact raw speed"))
        } else if self.profiler != ProfilerKind::Off {
            let name = if self.profiler == ProfilerKind::Simple { "simple" } else { "pytorch" };
            Some((format!("profiler='{name}'"), "Profiling can impact raw speed"))
        } else {
            None
        };
        match refused {
            Some((arg, why)) => Err(barebones_refusal(&arg, why)),
            None => Ok(()),
        }
    }

    /// The `val_check_interval` in effect: a fast_dev_run validates at the
    /// end of its epoch whatever the option says (Lightning sets 1.0).
    pub fn effective_val_check_interval(&self) -> ValCheckInterval {
        if self.fast_dev_run > 0 {
            ValCheckInterval::Fraction(1.0)
        } else {
            self.val_check_interval
        }
    }

    /// The epoch limit in effect (`None` = unlimited).
    pub fn epoch_limit(&self) -> Option<i64> {
        if self.fast_dev_run > 0 {
            return Some(1);
        }
        match self.max_epochs {
            Some(-1) => None,
            Some(e) => Some(e),
            None if self.max_steps == -1 => Some(1000),
            None => None,
        }
    }

    /// The step limit in effect (-1 = unlimited).
    pub fn step_limit(&self) -> i64 {
        if self.fast_dev_run > 0 {
            self.fast_dev_run
        } else {
            self.max_steps
        }
    }

    /// The batch limit of a loop, with fast_dev_run and overfit_batches.
    pub fn effective_limit(&self, limit: BatchLimit) -> BatchLimit {
        if self.fast_dev_run > 0 {
            BatchLimit::Count(self.fast_dev_run as usize)
        } else if !self.overfit_batches.is_zero() {
            self.overfit_batches
        } else {
            limit
        }
    }
}
