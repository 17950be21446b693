//! Lightning's hooks: what they are called, and what a hook can see and do.
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use tch::Tensor;

/// The hooks, in Lightning's names (`fulmen_hook`). Callbacks receive them
/// in Lightning's order: each callback first (in the order added), then the
/// LightningModule.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    /// Start of fit / validate / test / predict (`setup(stage)`).
    Setup = 0,
    /// End of fit / validate / test / predict (`teardown(stage)`).
    Teardown = 1,
    /// `on_fit_start`.
    FitStart = 2,
    /// `on_fit_end`.
    FitEnd = 3,
    /// `on_sanity_check_start`.
    SanityCheckStart = 4,
    /// `on_sanity_check_end`.
    SanityCheckEnd = 5,
    /// `on_train_start`.
    TrainStart = 6,
    /// `on_train_end`.
    TrainEnd = 7,
    /// `on_train_epoch_start`.
    TrainEpochStart = 8,
    /// `on_train_epoch_end`.
    TrainEpochEnd = 9,
    /// `on_train_batch_start`.
    TrainBatchStart = 10,
    /// `on_train_batch_end` (the loss is readable).
    TrainBatchEnd = 11,
    /// `on_validation_start`.
    ValidationStart = 12,
    /// `on_validation_end`.
    ValidationEnd = 13,
    /// `on_validation_epoch_start`.
    ValidationEpochStart = 14,
    /// `on_validation_epoch_end`.
    ValidationEpochEnd = 15,
    /// `on_validation_batch_start`.
    ValidationBatchStart = 16,
    /// `on_validation_batch_end`.
    ValidationBatchEnd = 17,
    /// `on_test_start`.
    TestStart = 18,
    /// `on_test_end`.
    TestEnd = 19,
    /// `on_test_epoch_start`.
    TestEpochStart = 20,
    /// `on_test_epoch_end`.
    TestEpochEnd = 21,
    /// `on_test_batch_start`.
    TestBatchStart = 22,
    /// `on_test_batch_end`.
    TestBatchEnd = 23,
    /// `on_predict_start`.
    PredictStart = 24,
    /// `on_predict_end`.
    PredictEnd = 25,
    /// `on_predict_epoch_start`.
    PredictEpochStart = 26,
    /// `on_predict_epoch_end`.
    PredictEpochEnd = 27,
    /// `on_predict_batch_start`.
    PredictBatchStart = 28,
    /// `on_predict_batch_end` (the prediction is readable).
    PredictBatchEnd = 29,
    /// `on_before_backward` (the loss is readable).
    BeforeBackward = 30,
    /// `on_after_backward`: gradients are populated.
    AfterBackward = 31,
    /// `on_before_optimizer_step`: gradients are final (unscaled, before
    /// clipping).
    BeforeOptimizerStep = 32,
    /// `on_before_zero_grad`.
    BeforeZeroGrad = 33,
    /// `on_save_checkpoint`: add entries with the checkpoint accessors.
    SaveCheckpoint = 34,
    /// `on_load_checkpoint`: read entries with the checkpoint accessors.
    LoadCheckpoint = 35,
    /// `on_exception`: the run is failing; the error text is readable.
    /// Errors returned from this hook are dropped, so the original failure
    /// is the one reported.
    Exception = 36,
    /// `on_validation_model_eval`, the LightningModule's only: before
    /// `on_validation_start`. fulmen's default (the model in eval mode)
    /// runs unless the module overrides it.
    ValidationModelEval = 37,
    /// `on_validation_model_train`, the LightningModule's only: after
    /// `on_validation_end`, called only when the module overrides it
    /// (otherwise fit's validation puts the model back in train mode).
    ValidationModelTrain = 38,
    /// `on_test_model_eval`, the LightningModule's only: before
    /// `on_test_start` (default: eval mode).
    TestModelEval = 39,
    /// `on_test_model_train`, the LightningModule's only: after
    /// `on_test_end`, called only when the module overrides it.
    TestModelTrain = 40,
    /// `on_predict_model_eval`, the LightningModule's only: before
    /// `on_predict_start` (default: eval mode).
    PredictModelEval = 41,
    /// `on_validation_model_zero_grad`, the LightningModule's only: in fit,
    /// before a validation that follows an optimizer step (default: the
    /// model's gradients set to none).
    ValidationModelZeroGrad = 42,
    /// `on_before_batch_transfer`, the LightningModule's only: the batch as
    /// loaded, before it moves to the device; the hook may replace it.
    BeforeBatchTransfer = 43,
    /// `transfer_batch_to_device`, the LightningModule's only: when the
    /// module overrides it, it replaces fulmen's move of the batch to the
    /// run's device (readable in the context) and sets the moved batch.
    TransferBatchToDevice = 44,
    /// `on_after_batch_transfer`, the LightningModule's only: the batch on
    /// the device, before the step; the hook may replace it.
    AfterBatchTransfer = 45,
    /// `prepare_data`, the LightningModule's only: at the start of every
    /// run, after the datamodule's, on local rank 0 of each node (global
    /// rank 0 only with `prepare_data_per_node` false); the other ranks
    /// wait for it. Called only when the module overrides it.
    PrepareData = 46,
}

/// Every hook, in `fulmen_hook` order.
pub(crate) const ALL_HOOKS: [Hook; 47] = {
    use Hook::*;
    [
        Setup,
        Teardown,
        FitStart,
        FitEnd,
        SanityCheckStart,
        SanityCheckEnd,
        TrainStart,
        TrainEnd,
        TrainEpochStart,
        TrainEpochEnd,
        TrainBatchStart,
        TrainBatchEnd,
        ValidationStart,
        ValidationEnd,
        ValidationEpochStart,
        ValidationEpochEnd,
        ValidationBatchStart,
        ValidationBatchEnd,
        TestStart,
        TestEnd,
        TestEpochStart,
        TestEpochEnd,
        TestBatchStart,
        TestBatchEnd,
        PredictStart,
        PredictEnd,
        PredictEpochStart,
        PredictEpochEnd,
        PredictBatchStart,
        PredictBatchEnd,
        BeforeBackward,
        AfterBackward,
        BeforeOptimizerStep,
        BeforeZeroGrad,
        SaveCheckpoint,
        LoadCheckpoint,
        Exception,
        ValidationModelEval,
        ValidationModelTrain,
        TestModelEval,
        TestModelTrain,
        PredictModelEval,
        ValidationModelZeroGrad,
        BeforeBatchTransfer,
        TransferBatchToDevice,
        AfterBatchTransfer,
        PrepareData,
    ]
};

impl Hook {
    /// Lightning's method name.
    pub fn name(self) -> &'static str {
        use Hook::*;
        match self {
            Setup => "setup",
            Teardown => "teardown",
            FitStart => "on_fit_start",
            FitEnd => "on_fit_end",
            SanityCheckStart => "on_sanity_check_start",
            SanityCheckEnd => "on_sanity_check_end",
            TrainStart => "on_train_start",
            TrainEnd => "on_train_end",
            TrainEpochStart => "on_train_epoch_start",
            TrainEpochEnd => "on_train_epoch_end",
            TrainBatchStart => "on_train_batch_start",
            TrainBatchEnd => "on_train_batch_end",
            ValidationStart => "on_validation_start",
            ValidationEnd => "on_validation_end",
            ValidationEpochStart => "on_validation_epoch_start",
            ValidationEpochEnd => "on_validation_epoch_end",
            ValidationBatchStart => "on_validation_batch_start",
            ValidationBatchEnd => "on_validation_batch_end",
            TestStart => "on_test_start",
            TestEnd => "on_test_end",
            TestEpochStart => "on_test_epoch_start",
            TestEpochEnd => "on_test_epoch_end",
            TestBatchStart => "on_test_batch_start",
            TestBatchEnd => "on_test_batch_end",
            PredictStart => "on_predict_start",
            PredictEnd => "on_predict_end",
            PredictEpochStart => "on_predict_epoch_start",
            PredictEpochEnd => "on_predict_epoch_end",
            PredictBatchStart => "on_predict_batch_start",
            PredictBatchEnd => "on_predict_batch_end",
            BeforeBackward => "on_before_backward",
            AfterBackward => "on_after_backward",
            BeforeOptimizerStep => "on_before_optimizer_step",
            BeforeZeroGrad => "on_before_zero_grad",
            SaveCheckpoint => "on_save_checkpoint",
            LoadCheckpoint => "on_load_checkpoint",
            Exception => "on_exception",
            ValidationModelEval => "on_validation_model_eval",
            ValidationModelTrain => "on_validation_model_train",
            TestModelEval => "on_test_model_eval",
            TestModelTrain => "on_test_model_train",
            PredictModelEval => "on_predict_model_eval",
            ValidationModelZeroGrad => "on_validation_model_zero_grad",
            BeforeBatchTransfer => "on_before_batch_transfer",
            TransferBatchToDevice => "transfer_batch_to_device",
            AfterBatchTransfer => "on_after_batch_transfer",
            PrepareData => "prepare_data",
        }
    }

    /// The hook of value `v` (`fulmen_hook`), if any.
    pub fn from_i32(v: i32) -> Option<Hook> {
        ALL_HOOKS.into_iter().find(|h| *h as i32 == v)
    }

    /// Whether only the LightningModule receives it (Lightning calls it
    /// on the module alone), and only when the module overrides it
    /// ([`super::LightningModule::overrides`]); fulmen's default runs
    /// otherwise.
    pub fn module_only(self) -> bool {
        self as i32 >= Hook::ValidationModelEval as i32
    }

    /// Lightning's `_FxValidator` entry of the hook: the on_step /
    /// on_epoch values `self.log` allows there and its defaults; `None`
    /// where Lightning refuses `self.log` (setup, on_fit_start, the end
    /// hooks, predict's, checkpoint and batch-transfer hooks, ...).
    pub fn log_options(self) -> Option<super::metrics::FxLogOptions> {
        use super::metrics::{EPOCH_LOGGING, EVAL_BATCH_LOGGING, TRAIN_BATCH_LOGGING};
        use Hook::*;
        match self {
            TrainBatchStart | TrainBatchEnd | BeforeBackward | AfterBackward | BeforeOptimizerStep | BeforeZeroGrad => {
                Some(TRAIN_BATCH_LOGGING)
            }
            ValidationBatchStart | ValidationBatchEnd | TestBatchStart | TestBatchEnd => Some(EVAL_BATCH_LOGGING),
            TrainStart | TrainEpochStart | TrainEpochEnd | ValidationStart | ValidationEpochStart
            | ValidationEpochEnd | TestStart | TestEpochStart | TestEpochEnd => Some(EPOCH_LOGGING),
            _ => None,
        }
    }

    /// Whether the hook runs once per batch and may log per step: its logs
    /// join the epoch's step metrics ([`TrainerState::batch_hook_logs`]).
    pub fn logs_per_batch(self) -> bool {
        self.log_options().is_some_and(|o| o.allowed_on_step.contains(&true))
    }

    /// Whether the hook belongs to the training loop (its epoch-level logs
    /// go out with the training epoch's metrics).
    pub fn is_training(self) -> bool {
        matches!(self, Hook::TrainStart | Hook::TrainEpochStart | Hook::TrainEpochEnd)
    }

    /// Whether the hook may replace the batch ([`HookContext::set_batch`]).
    pub fn sets_batch(self) -> bool {
        matches!(self, Hook::BeforeBatchTransfer | Hook::TransferBatchToDevice | Hook::AfterBatchTransfer)
    }
}

/// One parameter group's hyperparameters under its LearningRateMonitor
/// name (`lr-SGD`, `lr-Adam-1/pg2`).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRates {
    /// The metric name of the learning rate.
    pub name: String,
    /// Learning rate.
    pub lr: f64,
    /// Momentum (SGD, RMSprop), beta1 (the Adam family), 0 for Adagrad.
    pub momentum: f64,
    /// Weight decay.
    pub weight_decay: f64,
    /// When the optimizer's scheduler steps (`None`: no scheduler).
    pub interval: Option<crate::trainer::module::Interval>,
}

/// A device to synchronize and the accelerator that does it.
#[derive(Clone)]
pub struct DeviceSync(pub std::sync::Arc<dyn crate::accelerators::Accelerator>, pub crate::tensor::device::Device);

impl std::fmt::Debug for DeviceSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceSync({}, {})", self.0.name(), self.1.name())
    }
}

impl DeviceSync {
    /// Blocks until the device's queued work is done.
    pub fn wait(&self) -> Result<()> {
        self.0.synchronize(self.1)
    }
}

/// The trainer's state that hooks read, and the requests they make.
#[derive(Debug, Default)]
pub struct TrainerState {
    /// Current epoch (0-based).
    pub epoch: i64,
    /// Optimizer steps taken so far.
    pub global_step: i64,
    /// Training batches that ended in an optimizer step (Lightning's
    /// `_batches_that_stepped`, the loggers' step): `global_step` with
    /// automatic optimization, one per batch with manual optimization
    /// (whatever number of optimizers the batch stepped).
    pub batches_stepped: i64,
    /// Lightning's `_batches_that_stepped` as the loggers see it: during a
    /// training batch's hooks and the validation after it, the count
    /// before that batch's own step (fulmen counts the step at once).
    pub log_step: i64,
    /// Latest value of every logged metric (device values logged per step
    /// stay pending until read: [`super::metric_map::MetricMap::settle`]).
    pub callback_metrics: super::metric_map::MetricMap,
    /// Latest value of every metric logged for the loggers (Lightning's
    /// `logged_metrics`: the `logger=True` values of each training,
    /// validation and test batch, training epoch and validation / test
    /// end, whether or not a logger is active; not the sanity check's).
    pub logged_metrics: super::metric_map::MetricMap,
    /// What the last validate or test run returned (empty after fit and
    /// predict).
    pub eval_results: Vec<BTreeMap<String, f64>>,
    /// Set by a hook to stop training after the current step / epoch
    /// (Lightning's `trainer.should_stop = True`).
    pub should_stop: bool,
    /// The log folder of this run, if a logger is active.
    pub log_dir: Option<PathBuf>,
    /// The first logger's run folder (`save_dir/name/version`), where
    /// ModelCheckpoint writes: the log folder, unless a TensorBoard
    /// logger's `sub_dir` puts its files below it.
    pub run_dir: Option<PathBuf>,
    /// The default root folder.
    pub root_dir: PathBuf,
    /// Whether this is the sanity check's validation.
    pub sanity_checking: bool,
    /// Every optimizer's parameter groups as LearningRateMonitor names and
    /// reads them.
    pub learning_rates: Vec<GroupRates>,
    /// Checkpoints requested by hooks, written by the trainer afterwards:
    /// (path, weights only).
    pub save_requests: Vec<(PathBuf, bool)>,
    /// Files to remove after the requested saves (old top-k checkpoints).
    pub remove_requests: Vec<PathBuf>,
    /// Symlinks to make after the requested saves: (target, link), the
    /// link replacing what is at its path (ModelCheckpoint's
    /// `save_last_link`).
    pub link_requests: Vec<(PathBuf, PathBuf)>,
    /// Lightning's `trainer.accumulate_grad_batches`: batches whose
    /// gradients add up before the optimizers step, read at each epoch
    /// start after its hooks (GradientAccumulationScheduler sets it).
    pub accumulate_grad_batches: i64,
    /// The module optimizes itself (`automatic_optimization` off).
    pub manual_optimization: bool,
    /// Set by a hook for the rest of an epoch: training batches run
    /// forward only (no zero_grad, backward or optimizer step; schedulers
    /// stepping per epoch still step), as StochasticWeightAveraging's
    /// epoch that recomputes BatchNorm statistics. Lightning's
    /// `fit_loop._skip_backward`; cleared when the epoch ends.
    pub skip_backward: bool,
    /// Set by the LightningModule's `on_train_batch_start`
    /// ([`HookContext::skip_rest_of_epoch`], Lightning's `return -1`): the
    /// batch is not trained on and the epoch ends there. Cleared when the
    /// epoch loop reads it.
    pub skip_rest_of_epoch: bool,
    /// Metrics callbacks want logged, each batch at its logger step
    /// (LearningRateMonitor, ThroughputMonitor).
    pub log_requests: Vec<(i64, Vec<(String, f64)>)>,
    /// Device statistics a callback wants logged (DeviceStatsMonitor):
    /// the name prefix, whether to add (true) or drop (false) the CPU's
    /// statistics (`None`: the device's own only, as Lightning's
    /// `cpu_stats=None`), and the logger step.
    pub device_stats_requests: Vec<(String, Option<bool>, i64)>,
    /// Validation runs every this many epochs (`None`: counted in batches).
    pub check_val_every_n_epoch: Option<i64>,
    /// Whether validation runs once per epoch, at its end.
    pub val_once_per_epoch: bool,
    /// Whether validation runs when a wall-time `val_check_interval` is up.
    pub val_check_by_time: bool,
    /// Batches one validation run uses (0: no validation).
    pub num_val_batches: usize,
    /// Batches of each validation loader (`None`: a loader of unknown
    /// length) in the last fit's validation or validate run, after
    /// `limit_val_batches` (Lightning's `num_val_batches`).
    pub val_loader_batches: Vec<Option<usize>>,
    /// The same for the last test run's loaders (Lightning's
    /// `num_test_batches`).
    pub test_loader_batches: Vec<Option<usize>>,
    /// The same for the last predict run's loaders (Lightning's
    /// `num_predict_batches`).
    pub predict_loader_batches: Vec<Option<usize>>,
    /// Batches of each validation loader the last fit's sanity check ran
    /// (Lightning's `num_sanity_val_batches`); empty without one.
    pub sanity_loader_batches: Vec<Option<usize>>,
    /// Whether this is a fast_dev_run (callbacks that write files skip).
    pub fast_dev_run: bool,
    /// Write step metrics every this many steps.
    pub log_every_n_steps: i64,
    /// Whether the trainer has a logger (a file logger or one the host
    /// added), on every rank: Lightning's `trainer.loggers` is not empty.
    pub has_loggers: bool,
    /// Whether a logger of the run records images, histograms and texts
    /// (a TensorBoard logger), on every rank.
    pub media_loggers: bool,
    /// Images, histograms and texts hooks asked to log, written to the
    /// loggers after the hook: (tag, what, step).
    pub media_requests: Vec<(String, crate::loggers::Media, i64)>,
    /// Checkpoints ModelCheckpoint asked for: once written, the loggers'
    /// `after_save_checkpoint` gets each.
    pub checkpoint_notices: Vec<PathBuf>,
    /// Metrics shown in the progress output (`prog_bar=True`).
    pub progress_metrics: super::metric_map::MetricMap,
    /// Mean training loss of the epoch so far, kept on the device until
    /// read.
    pub running_loss: super::running_loss::RunningLoss,
    /// Training batches per epoch, when known.
    pub num_train_batches: Option<usize>,
    /// The epoch limit, when there is one. Fit reads it before each
    /// epoch, so an `on_fit_start` hook may extend the fit
    /// (StochasticWeightAveraging's BatchNorm epoch; Lightning's
    /// `fit_loop.max_epochs`).
    pub max_epochs: Option<i64>,
    /// Seconds spent in each stage so far ("fit", "validate", ...), kept
    /// in checkpoints by the Timer.
    pub time_elapsed: BTreeMap<String, f64>,
    /// This process's rank (0 without DDP).
    pub global_rank: usize,
    /// The checkpoint this fit resumed from; a run never deletes it.
    pub ckpt_path: Option<PathBuf>,
    /// Whether a checkpoint IO plugin stores the checkpoints (their paths
    /// need not exist on disk).
    pub checkpoint_plugin: bool,
    /// Number of processes of the run (1 without DDP).
    pub world_size: usize,
    /// Devices the run uses on this node (Lightning's `num_devices`; 0
    /// before any run).
    pub num_devices: usize,
    /// This node's index in the job (Lightning's `node_rank`; 0 without
    /// DDP).
    pub node_rank: usize,
    /// The run's accelerator and device when that is not the CPU: timing
    /// callbacks synchronize it before reading a clock.
    pub device_sync: Option<DeviceSync>,
    /// Metrics logged by a start or epoch hook, applied when its module
    /// hook returns (before the monitoring callbacks run).
    pub hook_logs: Vec<HookLog>,
    /// Metrics logged by a batch hook (on_train_batch_end,
    /// on_before_optimizer_step, on_validation_batch_end, ...), recorded
    /// with the epoch's step metrics by the loop after the hook.
    pub batch_hook_logs: Vec<HookLog>,
    /// Epoch metrics logged by evaluation hooks since the stage's loggers
    /// were last written, as they go to the loggers.
    pub hook_metrics: BTreeMap<String, f64>,
    /// The state of the run's first EarlyStopping as it last left it, with
    /// the address that identifies it: the first one in the run's order
    /// claims it at its first hook and publishes every change there;
    /// `None` without one.
    pub early_stopping: Option<(usize, crate::callbacks::EarlyStoppingState)>,
    /// The same for the training hooks (on_train_start,
    /// on_train_epoch_start / end): written with the training epoch's
    /// metrics.
    pub train_hook_metrics: BTreeMap<String, f64>,
}

/// A metric logged from a hook (Lightning's `self.log` in a hook).
#[derive(Debug, Clone, PartialEq)]
pub struct HookLog {
    /// The hook that logged it.
    pub hook: Hook,
    /// The metric's name.
    pub name: String,
    /// Its value.
    pub value: f64,
    /// How it was logged, on_step / on_epoch resolved with the hook's
    /// defaults (the start and epoch hooks: on_epoch only).
    pub flags: super::metrics::LogFlags,
    /// The size of the hook's batch (weights an epoch mean); `None`: the
    /// loop's current batch.
    pub batch_size: Option<i64>,
}

/// Makes a process group of the given ranks and returns its id (torch's
/// `new_group`, for `sync_dist_group`).
pub type GroupMaker<'a> = dyn Fn(&[usize]) -> Result<u32> + 'a;

/// What one hook call sees: the hook, the trainer state, and the batch data
/// involved (when the hook has them).
pub struct HookContext<'a> {
    /// The hook being called.
    pub hook: Hook,
    /// "fit", "validate", "test" or "predict".
    pub stage: &'static str,
    /// Trainer state; hooks may set `should_stop` and add requests.
    pub state: &'a mut TrainerState,
    /// Index of the batch within its epoch, for batch hooks.
    pub batch_idx: i64,
    /// The evaluation loader of the batch (Lightning's `dataloader_idx`;
    /// 0 with one loader, in training and outside batch hooks).
    pub dataloader_idx: usize,
    /// The batch, for batch hooks.
    pub batch: Option<&'a [Tensor]>,
    /// The dataset indices of the batch's samples, in predict's batch
    /// hooks when a callback asks for them ([`Callback::wants_batch_indices`])
    /// and the loader can tell (Lightning's `current_batch_indices`).
    pub batch_indices: Option<&'a [i64]>,
    /// The loss (training batch end, before / after backward), the
    /// prediction (predict batch end) or what a validation / test step
    /// returned (their batch end).
    pub output: Option<&'a Tensor>,
    /// The predict step's whole prediction (predict batch end): its
    /// tensor, or the tuple or dict it made.
    pub prediction: Option<&'a super::Prediction>,
    /// Checkpoint entries (save / load hooks): name -> text value.
    pub checkpoint: Option<&'a mut BTreeMap<String, String>>,
    /// The failure, for `on_exception`.
    pub exception: Option<&'a Error>,
    /// The module's model (callbacks that read or change the weights, such
    /// as weight averaging); `None` outside the run's hooks.
    pub model: Option<super::SharedModel>,
    /// The run's optimizers with their schedulers (Lightning's
    /// `trainer.optimizers`), for callbacks that change param groups
    /// (BackboneFinetuning); `None` outside fit's hooks.
    pub optimizers: Option<&'a mut [super::module::OptimizerConfig]>,
    /// Whether the LightningModule's own hook is being called (false for
    /// the callbacks): only its `on_train_batch_start` may skip the rest of
    /// the epoch, as only its return value counts in Lightning.
    pub module: bool,
    /// The run's root device (`transfer_batch_to_device`'s `device`);
    /// `None` outside a run's hooks.
    pub device: Option<crate::tensor::device::Device>,
    /// The optimizer of on_before_optimizer_step / on_before_zero_grad: its
    /// index in configure_optimizers' order.
    pub optimizer_idx: Option<usize>,
    /// The batch a batch-transfer hook set ([`HookContext::set_batch`]).
    pub replaced_batch: Option<Vec<Tensor>>,
    /// Lightning's `strategy.broadcast` of a decision: rank 0's value on
    /// every rank (a collective every rank must call at the same point;
    /// the value itself without DDP). `None` outside the run's hooks.
    pub rank_zero_decides: Option<&'a dyn Fn(bool) -> Result<bool>>,
    /// Lightning's `strategy.reduce_boolean_decision(all=True)`: true when
    /// every rank's value is (a collective every rank must call at the
    /// same point; the value itself without DDP). `None` outside the run's
    /// hooks.
    pub all_ranks_decide: Option<&'a dyn Fn(bool) -> Result<bool>>,
    /// torch's `new_group(ranks)` over the run's job (a collective of the
    /// members, numbered alike on every rank); `None` in hooks not every
    /// rank calls, and outside the run's hooks.
    pub group_maker: Option<&'a GroupMaker<'a>>,
}

/// The error of a hook whose context holds no optimizers.
fn no_optimizers(hook: Hook) -> Error {
    Error::state(format!("{} has no optimizers: only a run's hooks reach them", hook.name()))
}

/// The error for optimizer `index` of `n`.
fn out_of_range(index: usize, n: usize) -> Error {
    Error::new(crate::error::ErrorCode::OutOfRange, format!("optimizer {index} is out of range: the run has {n}"))
}

impl TrainerState {
    /// Reads the device values logged per step and not read yet into the
    /// callback, logged and progress metrics (one copy per device and map).
    pub fn settle_metrics(&mut self) -> Result<()> {
        self.callback_metrics.settle()?;
        self.logged_metrics.settle()?;
        self.progress_metrics.settle()
    }
}

impl<'a> HookContext<'a> {
    /// A context with no batch data.
    pub fn new(hook: Hook, stage: &'static str, state: &'a mut TrainerState) -> Self {
        HookContext {
            hook,
            stage,
            state,
            batch_idx: -1,
            dataloader_idx: 0,
            batch: None,
            batch_indices: None,
            output: None,
            prediction: None,
            checkpoint: None,
            exception: None,
            model: None,
            optimizers: None,
            module: false,
            device: None,
            optimizer_idx: None,
            replaced_batch: None,
            rank_zero_decides: None,
            all_ranks_decide: None,
            group_maker: None,
        }
    }

    /// The run's optimizers (Lightning's `trainer.optimizers`): those
    /// configure_optimizers added in a fit, none in validate / test /
    /// predict. `InvalidState` outside a run's hooks.
    pub fn optimizers(&self) -> Result<&[super::module::OptimizerConfig]> {
        self.optimizers.as_deref().ok_or_else(|| no_optimizers(self.hook))
    }

    /// Optimizer `index` of the run, to change (its param groups).
    /// `OutOfRange` past the run's optimizers, `InvalidState` outside a
    /// run's hooks.
    pub fn optimizer_mut(&mut self, index: usize) -> Result<&mut dyn crate::optim::Optimizer> {
        let hook = self.hook;
        let all = self.optimizers.as_deref_mut().ok_or_else(|| no_optimizers(hook))?;
        let n = all.len();
        let cfg = all.get_mut(index).ok_or_else(|| out_of_range(index, n))?;
        Ok(cfg.optimizer.as_mut())
    }

    /// Optimizer `index` of the run, to read; errors as
    /// [`HookContext::optimizer_mut`].
    pub fn optimizer(&self, index: usize) -> Result<&dyn crate::optim::Optimizer> {
        let all = self.optimizers()?;
        let cfg = all.get(index).ok_or_else(|| out_of_range(index, all.len()))?;
        Ok(cfg.optimizer.as_ref())
    }

    /// torch's `new_group(ranks)` from a hook, for Lightning's
    /// `sync_dist_group`: every rank of the job calls it with the same
    /// ranks, in the same order; the members meet. Returns the group's id
    /// (1 for the run's first group, 2 for the next...), the same on every
    /// rank. In a run of one process the group reduces nothing.
    /// `InvalidState` where the context has no way to meet the other ranks
    /// (prepare_data and on_exception, which not every rank runs, the
    /// checkpoint hooks, monitoring callbacks' on_train_epoch_end, manual
    /// optimization's optimizer hooks) and outside a run.
    pub fn new_group(&self, ranks: &[usize]) -> Result<u32> {
        match self.group_maker {
            Some(make) => make(ranks),
            None => Err(Error::state(format!(
                "a process group can be made only in a hook every rank runs, not in {}",
                self.hook.name()
            ))),
        }
    }

    /// Replaces the batch, from on_before_batch_transfer,
    /// transfer_batch_to_device or on_after_batch_transfer (the hook's
    /// return value in Lightning); the run goes on with `batch`.
    pub fn set_batch(&mut self, batch: Vec<Tensor>) -> Result<()> {
        if !self.hook.sets_batch() {
            return Err(Error::state(format!(
                "only on_before_batch_transfer, transfer_batch_to_device and on_after_batch_transfer can replace                  the batch, not {}",
                self.hook.name()
            )));
        }
        self.replaced_batch = Some(batch);
        Ok(())
    }

    /// Lightning's `on_train_batch_start` returning -1, from the
    /// LightningModule's own hook: this batch is not trained on (no
    /// training_step, optimizer step or `on_train_batch_end`) and the epoch
    /// ends after it. As in Lightning, the schedulers that step per step
    /// and per epoch still step (automatic optimization), no validation
    /// runs for the rest of the epoch, the epoch-end hooks run, and the next
    /// epoch starts as usual. Under DDP every rank must skip alike.
    pub fn skip_rest_of_epoch(&mut self) -> Result<()> {
        if self.hook != Hook::TrainBatchStart || !self.module {
            let who = if self.module { "the LightningModule's" } else { "a callback's" };
            return Err(Error::state(format!(
                "only the LightningModule's on_train_batch_start can skip the rest of the epoch (Lightning's \
                 `return -1`), not {who} {}",
                self.hook.name()
            )));
        }
        self.state.skip_rest_of_epoch = true;
        Ok(())
    }

    /// Logs a metric, as Lightning's `self.log(name, value, on_step=...,
    /// on_epoch=...)` in this hook: `on_step` / `on_epoch` `None` take the
    /// hook's defaults ([`Hook::log_options`]); a hook where Lightning
    /// refuses logging is `InvalidState`, a level it does not allow
    /// `InvalidArgument`. A start or epoch hook's value reaches
    /// callback_metrics as soon as the module's hook returns (so
    /// ModelCheckpoint and EarlyStopping can monitor what
    /// on_train_epoch_end logs) and the loggers with the epoch's metrics; a
    /// batch hook's joins the epoch's step and epoch metrics as a step's
    /// would. With `sync_dist` the value goes through `reduce_fx` over the
    /// ranks. In barebones mode the value is dropped (a warning, once
    /// per run).
    pub fn log(
        &mut self,
        name: &str,
        value: f64,
        on_step: Option<bool>,
        on_epoch: Option<bool>,
        flags: super::metrics::LogFlags,
    ) -> Result<()> {
        let hook = self.hook;
        let options = hook.log_options().ok_or_else(|| {
            Error::state(format!(
                "You can't `self.log()` inside `{}`. HINT: You can still log directly to the logger by using \
                 `self.logger.experiment`.",
                hook.name()
            ))
        })?;
        super::context::check_metric_name(name)?;
        let (on_step, on_epoch) = options.resolve(hook.name(), on_step, on_epoch)?;
        let flags = super::metrics::LogFlags { on_step, on_epoch, ..flags };
        let batch_size = self.batch.map(super::batch_size_of);
        let log = HookLog { hook, name: name.to_string(), value, flags, batch_size };
        if super::run_settings::barebones_drops_log() {
            return Ok(());
        }
        if hook.logs_per_batch() {
            self.state.batch_hook_logs.push(log);
        } else {
            self.state.hook_logs.push(log);
        }
        Ok(())
    }

    /// Logs an image, a histogram or a text to the run's TensorBoard
    /// logger (Lightning's `self.logger.experiment.add_image(tag, img,
    /// step)` from a hook), written when the hook returns; other ranks'
    /// requests are dropped, as Lightning's loggers log on rank 0 only.
    pub fn add_media(&mut self, tag: &str, media: crate::loggers::Media, step: i64) -> Result<()> {
        if tag.is_empty() {
            return Err(Error::invalid("the tag is empty"));
        }
        if !self.state.media_loggers {
            return Err(Error::state(format!(
                "tag {tag:?} in {}: this {} run has no TensorBoard logger (the \"logger\" option or an added \
                 TensorBoard logger)",
                self.hook.name(),
                self.stage
            )));
        }
        self.state.media_requests.push((tag.to_string(), media, step));
        Ok(())
    }

    /// Reads a metric, or an error naming the metrics that exist.
    pub fn metric(&self, name: &str) -> Result<f64> {
        self.state.callback_metrics.read(name)?.ok_or_else(|| {
            Error::state(format!("metric `{name}` was not logged; logged: {:?}", self.state.callback_metrics.names()))
        })
    }
}

/// Something that receives hooks: a built-in callback, a host callback, or
/// the LightningModule's own hooks.
pub trait Callback {
    /// A short name, unique per kind ("ModelCheckpoint", "EarlyStopping").
    fn name(&self) -> String;
    /// The callback's type, as Lightning's `type(callback)`: a callback a
    /// module's `configure_callbacks` returns replaces the trainer's of the
    /// same kind. Default: the name.
    fn kind(&self) -> String {
        self.name()
    }
    /// Handles one hook; the default ignores it.
    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()>;
    /// State saved in checkpoints (text values).
    fn state_dict(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// Restores what `state_dict` produced.
    fn load_state_dict(&mut self, _state: &BTreeMap<String, String>) -> Result<()> {
        Ok(())
    }
    /// Whether it acts on monitored metrics (ModelCheckpoint,
    /// EarlyStopping): in on_train_epoch_end such callbacks run after the
    /// module's hook, so they see what it logged (Lightning's order).
    fn monitors(&self) -> bool {
        false
    }
    /// Lightning's `state_key` of the callback's Lightning counterpart
    /// (ModelCheckpoint, EarlyStopping), under which Lightning-format
    /// checkpoints keep its state; `None` for callbacks Lightning lacks.
    fn lightning_state_key(&self) -> Option<String> {
        None
    }
    /// Tensors for a checkpoint being saved, after its state_dict and
    /// optimizer states are gathered (weight averaging puts its average in
    /// the state_dict and the trained weights in `current_model_state`).
    fn on_save_tensors(&mut self, _ck: &mut crate::checkpoint::Checkpoint) -> Result<()> {
        Ok(())
    }
    /// Reads what `on_save_tensors` wrote, after the model got the
    /// checkpoint's state_dict (names mapped with `prefix`, as the model's).
    fn on_load_tensors(
        &mut self,
        _ck: &crate::checkpoint::Checkpoint,
        _model: &super::SharedModel,
        _prefix: &str,
    ) -> Result<()> {
        Ok(())
    }
    /// Puts back, on a resumed fit, the param groups the callback added to
    /// the optimizers before the checkpoint was written: called after its
    /// `load_state_dict` and before the optimizers load their states
    /// (Lightning's BaseFinetuning does this in `on_fit_start`, before
    /// `restore_training_state`). `prefix` is the checkpoint's name prefix
    /// (Lightning's attribute holding the model).
    fn restore_param_groups(
        &mut self,
        _model: &super::SharedModel,
        _optimizers: &mut [super::module::OptimizerConfig],
        _prefix: &str,
    ) -> Result<()> {
        Ok(())
    }
    /// Puts back, on a resumed fit, a scheduler the callback put in the
    /// optimizers before the checkpoint was written (StochasticWeightAveraging's
    /// SWALR): called after every callback's `restore_param_groups` (so the
    /// groups are all there) and before the schedulers load their states.
    fn restore_schedulers(&mut self, _optimizers: &mut [super::module::OptimizerConfig]) -> Result<()> {
        Ok(())
    }
    /// Whether predict's batch hooks should carry the samples' dataset
    /// indices (`HookContext::batch_indices`); computing them costs a pass
    /// over the loader's order per epoch, so only callbacks that use them
    /// (the prediction writer) ask.
    fn wants_batch_indices(&self) -> bool {
        false
    }
    /// The callback as `Any`, so the trainer can find its ModelCheckpoints
    /// and Timers.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}
