//! One run of the trainer: hook dispatch to callbacks and the module, the
//! requests hooks make (checkpoints, logs), loggers and checkpoint files.
use super::hooks::{Callback, GroupRates, Hook, HookContext, TrainerState};
use super::loop_progress::FitProgress;
use super::module::{LightningModule, OptimizerConfig};
use super::profiler::{timed, SimpleProfiler};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result, ResultExt};
use crate::loggers::Logger;
use std::collections::BTreeMap;
use tch::Tensor;

/// Why a run with sharded checkpoints and a checkpoint_io plugin is refused.
const SHARDED_WITH_PLUGIN: &str = "sharded checkpoints (fsdp_state_dict_type \"sharded\", model_parallel's \
     save_distributed_checkpoint) are directories fulmen writes itself; a checkpoint_io plugin cannot store them \
     (Lightning's FSDP and ModelParallel strategies refuse storage options likewise): set fsdp_state_dict_type \
     \"full\" or save_distributed_checkpoint false";

/// Data a hook call carries besides the trainer state.
#[derive(Default)]
pub(crate) struct HookData<'a> {
    pub batch_idx: i64,
    pub dataloader_idx: usize,
    pub batch: Option<&'a [Tensor]>,
    pub batch_indices: Option<&'a [i64]>,
    pub output: Option<&'a Tensor>,
    /// The predict step's whole prediction (predict batch end).
    pub prediction: Option<&'a super::Prediction>,
    pub exception: Option<&'a Error>,
    pub optimizer_idx: Option<usize>,
}

/// Lightning's `strategy.broadcast` of a decision: rank 0's `decision` on
/// every rank (one collective every rank calls).
fn rank_zero_decision(strategy: &super::strategy::RunStrategy, decision: bool) -> Result<bool> {
    let mut v = [if decision && strategy.is_global_zero() { 1.0 } else { 0.0 }];
    strategy.reduce(&mut v, crate::trainer::metrics::ReduceFx::Sum)?;
    Ok(v[0] > 0.0)
}

/// Records the metrics the hook just called logged: averaged over
/// ranks where asked, into callback_metrics (what ModelCheckpoint and
/// EarlyStopping monitor), the progress output and, at the stage's
/// next logger write, the loggers.
fn apply_hook_logs(state: &mut TrainerState, strategy: &super::strategy::RunStrategy) -> Result<()> {
    let logs = std::mem::take(&mut state.hook_logs);
    if logs.is_empty() {
        return Ok(());
    }
    let mut values: Vec<f64> = logs.iter().map(|l| l.value).collect();
    super::metrics::reduce_by_op(&mut values, |i| logs[i].flags.sync_op(), &|v, op, g| strategy.reduce_in(v, op, g))?;
    for (l, value) in logs.into_iter().zip(values) {
        state.callback_metrics.insert(l.name.clone(), value);
        if l.flags.prog_bar {
            state.progress_metrics.insert(l.name.clone(), value);
        }
        if l.flags.logger {
            let bucket = if l.hook.is_training() { &mut state.train_hook_metrics } else { &mut state.hook_metrics };
            bucket.insert(l.name, value);
        }
    }
    Ok(())
}

/// Everything one fit / validate / test / predict call works with.
pub(crate) struct Run<'a> {
    pub stage: &'static str,
    pub state: &'a mut TrainerState,
    pub callbacks: Vec<&'a mut Box<dyn Callback>>,
    pub module: &'a mut dyn LightningModule,
    pub optimizers: Vec<OptimizerConfig>,
    pub loggers: Vec<&'a mut Box<dyn Logger>>,
    /// The fit loop's progress, kept as Lightning keeps it and saved whole
    /// in checkpoints.
    pub progress: FitProgress,
    /// Format of the checkpoints the run writes.
    pub checkpoint_format: crate::checkpoint::CheckpointFormat,
    /// The `checkpoint_prefix` option.
    pub checkpoint_prefix: String,
    /// Whether an optimizer's closure is running (`closure_step`): the
    /// optimizers are out of the run, so checkpoint requests wait.
    pub in_closure: bool,
    /// The strategy, which owns the accelerator, device and precision
    /// (Lightning's chain loop -> strategy -> precision -> accelerator).
    pub strategy: super::strategy::RunStrategy,
    /// The simple profiler, when `profiler="simple"` or `"pytorch"`.
    pub profiler: Option<SimpleProfiler>,
    /// libtorch's profiler, when `profiler="pytorch"`.
    pub torch_profiler: Option<super::torch_profiler::TorchProfiler>,
    /// The warnings printed so far in this run ([`Run::warn_once`]).
    pub warned: Vec<&'static str>,
    /// Where the run's checkpoints are written, read and removed (local
    /// files or the trainer's checkpoint IO plugin).
    pub checkpoints: crate::checkpoint::io::CheckpointWriter,
    /// The SLURM requeue this run does on SIGUSR1, when on.
    pub requeue: Option<super::slurm::Requeue>,
    /// The module's optimization hooks, when it overrides any.
    pub opt_hooks: Option<std::rc::Rc<dyn super::optimization::OptimizationHooks>>,
    /// When training started or the last validation ended (a wall-time
    /// `val_check_interval` counts from it).
    pub last_validation: std::time::Instant,
    /// Per evaluation loader, the batches whose step values went to the
    /// loggers so far: the step they are logged at (Lightning's
    /// `_seen_batches_per_dataloader`, kept across a fit's validations
    /// until the loaders are reloaded).
    pub eval_batches_logged: Vec<i64>,
    /// The graphed training steps of a fit with `cuda_graphs` on.
    pub graphs: Option<super::graphed_step::GraphedSteps>,
    /// The graphed validation and test steps of a run with `cuda_graphs`
    /// on.
    pub eval_graphs: Option<super::graphed_eval::GraphedEval>,
    /// Gradients are zeroed in place, never released (graphed steps write
    /// into the gradients they captured).
    pub grads_stay: bool,
}

/// Calls one callback's hook, timed when profiling, naming it in errors.
fn call_callback(
    profiler: &mut Option<SimpleProfiler>,
    cb: &mut Box<dyn Callback>,
    ctx: &mut HookContext,
) -> Result<()> {
    let hook = ctx.hook;
    let action = profiler.is_some().then(|| format!("[Callback]{}.{}", cb.name(), hook.name()));
    timed(profiler, || action.unwrap_or_default(), || cb.on_hook(ctx))
        .map_err(|e| e.context(format!("callback {} in {}", cb.name(), hook.name())))
}

fn class_name(optimizer: &str) -> &'static str {
    match optimizer {
        "sgd" => "SGD",
        "adam" => "Adam",
        "adamw" => "AdamW",
        "rmsprop" => "RMSprop",
        "adagrad" => "Adagrad",
        "adamax" => "Adamax",
        "nadam" => "NAdam",
        "radam" => "RAdam",
        "lbfgs" => "LBFGS",
        _ => "Optimizer",
    }
}

impl<'a> Run<'a> {
    /// A run of `stage` ("fit", "validate", ...) with no optimizers yet and
    /// its progress at the start: the one way fit and the evaluation runs
    /// build it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        stage: &'static str,
        state: &'a mut TrainerState,
        callbacks: Vec<&'a mut Box<dyn Callback>>,
        module: &'a mut dyn LightningModule,
        loggers: Vec<&'a mut Box<dyn Logger>>,
        opts: &super::TrainerOptions,
        strategy: super::strategy::RunStrategy,
        checkpoints: crate::checkpoint::io::CheckpointWriter,
    ) -> Result<Self> {
        if stage == "fit" && opts.strategy.writes_sharded_checkpoints() && checkpoints.has_plugin() {
            // Refused before anything runs, not at the first checkpoint.
            return Err(Error::unsupported(SHARDED_WITH_PLUGIN));
        }
        let opt_hooks = module.optimization_hooks();
        Ok(Run {
            stage,
            state,
            callbacks,
            module,
            optimizers: Vec::new(),
            loggers,
            progress: FitProgress::default(),
            checkpoint_format: opts.checkpoint_format,
            checkpoint_prefix: opts.checkpoint_prefix.clone(),
            in_closure: false,
            torch_profiler: super::torch_profiler::TorchProfiler::when(opts.profiler, strategy.root_device())?,
            strategy,
            profiler: SimpleProfiler::when(opts.profiler),
            warned: Vec::new(),
            checkpoints,
            requeue: None,
            opt_hooks,
            last_validation: std::time::Instant::now(),
            eval_batches_logged: Vec::new(),
            graphs: None,
            eval_graphs: super::graphed_eval::GraphedEval::when(opts),
            grads_stay: false,
        })
    }
}

impl Run<'_> {
    /// Calls `hook` on every callback, then on the module, then carries
    /// out the requests they made.
    pub fn hook(&mut self, hook: Hook, data: HookData) -> Result<()> {
        // A SIGINT / SIGTERM stops the run here, at the next hook.
        if hook != Hook::Exception {
            super::interrupt::check()?;
        }
        let strategy = &self.strategy;
        let rank_zero_decides = |decision: bool| rank_zero_decision(strategy, decision);
        let all_ranks_decide = |decision: bool| strategy.all(decision);
        let group_maker = |ranks: &[usize]| strategy.new_group(ranks);
        let mut ctx = HookContext {
            hook,
            stage: self.stage,
            state: self.state,
            batch_idx: data.batch_idx,
            dataloader_idx: data.dataloader_idx,
            batch: data.batch,
            batch_indices: data.batch_indices,
            output: data.output,
            prediction: data.prediction,
            checkpoint: None,
            exception: data.exception,
            model: self.module.model(),
            optimizers: Some(&mut self.optimizers),
            module: false,
            device: Some(self.strategy.root_device()),
            optimizer_idx: data.optimizer_idx,
            replaced_batch: None,
            // Not every rank calls on_exception: no collectives there.
            rank_zero_decides: (hook != Hook::Exception).then_some(&rank_zero_decides),
            all_ranks_decide: (hook != Hook::Exception).then_some(&all_ranks_decide),
            group_maker: (hook != Hook::Exception).then_some(&group_maker),
        };
        // Lightning's on_train_epoch_end: callbacks, the module, then the
        // callbacks that monitor metrics, so they see what it logged.
        let split = hook == Hook::TrainEpochEnd;
        let profiler = &mut self.profiler;
        for cb in self.callbacks.iter_mut().filter(|c| !split || !c.monitors()) {
            call_callback(profiler, cb, &mut ctx)?;
        }
        let module = &mut self.module;
        ctx.module = true;
        timed(profiler, || format!("[LightningModule].{}", hook.name()), || module.on_hook(&mut ctx))
            .map_err(|e| e.context(format!("LightningModule.{}", hook.name())))?;
        apply_hook_logs(self.state, strategy)?;
        if split {
            // The same collectives as the first callbacks had (a
            // ModelCheckpoint's decisions).
            let mut ctx = HookContext::new(hook, self.stage, self.state);
            ctx.batch_idx = data.batch_idx;
            ctx.rank_zero_decides = Some(&rank_zero_decides);
            ctx.all_ranks_decide = Some(&all_ranks_decide);
            ctx.group_maker = Some(&group_maker);
            for cb in self.callbacks.iter_mut().filter(|c| c.monitors()) {
                call_callback(&mut self.profiler, cb, &mut ctx)?;
            }
        }
        // After a failure the ranks may not meet at a barrier.
        self.process_requests(hook != Hook::Exception)?;
        // SIGUSR1 under SLURM: saved and requeued where ModelCheckpoint
        // saves (after a batch, an epoch, a validation).
        let save_point = matches!(hook, Hook::TrainBatchEnd | Hook::TrainEpochEnd | Hook::ValidationEnd);
        if save_point && !self.in_closure && !self.state.sanity_checking {
            self.requeue_if_signalled()?;
        }
        Ok(())
    }

    /// Calls a LightningModule-only hook ([`Hook::module_only`]) on the
    /// module alone, as Lightning's `_call_lightning_module_hook`; returns
    /// the batch the hook set, if any. Only called when the module
    /// overrides the hook.
    fn module_hook(&mut self, hook: Hook, data: HookData) -> Result<Option<Vec<Tensor>>> {
        self.module_hook_on_rank(hook, data, true)
    }

    /// The module's `prepare_data` ([`Hook::PrepareData`]), which runs on
    /// some ranks only: the others do not meet it at a barrier.
    pub fn module_prepare_data(&mut self) -> Result<()> {
        self.module_hook_on_rank(Hook::PrepareData, HookData { batch_idx: -1, ..Default::default() }, false).map(|_| ())
    }

    /// [`Run::module_hook`]; `every_rank`: whether every rank calls it (and
    /// so may wait at a barrier for rank 0's checkpoint writes).
    fn module_hook_on_rank(&mut self, hook: Hook, data: HookData, every_rank: bool) -> Result<Option<Vec<Tensor>>> {
        super::interrupt::check()?;
        let mut ctx = HookContext::new(hook, self.stage, self.state);
        ctx.batch_idx = data.batch_idx;
        ctx.dataloader_idx = data.dataloader_idx;
        ctx.batch = data.batch;
        ctx.optimizers = Some(&mut self.optimizers);
        ctx.model = self.module.model();
        ctx.module = true;
        ctx.device = Some(self.strategy.root_device());
        let strategy = &self.strategy;
        let group_maker = |ranks: &[usize]| strategy.new_group(ranks);
        if every_rank {
            ctx.group_maker = Some(&group_maker);
        }
        let module = &mut self.module;
        timed(&mut self.profiler, || format!("[LightningModule].{}", hook.name()), || module.on_hook(&mut ctx))
            .map_err(|e| e.context(format!("LightningModule.{}", hook.name())))?;
        let replaced = ctx.replaced_batch.take();
        self.process_requests(every_rank)?;
        Ok(replaced)
    }

    /// Lightning's batch transfer (`_on_before_batch_transfer`, then
    /// `strategy.batch_to_device` with `transfer_batch_to_device` and
    /// `on_after_batch_transfer`): the module's hooks where it overrides
    /// them, each may replace the batch; fulmen's own move to the device
    /// unless the module overrides transfer_batch_to_device.
    pub fn transfer_batch(&mut self, batch: Vec<Tensor>, batch_idx: i64, dataloader_idx: usize) -> Result<Vec<Tensor>> {
        let mut batch = self.batch_hook(Hook::BeforeBatchTransfer, batch, batch_idx, dataloader_idx)?;
        if self.module.overrides(Hook::TransferBatchToDevice) {
            let data = HookData { batch_idx, dataloader_idx, batch: Some(&batch), ..Default::default() };
            batch = self.module_hook(Hook::TransferBatchToDevice, data)?.ok_or_else(|| {
                Error::state(
                    "LightningModule.transfer_batch_to_device: the module overrides it but set no batch \
                     (fulmen_hook_context_set_batch)",
                )
            })?;
        } else {
            batch = self.strategy.batch_to_device(batch)?;
        }
        self.batch_hook(Hook::AfterBatchTransfer, batch, batch_idx, dataloader_idx)
    }

    /// Whether training batches go to the device ahead of their step
    /// ([`super::prefetch`]): off the CPU and XLA, and only when the module
    /// leaves every batch-transfer hook to the trainer, so that no hook
    /// runs out of Lightning's order.
    pub fn prefetches_batches(&self) -> bool {
        super::prefetch::device_prefetches(self.strategy.device())
            && ![Hook::BeforeBatchTransfer, Hook::TransferBatchToDevice, Hook::AfterBatchTransfer]
                .iter()
                .any(|h| self.module.overrides(*h))
    }

    /// One of the batch hooks that may replace the batch, when the module
    /// overrides it; the batch it set, or `batch` unchanged.
    fn batch_hook(
        &mut self,
        hook: Hook,
        batch: Vec<Tensor>,
        batch_idx: i64,
        dataloader_idx: usize,
    ) -> Result<Vec<Tensor>> {
        if !self.module.overrides(hook) {
            return Ok(batch);
        }
        let data = HookData { batch_idx, dataloader_idx, batch: Some(&batch), ..Default::default() };
        let replaced = self.module_hook(hook, data)?;
        Ok(replaced.unwrap_or(batch))
    }

    /// The evaluation loop's `on_{validation,test,predict}_model_eval`:
    /// the module's hook where it overrides it, else the model in eval
    /// mode (Lightning's default).
    pub fn model_eval(&mut self, stage: super::context::Stage) -> Result<()> {
        use super::context::Stage;
        let hook = match stage {
            Stage::Test => Hook::TestModelEval,
            Stage::Predict => Hook::PredictModelEval,
            _ => Hook::ValidationModelEval,
        };
        if self.module.overrides(hook) {
            self.module_hook(hook, HookData { batch_idx: -1, ..Default::default() }).map(|_| ())
        } else {
            super::set_mode(&*self.module, false)
        }
    }

    /// The end of a validation or test run (`on_{validation,test}_model_train`):
    /// the module's hook where it overrides it, else, inside fit, the model
    /// back in train mode (a validate or test run leaves it in eval mode).
    pub fn model_train(&mut self, stage: super::context::Stage) -> Result<()> {
        use super::context::Stage;
        let hook = match stage {
            Stage::Test => Hook::TestModelTrain,
            Stage::Predict => return Ok(()),
            _ => Hook::ValidationModelTrain,
        };
        if self.module.overrides(hook) {
            self.module_hook(hook, HookData { batch_idx: -1, ..Default::default() }).map(|_| ())
        } else if self.stage == "fit" {
            super::set_mode(&*self.module, true)
        } else {
            Ok(())
        }
    }

    /// Lightning's `on_validation_model_zero_grad` before a validation
    /// inside fit that follows an optimizer step: the module's hook where
    /// it overrides it, else the model's gradients set to none.
    pub fn validation_zero_grad(&mut self) -> Result<()> {
        if self.module.overrides(Hook::ValidationModelZeroGrad) {
            return self
                .module_hook(Hook::ValidationModelZeroGrad, HookData { batch_idx: -1, ..Default::default() })
                .map(|_| ());
        }
        let Some(model) = self.module.model() else { return Ok(()) };
        let params = model.lock().unwrap_or_else(|p| p.into_inner()).parameters();
        if params.is_empty() {
            return Ok(());
        }
        if self.grads_stay {
            // Graphed steps write into the gradients they captured.
            crate::tensor::grad::zero_in_place(&params)?;
            for cfg in self.optimizers.iter() {
                self.strategy.on_zero_grad(cfg.optimizer.as_ref(), false)?;
            }
            return Ok(());
        }
        let mut helper = tch::COptimizer::sgd(0.0, 0.0, 0.0, 0.0, false)?;
        for p in &params {
            helper.add_parameters(p, 0)?;
        }
        helper.zero_grad()?;
        for cfg in self.optimizers.iter() {
            self.strategy.on_zero_grad(cfg.optimizer.as_ref(), true)?;
        }
        Ok(())
    }

    /// Lightning's `configure_model`, after the setup hook: when the module
    /// implements it, it runs with the run's device, and the strategy then
    /// places (and for fit wraps) the model again, so what it built is on
    /// the device.
    pub fn configure_model(&mut self, fitting: bool) -> Result<()> {
        if !self.module.has_configure_model() {
            return Ok(());
        }
        let device = self.strategy.root_device();
        self.module.configure_model(device).ctx("configure_model")?;
        self.strategy.setup_model(&*self.module, fitting)
    }

    /// Records the metrics batch hooks logged since the last call into the
    /// epoch's `store`, as a step's logs: named for `dataloader_idx` when
    /// the evaluation has several loaders, weighted by the hook's batch
    /// size or else `batch_size`. With `sync_steps` (training) the step
    /// values logged with sync_dist are reduced over the ranks here (every
    /// rank logs the same names); epoch values are reduced at the epoch's
    /// end as any. The callback and progress metrics follow.
    pub fn drain_batch_hook_logs(
        &mut self,
        store: &mut super::metrics::MetricStore,
        dataloader_idx: Option<usize>,
        batch_size: i64,
        sync_steps: bool,
    ) -> Result<()> {
        let logs = std::mem::take(&mut self.state.batch_hook_logs);
        if logs.is_empty() {
            return Ok(());
        }
        let synced = |i: usize| if sync_steps && logs[i].flags.on_step { logs[i].flags.sync_op() } else { None };
        let mut step_values: Vec<f64> = logs.iter().map(|l| l.value).collect();
        super::metrics::reduce_by_op(&mut step_values, synced, &|v, op, g| self.strategy.reduce_in(v, op, g))?;
        for (i, (l, step)) in logs.iter().zip(step_values).enumerate() {
            let site = super::metrics::LogSite { fx: l.hook.name(), dataloader_idx };
            let bs = l.batch_size.unwrap_or(batch_size).max(1) as f64;
            let key = store.log_from(site, &l.name, l.value, l.flags, bs).ctx(l.hook.name())?;
            if synced(i).is_some() {
                store.set_synced_step(&key, l.flags, step);
            }
        }
        self.state.callback_metrics.extend_from(&store.callback_metrics);
        self.state.progress_metrics.extend_from(&store.progress_metrics);
        Ok(())
    }

    /// The start of a timed action, when profiling.
    pub fn profile_start(&self) -> Option<std::time::Instant> {
        self.profiler.as_ref().map(|_| std::time::Instant::now())
    }

    /// Records the action started at `started` (a no-op unless profiling),
    /// plus `extra` time measured apart.
    pub fn profile_stop(&mut self, action: &str, started: Option<std::time::Instant>, extra: std::time::Duration) {
        if let (Some(p), Some(t)) = (self.profiler.as_mut(), started) {
            p.record(action, t.elapsed() + extra);
        }
    }

    /// The profilers' report of this run (printed on stderr by rank 0),
    /// when profiling, and whether libtorch's trace could be written.
    pub fn finish_profile(&mut self) -> (Option<String>, Result<()>) {
        let mut report = self.profiler.take().map(|p| p.describe(self.stage));
        let mut traced = Ok(());
        if let Some(torch) = self.torch_profiler.take() {
            let dir = self.state.log_dir.clone().unwrap_or_else(|| self.state.root_dir.clone());
            let path = super::torch_profiler::trace_path(
                &dir,
                self.stage,
                self.strategy.global_rank(),
                self.strategy.world_size(),
            );
            match torch.finish(self.stage, &path) {
                Ok(table) => report = Some(report.unwrap_or_default() + &table),
                Err(e) => traced = Err(e.context("profiler=\"pytorch\"")),
            }
        }
        if let (Some(r), true) = (&report, self.strategy.is_global_zero()) {
            eprint!("{r}");
        }
        (report, traced)
    }

    /// Prints `message` on stderr as a warning, on rank 0 and once per run
    /// for `key` (Lightning's `rank_zero_warn` through a warning cache).
    pub fn warn_once(&mut self, key: &'static str, message: &str) {
        if self.warned.contains(&key) {
            return;
        }
        self.warned.push(key);
        if self.strategy.is_global_zero() {
            eprintln!("fulmen: warning: {message}");
        }
    }

    /// Calls a hook with no batch data.
    pub fn simple(&mut self, hook: Hook) -> Result<()> {
        self.hook(hook, HookData { batch_idx: -1, ..Default::default() })
    }

    /// Tells every hook the run failed; their own errors are dropped so the
    /// original one is reported.
    pub fn exception(&mut self, err: &Error) {
        let _ = self.hook(Hook::Exception, HookData { batch_idx: -1, exception: Some(err), ..Default::default() });
        for l in self.loggers.iter_mut() {
            let _ = l.finalize("failed");
        }
    }

    /// Writes requested checkpoints, removes replaced ones, logs requested
    /// metrics; with `barrier`, the other ranks wait for rank 0's writes.
    fn process_requests(&mut self, barrier: bool) -> Result<()> {
        // Under DDP every rank makes the same requests; rank 0 writes and
        // removes files, the others wait for it (Lightning's
        // strategy.save_checkpoint and barrier).
        if self.in_closure {
            // Saved once the optimizers are back (closure_step).
            return Ok(());
        }
        let saves = std::mem::take(&mut self.state.save_requests);
        let removes = std::mem::take(&mut self.state.remove_requests);
        let global_zero = self.strategy.is_global_zero();
        if !saves.is_empty() {
            // On every rank, before rank 0 alone reads the model: its
            // graph cut and the ranks' device checks agreed (a hook that
            // runs on some ranks only, `prepare_data`, reads its own).
            self.strategy.placement().cut_graph()?;
            if barrier {
                self.verify_deferred()?;
            } else {
                crate::tensor::deferred::verify(self.state.global_step)?;
            }
        }
        if self.strategy.saves_checkpoints() {
            for (path, weights_only) in &saves {
                self.save_checkpoint(path, *weights_only)?;
            }
        }
        let links = std::mem::take(&mut self.state.link_requests);
        if self.strategy.saves_checkpoints() && global_zero {
            for (target, link) in &links {
                crate::fs_safe::replace_with_link(target, link)?;
            }
        }
        if barrier && !(saves.is_empty() && links.is_empty()) {
            self.strategy.barrier().ctx("waiting for rank 0 to write the checkpoint")?;
        }
        let resumed = self.state.ckpt_path.clone();
        for path in removes.into_iter().filter(|p| global_zero && resumed.as_deref() != Some(p.as_path())) {
            self.checkpoints.remove(&path)?;
        }
        let notices = std::mem::take(&mut self.state.checkpoint_notices);
        if !notices.is_empty() && self.loggers.iter().any(|l| l.reads_checkpoints()) {
            // A logger about to read the file gets it whole, not while a
            // background save still writes it.
            self.checkpoints.wait()?;
        }
        for path in notices {
            for l in self.loggers.iter_mut() {
                l.after_save_checkpoint(&path).ctx(format!("{} logger's after_save_checkpoint", l.name()))?;
            }
        }
        // LearningRateMonitor's and ThroughputMonitor's values, which
        // Lightning's callbacks give the loggers without an epoch.
        for (step, values) in std::mem::take(&mut self.state.log_requests) {
            self.log_metrics_with(&values.into_iter().collect(), None, step)?;
        }
        for (tag, media, step) in std::mem::take(&mut self.state.media_requests) {
            // Images, histograms and texts go to the loggers that keep them
            // (TensorBoard), as Lightning's `logger.experiment.add_*`.
            for l in self.loggers.iter_mut().filter(|l| l.accepts_media()) {
                l.add_media(&tag, &media, step).ctx(format!("{} logger", l.name()))?;
            }
        }
        for (prefix, cpu_stats, step) in std::mem::take(&mut self.state.device_stats_requests) {
            let stats = self.strategy.device_stats(cpu_stats)?;
            let m: BTreeMap<String, f64> = stats.into_iter().map(|(k, v)| (format!("{prefix}/{k}"), v)).collect();
            if !m.is_empty() {
                self.log_metrics_with(&m, None, step)?;
            }
        }
        Ok(())
    }

    /// Sends metrics to every logger.
    pub fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: i64) -> Result<()> {
        self.log_metrics_with(metrics, Some(self.state.epoch), step)
    }

    /// Sends `metrics` to every logger at `step`, with `epoch` as one more
    /// value when given (Lightning's trainer adds it; its callbacks that
    /// call the loggers themselves, and the evaluation batches, do not).
    pub fn log_metrics_with(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        for l in self.loggers.iter_mut() {
            l.log_metrics(metrics, epoch, step).ctx(format!("{} logger", l.name()))?;
        }
        Ok(())
    }

    /// Reads the device checks deferred since the last reading and fails
    /// with the first that failed ([`crate::tensor::deferred::verify`]).
    /// The ranks of a job on devices agree (one collective, so every rank
    /// calls it at the same point): a check failed on any rank fails every
    /// rank, and none waits in its next collective for one that stopped.
    pub fn verify_deferred(&self) -> Result<()> {
        let step = self.state.global_step;
        // On the CPU nothing is deferred: no collective to agree on nothing.
        if self.strategy.world_size() < 2 || self.strategy.root_device() == crate::tensor::device::Device::Cpu {
            return crate::tensor::deferred::verify(step);
        }
        crate::tensor::deferred::verify_across_ranks(step, self.strategy.global_rank(), |v| {
            self.strategy.reduce(v, crate::trainer::metrics::ReduceFx::Max)
        })
    }

    /// Makes the loggers' files durable.
    pub fn save_logs(&mut self) -> Result<()> {
        for l in self.loggers.iter_mut() {
            l.save().ctx(format!("{} logger", l.name()))?;
        }
        Ok(())
    }

    /// Every group's rates as LearningRateMonitor names them: one entry per
    /// scheduler first (an optimizer with two is named twice; a scheduler's
    /// `name` replaces `lr-<Optimizer>`), then the
    /// optimizers without one (so a repeated class is numbered `lr-SGD`,
    /// `lr-SGD-1` in that order, as Lightning does).
    pub fn refresh_learning_rates(&mut self) {
        let mut rates = Vec::new();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let scheduled = self
            .optimizers
            .iter()
            .flat_map(|c| c.schedulers.iter().map(move |s| (c, Some(s.interval), s.name.as_deref())));
        let unscheduled = self.optimizers.iter().filter(|c| c.schedulers.is_empty()).map(|c| (c, None, None));
        for (cfg, interval, given) in scheduled.chain(unscheduled) {
            let class = class_name(cfg.optimizer.name());
            // As Lightning's _check_duplicates_and_update_name: only unnamed
            // schedulers count their optimizer class, and the count so far
            // numbers the name either way.
            let count = seen.entry(class).or_insert(0);
            if given.is_none() {
                *count += 1;
            }
            let name = given.map_or_else(|| format!("lr-{class}"), str::to_string);
            let base = if *count > 1 { format!("{name}-{}", *count - 1) } else { name };
            let groups = cfg.optimizer.param_groups();
            for (j, g) in groups.iter().enumerate() {
                rates.push(GroupRates {
                    name: if groups.len() > 1 { format!("{base}/pg{}", j + 1) } else { base.clone() },
                    lr: g.lr,
                    momentum: g.momentum,
                    weight_decay: g.weight_decay,
                    interval,
                });
            }
        }
        self.state.learning_rates = rates;
    }

    /// Whether `stage`'s batches count as fit's validation progress (not
    /// the sanity check's, nor those of a validate, test or predict run).
    pub fn counts_validation(&self, stage: super::context::Stage) -> bool {
        stage == super::context::Stage::Validate && self.stage == "fit" && !self.state.sanity_checking
    }

    /// Counts `n` scheduler steps the loop took; whether there were any.
    pub fn count_scheduler_steps(&mut self, n: usize) -> bool {
        self.progress.scheduler.increment_by(n as i64);
        n > 0
    }

    /// Gathers the full training state into a checkpoint and writes it
    /// (under FSDP and model_parallel every rank gathers the parts, rank 0
    /// writes), or with sharded checkpoints writes each rank's parts.
    pub fn save_checkpoint(&mut self, path: &std::path::Path, weights_only: bool) -> Result<()> {
        // A checkpoint never holds what a failed device check let through
        // (this rank's checks: the ranks agreed before it, in
        // process_requests, where they all are).
        crate::tensor::deferred::verify(self.state.global_step)?;
        if let Some(sharding) = self.strategy.sharded_checkpoint().ctx("sharding the parameters for a checkpoint")? {
            return self.save_sharded(path, weights_only, &sharding);
        }
        self.strategy.unshard_params().ctx("gathering the parameters for a checkpoint")?;
        let saved = self.save_unsharded(path, weights_only);
        let back = self.strategy.reshard_params(&mut self.optimizers, false);
        saved.and(back)
    }

    /// Writes the sharded checkpoint directory `path` (FSDP's
    /// `state_dict_type="sharded"`, model_parallel's
    /// `save_distributed_checkpoint`): every rank its own parts, no tensor
    /// gathered; every rank takes part.
    fn save_sharded(
        &mut self,
        path: &std::path::Path,
        weights_only: bool,
        sharding: &crate::checkpoint::dcp::Sharding,
    ) -> Result<()> {
        if self.checkpoints.has_plugin() {
            return Err(Error::unsupported(SHARDED_WITH_PLUGIN));
        }
        self.checkpoints.wait()?;
        let ck = self.build_checkpoint(weights_only, true)?;
        let params: Vec<Vec<Tensor>> = self.optimizers.iter().map(|c| c.optimizer.param_tensors()).collect();
        crate::checkpoint::dcp::save(&ck, &self.checkpoint_prefix, &params, sharding, path)
            .ctx(format!("saving the sharded checkpoint {}", path.display()))
    }

    /// [`Run::save_checkpoint`] once the parameters hold their full values.
    fn save_unsharded(&mut self, path: &std::path::Path, weights_only: bool) -> Result<()> {
        let ck = self.build_checkpoint(weights_only, false)?;
        if !self.strategy.writes_checkpoints() {
            return Ok(());
        }
        self.checkpoints.save(&ck, path, self.checkpoint_format, &self.checkpoint_prefix).ctx("saving a checkpoint")
    }

    /// The training state gathered into a checkpoint (not written); with
    /// `own_shards` each optimizer's state as this rank holds it (a sharded
    /// save), else as the strategy puts it into a checkpoint.
    fn build_checkpoint(&mut self, weights_only: bool, own_shards: bool) -> Result<Checkpoint> {
        let strategy = &self.strategy;
        let device = || -> Result<super::save::DeviceState> {
            Ok(super::save::DeviceState {
                device: strategy.root_device(),
                rng: strategy.device_rng_state().ctx("the device's random state")?,
                precision: strategy.precision().state_dict()?,
            })
        };
        let own = |o: &dyn crate::optim::Optimizer| o.state_dict();
        let via_strategy = |o: &dyn crate::optim::Optimizer| strategy.optimizer_state_for_checkpoint(o);
        let parts = super::save::CheckpointParts {
            stage: self.stage,
            loop_info: super::save::loop_info(&*self.state),
            state: &mut *self.state,
            callbacks: self.callbacks.as_mut_slice(),
            module: &mut *self.module,
            optimizers: &mut self.optimizers,
            progress: &self.progress,
            optimizer_state: if own_shards { &own } else { &via_strategy },
        };
        super::save::build_checkpoint(parts, device, weights_only)
    }

    /// Restores the full training state from a checkpoint (model, optimizers,
    /// schedulers, callbacks, loop progress) and calls `on_load_checkpoint`.
    ///
    /// A failure leaves the model's weights as they were: the checkpoint is
    /// checked against the run first, and the weights are put back if a
    /// later part fails.
    pub fn restore(&mut self, ck: &Checkpoint, path: &std::path::Path) -> Result<()> {
        self.ready_params_for(ck).ctx("preparing the parameters to resume")?;
        let restored = self.restore_unsharded(ck, path);
        let back = self.strategy.reshard_params(&mut self.optimizers, true);
        restored.and(back)
    }

    /// Readies the parameters for `ck`'s weights: under FSDP gathered whole,
    /// or, when `ck` holds this rank's rows ([`Checkpoint::local_rows`]),
    /// left holding their shards, which the rows load into (nothing
    /// gathered). The strategy's `reshard_params` follows the load.
    pub fn ready_params_for(&mut self, ck: &Checkpoint) -> Result<()> {
        if ck.local_rows {
            self.strategy.reshard_params(&mut [], false)
        } else {
            self.strategy.unshard_params()
        }
    }

    /// Reads the checkpoint `path` (with `weights_only`, its weights
    /// alone). A sharded checkpoint directory is read rank-locally when the
    /// model is sharded: each rank reads only the rows it holds of the
    /// sharded parameters and their optimizer states, so a model that fits
    /// the devices only sharded resumes too.
    pub fn read_checkpoint(&mut self, path: &std::path::Path, weights_only: bool) -> Result<Checkpoint> {
        let local = if crate::checkpoint::dcp::is_sharded_dir(path) { self.local_rows()? } else { None };
        if weights_only {
            self.checkpoints.load_weights_local(path, local.as_ref())
        } else {
            self.checkpoints.load_local(path, local.as_ref())
        }
    }

    /// The rows this rank holds of the model's sharded parameters, named
    /// as the model names them (`None`: no parameter is sharded).
    fn local_rows(&mut self) -> Result<Option<crate::checkpoint::dcp::LocalRows>> {
        let Some(sharding) = self.strategy.local_shards().ctx("the sharded parameters")? else { return Ok(None) };
        let Some(model) = self.module.model() else { return Ok(None) };
        let state_dict = model.lock().unwrap_or_else(|p| p.into_inner()).state_dict();
        let names = crate::checkpoint::dcp::names_by_tensor(&state_dict, "");
        let params = crate::checkpoint::dcp::sharded_names(&sharding, &names);
        let all = state_dict.into_iter().map(|(n, _)| n);
        Ok(Some(crate::checkpoint::dcp::LocalRows::new(params, all, sharding.shard_rank, &self.checkpoint_prefix)))
    }

    /// [`Run::restore`] once the parameters hold their full values.
    fn restore_unsharded(&mut self, ck: &Checkpoint, path: &std::path::Path) -> Result<()> {
        let model =
            self.module.model().ok_or_else(|| Error::state("cannot resume: the LightningModule has no model"))?;
        // Host copies (accelerator memory is not doubled), and the callbacks'
        // states, which outlive the run.
        let backup: Vec<(String, Tensor)> = {
            let m = model.lock().unwrap_or_else(|p| p.into_inner());
            tch::no_grad(|| {
                m.state_dict()
                    .into_iter()
                    .map(|(k, t)| {
                        let host = t.to_device(tch::Device::Cpu);
                        let same = crate::tensor::device::data_identity(&host).ok()
                            == crate::tensor::device::data_identity(&t).ok();
                        (k, if same { host.copy() } else { host })
                    })
                    .collect()
            })
        };
        let callback_states: Vec<BTreeMap<String, String>> = self.callbacks.iter().map(|c| c.state_dict()).collect();
        let result = self.restore_all(ck, path, &model);
        if result.is_err() {
            // As they were; the run's own error is the one reported.
            let _ = model.lock().unwrap_or_else(|p| p.into_inner()).load_state_dict(&backup, true);
            for (cb, state) in self.callbacks.iter_mut().zip(&callback_states) {
                let _ = cb.load_state_dict(state);
            }
        }
        result
    }

    fn restore_all(&mut self, ck: &Checkpoint, path: &std::path::Path, model: &super::SharedModel) -> Result<()> {
        let at = || format!("resuming from {}", path.display());
        if ck.weights_only {
            return Err(Error::format(format!(
                "{}: a weights-only checkpoint cannot resume training (no optimizer state)",
                path.display()
            )));
        }
        if ck.optimizer_states.len() != self.optimizers.len() {
            return Err(Error::format(format!(
                "{}: the checkpoint holds {} optimizer states, configure_optimizers made {}",
                path.display(),
                ck.optimizer_states.len(),
                self.optimizers.len()
            )));
        }
        // The prefix of the checkpoint's names: the given one, or the one
        // `weights_for` found (a LightningModule's attribute, "model.").
        let prefix = {
            let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
            let names = m.state_dict().into_iter().map(|(k, _)| k).collect();
            let weights = ck.weights_for(&names, &self.checkpoint_prefix);
            let found = ck.state_dict.iter().zip(&weights).find_map(|((k, _), (renamed, _))| {
                k.strip_suffix(renamed.as_str()).filter(|p| !p.is_empty()).map(str::to_string)
            });
            m.load_state_dict(&weights, true).ctx(at())?;
            found.unwrap_or_else(|| self.checkpoint_prefix.clone())
        };
        // The callbacks' states first: a finetuning callback puts back the
        // param groups it added, which the optimizer states then fill, and
        // StochasticWeightAveraging the SWALR whose state the checkpoint
        // holds among the schedulers.
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for cb in self.callbacks.iter_mut() {
            let key = unique_name(&mut names, cb.name());
            if let Some(s) = ck.callbacks.get(&key) {
                cb.load_state_dict(s).ctx(format!("{}: callback {key}", at()))?;
            }
            cb.restore_param_groups(model, &mut self.optimizers, &prefix).ctx(format!("{}: callback {key}", at()))?;
        }
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for cb in self.callbacks.iter_mut() {
            let key = unique_name(&mut names, cb.name());
            cb.restore_schedulers(&mut self.optimizers).ctx(format!("{}: callback {key}", at()))?;
        }
        // The run's schedulers, optimizer by optimizer: a fulmen checkpoint
        // names each one's optimizer; a Lightning one lists them in order.
        let owners: Vec<usize> =
            self.optimizers.iter().enumerate().flat_map(|(i, c)| std::iter::repeat_n(i, c.schedulers.len())).collect();
        if ck.scheduler_states.len() != owners.len() {
            return Err(Error::format(format!(
                "{}: the checkpoint holds {} scheduler states, configure_optimizers made {}",
                path.display(),
                ck.scheduler_states.len(),
                owners.len()
            )));
        }
        // A Lightning file fulmen wrote says too (under its `fulmen` entry).
        if (!ck.schedulers_listed || !ck.scheduler_owners.is_empty()) && ck.scheduler_owners != owners {
            return Err(Error::format(format!(
                "{}: the checkpoint's schedulers belong to optimizers {:?}, configure_optimizers gave them to {owners:?}",
                path.display(),
                ck.scheduler_owners
            )));
        }
        let mut scheduler_states = ck.scheduler_states.clone();
        if ck.schedulers_listed {
            for (j, state) in scheduler_states.iter_mut().enumerate() {
                // OneCycleLR's ranges are in its optimizer's param groups.
                let groups = ck.scheduler_group_entries.get(owners[j]).map(Vec::as_slice).unwrap_or_default();
                crate::checkpoint::lightning::complete_from_groups(state, groups, &format!("{}: scheduler {j}", at()))?;
            }
        }
        let mut states = scheduler_states.into_iter();
        for (i, cfg) in self.optimizers.iter_mut().enumerate() {
            cfg.optimizer.load_state_dict(&ck.optimizer_states[i]).ctx(format!("{}: optimizer {i}", at()))?;
            for s in cfg.schedulers.iter_mut() {
                let state = states.next().unwrap_or_default();
                s.scheduler.load_state_dict(&state).ctx(format!("{}: a scheduler of optimizer {i}", at()))?;
            }
        }
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for cb in self.callbacks.iter_mut() {
            let key = unique_name(&mut names, cb.name());
            cb.on_load_tensors(ck, model, &self.checkpoint_prefix).ctx(format!("{}: callback {key}", at()))?;
        }
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for cb in self.callbacks.iter_mut() {
            let key = unique_name(&mut names, cb.name());
            let mut entries = ck.extra.get(&key).cloned().unwrap_or_default();
            let mut ctx = HookContext::new(Hook::LoadCheckpoint, self.stage, self.state);
            ctx.checkpoint = Some(&mut entries);
            cb.on_hook(&mut ctx).map_err(|e| e.context(format!("callback {key} in on_load_checkpoint")))?;
        }
        let mut entries = ck.extra.get(MODULE_KEY).cloned().unwrap_or_default();
        let mut ctx = HookContext::new(Hook::LoadCheckpoint, self.stage, self.state);
        ctx.checkpoint = Some(&mut entries);
        ctx.optimizers = Some(&mut self.optimizers);
        self.module.on_hook(&mut ctx).map_err(|e| e.context("LightningModule.on_load_checkpoint"))?;
        super::datamodule::restore(&mut *self.module, ck).ctx(at())?;
        self.strategy.precision_mut().load_state_dict(&ck.precision_state).ctx(format!("{}: precision state", at()))?;
        if let Some(r) = &ck.rng_state {
            crate::tensor::runtime::set_cpu_rng_state(r).ctx(at())?;
        }
        let device_state = match self.strategy.root_device() {
            crate::tensor::device::Device::Cuda(_) => &ck.cuda_rng_state,
            _ => &ck.device_rng_state,
        };
        if let Some(r) = device_state {
            check_rng_state(r).ctx(at())?;
            self.strategy.set_device_rng_state(r).ctx(at())?;
        }
        self.state.global_step = ck.global_step;
        self.state.batches_stepped = ck.batches_stepped;
        let saved = ck.progress.unwrap_or_else(|| crate::checkpoint::lightning::progress_from_counters(ck));
        // Whether the batch it was saved after stepped the optimizers
        // (Lightning's `_should_accumulate` is false).
        let num_batches = self.state.num_train_batches.map(|n| n as i64);
        let k = saved.batch.progress.current.ready;
        let stepped = self.state.manual_optimization
            || k % self.state.accumulate_grad_batches.max(1) == 0
            || num_batches.is_some_and(|n| k >= n);
        self.progress = saved.restarted(num_batches, stepped);
        self.state.epoch = ck.epoch;
        Ok(())
    }
}

/// Key of the LightningModule's own checkpoint entries.
pub(super) const MODULE_KEY: &str = "LightningModule";

/// `name`, or `name#2`, `name#3` for repeats, so states map back in order.
pub(super) fn unique_name(seen: &mut BTreeMap<String, usize>, name: String) -> String {
    let n = seen.entry(name.clone()).or_insert(0);
    *n += 1;
    if *n == 1 {
        name
    } else {
        format!("{name}#{n}")
    }
}

/// A device generator state read from a checkpoint, before any generator
/// sees it: a 1-D uint8 CPU tensor of at most FULMEN_MAX_RNG_STATE bytes.
fn check_rng_state(state: &tch::Tensor) -> Result<()> {
    let max = crate::accelerators::accelerator::MAX_RNG_STATE;
    let ok = state.kind() == tch::Kind::Uint8
        && state.dim() == 1
        && state.numel() <= max
        && crate::tensor::device::Device::of(state)? == crate::tensor::device::Device::Cpu;
    if !ok {
        return Err(Error::format(format!(
            "the device's random state must be a 1-D uint8 CPU tensor of at most {max} bytes, not {:?} {:?}",
            state.kind(),
            state.size()
        )));
    }
    Ok(())
}
