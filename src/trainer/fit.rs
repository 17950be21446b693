//! The fit loop, in Lightning's order: sanity check, epochs of training
//! batches (step, zero_grad, backward, clip, optimizer step, schedulers),
//! validation at `val_check_interval`, callbacks, logging and checkpoints.
use super::context::{Stage, StepContext};
use super::fit_data::FitData;
use super::hooks::{Callback, Hook};
use super::manual::ManualOptimization;
use super::metrics::MetricStore;
use super::module::{Interval, OptimizerConfig};
use super::options::ValCheckInterval;
use super::profiler::SimpleProfiler;
use super::run::{HookData, Run};
use super::source::BatchSource;
use super::{batch_size_of, set_mode, LightningModule, Trainer};
use crate::callbacks::{ModelCheckpoint, ModelCheckpointOptions, ProgressBar, Timer};
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::loggers::Logger;
use std::collections::BTreeMap;
use tch::Tensor;

/// Checks the value a training_step returned before it is used.
fn check_loss(loss: &Tensor, detect_nonfinite: bool, at: &dyn Fn() -> String) -> Result<f64> {
    if loss.numel() != 1 {
        return Err(Error::shape(format!("{}: the loss must have one element, got shape {:?}", at(), loss.size())));
    }
    if !crate::tensor::dtype::is_floating(loss.f_kind()?) {
        return Err(Error::dtype(format!("{}: the loss must be floating, got {:?}", at(), loss.kind())));
    }
    if !loss.requires_grad() {
        return Err(Error::state(format!(
            "{}: the loss does not require grad (was it computed from the model's parameters?)",
            at()
        )));
    }
    let value = loss.f_double_value(&vec![0; loss.dim()])?;
    if detect_nonfinite && !value.is_finite() {
        return Err(Error::new(ErrorCode::NonFinite, format!("{}: the loss is {value}; no update was made", at())));
    }
    Ok(value)
}

/// The value of what a manual training step returned (shown as the
/// running loss).
fn returned_value(loss: &Tensor, at: &dyn Fn() -> String) -> Result<f64> {
    if loss.numel() != 1 || !crate::tensor::dtype::is_floating(loss.f_kind()?) {
        return Err(Error::shape(format!(
            "{}: a returned loss must be a one-element floating tensor, got {:?} of shape {:?}",
            at(),
            loss.kind(),
            loss.size()
        )));
    }
    Ok(loss.f_double_value(&vec![0; loss.dim()])?)
}

/// One training batch under automatic optimization (Lightning's
/// `_AutomaticOptimization`): the closure ([`forward_backward`]) and, when
/// `stepped`, unscale, the hook, clipping and every optimizer's step; an
/// optimizer that re-evaluates the loss (LBFGS) runs the closure itself
/// ([`closure_step`]). Returns the loss and its value (the last
/// evaluation's); `global_step` is the caller's to count.
#[allow(clippy::too_many_arguments)]
fn automatic_step(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &[Tensor],
    i: usize,
    first_of_window: bool,
    stepped: bool,
    at: &dyn Fn() -> String,
) -> Result<(Tensor, f64)> {
    if stepped && run.optimizers.iter().any(|c| c.optimizer.needs_closure()) {
        return closure_step(run, opts, store, batch, i, first_of_window, at);
    }
    let zero_grad = &mut |run: &mut Run| {
        for cfg in run.optimizers.iter_mut() {
            cfg.optimizer.zero_grad();
        }
    };
    let (loss, value) = forward_backward(run, opts, store, batch, i, first_of_window, stepped, zero_grad, at)?;
    if stepped {
        // Lightning's precision.optimizer_step: unscale, the hook and
        // clipping on true gradients, then the steps and the scale.
        let started = run.profile_start();
        run.strategy.unscale_gradients(&mut run.optimizers)?;
        run.simple(Hook::BeforeOptimizerStep)?;
        if let Some(v) = opts.gradient_clip_val {
            run.strategy.clip_gradients(&mut run.optimizers, v, opts.gradient_clip_algorithm)?;
        }
        run.strategy.optimizer_step(&mut run.optimizers).map_err(|e| e.context(at()))?;
        run.profile_stop("[Strategy].optimizer_step", started, Default::default());
    }
    Ok((loss, value))
}

/// Lightning's closure of a training batch: the step (split over DP
/// replicas), `zero_grad` at the start of an accumulation window, and
/// backward of the loss divided by `accumulate_grad_batches`, with their
/// hooks. Returns the loss and its value.
#[allow(clippy::too_many_arguments)]
fn forward_backward(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &[Tensor],
    i: usize,
    first_of_window: bool,
    stepped: bool,
    zero_grad: &mut dyn FnMut(&mut Run),
    at: &dyn Fn() -> String,
) -> Result<(Tensor, f64)> {
    let acc = run.state.accumulate_grad_batches.max(1);
    let (epoch, step_now) = (run.state.epoch, run.state.global_step);
    run.strategy.pre_forward(stepped)?;
    let autocast = run.strategy.forward_context()?;
    let started = run.profile_start();
    let module = &mut *run.module;
    store.begin_split();
    let losses = run.strategy.split(batch, &mut |chunk| {
        let mut ctx = StepContext {
            stage: Stage::Train,
            epoch,
            global_step: step_now,
            batch_idx: i as i64,
            batch_size: batch_size_of(chunk),
            dataloader_idx: None,
            metrics: &mut *store,
            manual: None,
        };
        module.training_step(&mut ctx, chunk).map_err(|e| e.context(at()))?.ok_or_else(|| {
            Error::new(ErrorCode::Callback, format!("{}: training_step returned no loss (left *out NULL)", at()))
        })
    });
    store.end_split();
    drop(autocast);
    run.profile_stop("[Strategy].training_step", started, Default::default());
    let loss = run.strategy.gather_loss(losses?)?;
    store.sync_step(&|v, op| run.strategy.reduce(v, op))?;
    let value = check_loss(&loss, opts.detect_nonfinite_loss, at)?;
    if run.state.skip_backward {
        // DDP learns that this forward has no backward to sync.
        run.strategy.post_forward(&loss)?;
        return Ok((loss, value));
    }
    if first_of_window {
        run.simple(Hook::BeforeZeroGrad)?;
        zero_grad(run);
    }
    let scaled = if acc > 1 { loss.f_div_scalar(acc as f64)? } else { loss.shallow_clone() };
    run.hook(Hook::BeforeBackward, HookData { batch_idx: i as i64, output: Some(&loss), ..Default::default() })?;
    run.strategy.post_forward(&loss)?;
    let started = run.profile_start();
    run.strategy.backward(&scaled).map_err(|e| e.context(format!("{}: backward", at())))?;
    run.profile_stop("[Strategy].backward", started, Default::default());
    run.hook(Hook::AfterBackward, HookData { batch_idx: i as i64, output: Some(&loss), ..Default::default() })?;
    Ok((loss, value))
}

/// The stepping batch of an optimizer that re-evaluates the loss (LBFGS,
/// the run's only optimizer): it calls Lightning's wrapped closure
/// ([`forward_backward`], then the `on_before_optimizer_step` hook and
/// clipping) as often as it needs. Returns the last evaluation, whose
/// loss Lightning reports for the batch.
#[allow(clippy::too_many_arguments)]
fn closure_step(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &[Tensor],
    i: usize,
    first_of_window: bool,
    at: &dyn Fn() -> String,
) -> Result<(Tensor, f64)> {
    // The optimizer steps outside the run, whose steps and hooks the
    // closure runs; gradients are reset through the same parameters.
    let mut configs = std::mem::take(&mut run.optimizers);
    let params: Vec<Tensor> = configs
        .iter()
        .flat_map(|c| c.optimizer.param_groups().iter().flat_map(|g| g.params.iter().map(Tensor::shallow_clone)))
        .collect();
    let groups = [crate::optim::ParamGroup::new(&params, 0.0, 0.0, 0.0)];
    let mut reset = crate::optim::GradReset::default();
    let mut last = None;
    let mut zero_grads = 0i64;
    let started = run.profile_start();
    run.in_closure = true;
    let stepped = match configs.first_mut() {
        Some(cfg) => cfg.optimizer.step_with_closure(&mut || {
            let zero_grad = &mut |_: &mut Run| {
                reset.run(&groups);
                zero_grads += 1;
            };
            let (loss, value) = forward_backward(run, opts, store, batch, i, first_of_window, true, zero_grad, at)?;
            run.simple(Hook::BeforeOptimizerStep)?;
            if let Some(v) = opts.gradient_clip_val {
                run.strategy.clip_params(&params, v, opts.gradient_clip_algorithm)?;
            }
            // Every rank decides from the same loss (the gradients are
            // averaged already), so the ranks evaluate alike and their
            // collectives pair up.
            let mut decided = [value];
            run.strategy.reduce(&mut decided, super::metrics::ReduceFx::Mean)?;
            let decided = decided[0];
            last = Some((loss, value));
            Ok(decided)
        }),
        None => Err(Error::state("no optimizer to step")),
    };
    run.optimizers = configs;
    // A checkpoint a hook asked for inside the closure is written by the
    // next hook's requests (on_train_batch_end), once the step is counted.
    run.in_closure = false;
    // Lightning counts each evaluation's zero_grad; one per step is implied.
    let extra = (zero_grads - 1).max(0);
    run.extra_zero_grads.0 += extra;
    run.extra_zero_grads.1 += extra;
    stepped.map_err(|e| e.context(at()))?;
    run.profile_stop("[Strategy].optimizer_step", started, Default::default());
    last.ok_or_else(|| Error::state(format!("{}: the optimizer stepped without evaluating the loss", at())))
}

/// One training batch under manual optimization: the step runs once (no
/// DP split, no accumulation) with the run's optimizers in its context.
/// Returns what it returned; `global_step` counts its optimizer steps.
fn manual_training_step(
    run: &mut Run,
    store: &mut MetricStore,
    batch: &[Tensor],
    batch_idx: i64,
    toggled: &mut Vec<(Tensor, bool)>,
    at: &dyn Fn() -> String,
) -> Result<Option<Tensor>> {
    run.strategy.pre_forward(true)?;
    let autocast = run.strategy.forward_context()?;
    let (epoch, global_step) = (run.state.epoch, run.state.global_step);
    let mut manual = ManualOptimization {
        callbacks: &mut run.callbacks,
        state: &mut *run.state,
        optimizers: &mut run.optimizers,
        strategy: &mut run.strategy,
        stage: run.stage,
        batch_idx,
        toggled,
        lr_changed: false,
        stepping: None,
    };
    store.begin_split();
    let mut ctx = StepContext {
        stage: Stage::Train,
        epoch,
        global_step,
        batch_idx,
        batch_size: batch_size_of(batch),
        dataloader_idx: None,
        metrics: &mut *store,
        manual: Some(&mut manual),
    };
    let out = run.module.training_step(&mut ctx, batch).map_err(|e| e.context(at()));
    let lr_changed = manual.lr_changed;
    store.end_split();
    drop(autocast);
    if lr_changed {
        run.refresh_learning_rates();
    }
    let out = out?;
    store.sync_step(&|v, op| run.strategy.reduce(v, op))?;
    Ok(out)
}

/// Refuses what Lightning refuses with manual optimization.
fn check_manual(opts: &super::TrainerOptions, run: &Run) -> Result<()> {
    if opts.accumulate_grad_batches > 1 {
        return Err(Error::invalid(
            "automatic gradient accumulation is not supported with manual optimization: accumulate in \
             training_step (step the optimizer every N batches) and set accumulate_grad_batches to 1",
        ));
    }
    if opts.gradient_clip_val.is_some() {
        return Err(Error::invalid(
            "automatic gradient clipping is not supported with manual optimization: clip in training_step \
             and leave gradient_clip_val unset",
        ));
    }
    if run.strategy.is_data_parallel() {
        return Err(Error::new(
            ErrorCode::Unsupported,
            "manual optimization does not run under strategy \"dp\": use ddp or one device",
        ));
    }
    Ok(())
}

/// Refuses what an optimizer that re-evaluates the loss (LBFGS) cannot do
/// under automatic optimization: step beside other optimizers (each
/// evaluation re-runs training_step), scale the loss (Lightning: "AMP and
/// the LBFGS optimizer are not compatible"), or split batches over `dp`
/// replicas.
fn check_closure_optimizers(run: &Run) -> Result<()> {
    let Some(cfg) = run.optimizers.iter().find(|c| c.optimizer.needs_closure()) else { return Ok(()) };
    let name = cfg.optimizer.name();
    if run.state.manual_optimization {
        // The step cannot run its closure: stepping it fails, naming why.
        return Ok(());
    }
    if run.optimizers.len() > 1 {
        return Err(Error::invalid(format!(
            "{name} re-evaluates the loss during its step, so under automatic optimization it must be the only \
             optimizer (configure_optimizers returned {})",
            run.optimizers.len()
        )));
    }
    if run.strategy.precision().has_scaler() {
        return Err(Error::invalid(format!(
            "precision \"16-mixed\" scales the loss, and {name} re-evaluates it during its step: they are not \
             compatible (use \"bf16-mixed\" or \"32-true\")"
        )));
    }
    if run.strategy.is_data_parallel() {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!("{name} does not run under strategy \"dp\": use ddp or one device"),
        ));
    }
    Ok(())
}

/// Which schedulers a call of `step_schedulers` steps: Lightning steps
/// ReduceLROnPlateau apart, after validation, because it reads a metric.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Every scheduler but ReduceLROnPlateau.
    Plain,
    /// ReduceLROnPlateau only.
    Plateau,
}

/// Steps the schedulers of `interval` and `kind` whose frequency divides
/// `count` (Lightning's `current_idx`: the batch index in the epoch + 1 for
/// step schedulers, the epoch + 1 for epoch ones); true when one stepped.
fn step_schedulers(
    configs: &mut [OptimizerConfig],
    interval: Interval,
    kind: Kind,
    count: i64,
    metrics: &BTreeMap<String, f64>,
) -> Result<usize> {
    let mut stepped = 0;
    for cfg in configs.iter_mut() {
        let chained = cfg.chained();
        let opt = &mut cfg.optimizer;
        for s in cfg.schedulers.iter_mut() {
            let plateau = s.scheduler.reduce_on_plateau();
            if s.interval != interval || (kind == Kind::Plateau) != plateau || count % s.frequency.max(1) != 0 {
                continue;
            }
            let metric = match (&s.monitor, plateau) {
                (Some(name), true) => Some(*metrics.get(name).ok_or_else(|| {
                    Error::state(format!(
                        "scheduler {} monitors `{name}`, which was not logged; logged: {:?}",
                        s.scheduler.name(),
                        metrics.keys().collect::<Vec<_>>()
                    ))
                })?),
                _ => None,
            };
            let what = format!("{} scheduler step", s.scheduler.name());
            if chained {
                s.scheduler.chained_step(opt.as_mut(), metric).ctx(what)?;
            } else {
                s.scheduler.step(opt.as_mut(), metric).ctx(what)?;
            }
            stepped += 1;
        }
    }
    Ok(stepped)
}

/// Whether `cb` is a ModelCheckpoint.
pub(super) fn is_checkpoint(cb: &dyn Callback) -> bool {
    cb.as_any().is_some_and(|a| a.is::<ModelCheckpoint>())
}

impl Trainer {
    /// The built-in callbacks a run adds: progress bar, a Timer for
    /// `max_time`, and a ModelCheckpoint when checkpointing is on and the
    /// user added none.
    pub(crate) fn default_callbacks(&self, fitting: bool, global_zero: bool) -> Result<Vec<Box<dyn Callback>>> {
        let mut d: Vec<Box<dyn Callback>> = Vec::new();
        if self.opts.enable_progress_bar && global_zero {
            d.push(Box::new(ProgressBar::new(1)));
        }
        if fitting {
            if let Some(t) = self.opts.max_time {
                d.push(Box::new(Timer::new(Some(t), "step")?));
            }
            let has_checkpoint = self.callbacks.iter().any(|c| is_checkpoint(c.as_ref()));
            if self.opts.enable_checkpointing && !has_checkpoint && self.opts.fast_dev_run == 0 {
                d.push(Box::new(ModelCheckpoint::new(ModelCheckpointOptions::default())?));
            }
        }
        Ok(d)
    }

    /// Creates this run's file loggers in a new `version_N` folder (on
    /// rank 0 only: other ranks log nothing, as Lightning's loggers).
    fn file_loggers(&mut self, global_zero: bool) -> Result<Vec<Box<dyn Logger>>> {
        let mut out: Vec<Box<dyn Logger>> = Vec::new();
        let choice = self.opts.logger;
        if self.opts.fast_dev_run > 0 || !(choice.csv || choice.tensorboard) || !global_zero {
            self.state.log_dir = None;
            return Ok(out);
        }
        let dir = crate::loggers::next_version_dir(&self.opts.default_root_dir)?;
        if choice.csv {
            out.push(Box::new(crate::loggers::CsvLogger::create(&dir)?));
        }
        if choice.tensorboard {
            out.push(Box::new(crate::loggers::TensorBoardLogger::create(&dir)?));
        }
        self.state.log_dir = Some(dir);
        Ok(out)
    }

    /// Resets the state for a new run and fills in what hooks read.
    pub(crate) fn begin_state(&mut self) {
        let o = &self.opts;
        self.state = super::hooks::TrainerState {
            root_dir: o.default_root_dir.clone(),
            check_val_every_n_epoch: o.check_val_every_n_epoch,
            val_once_per_epoch: o.val_check_interval == ValCheckInterval::Fraction(1.0),
            fast_dev_run: o.fast_dev_run > 0,
            log_every_n_steps: o.log_every_n_steps,
            accumulate_grad_batches: o.accumulate_grad_batches,
            max_epochs: o.epoch_limit(),
            world_size: 1,
            ..Default::default()
        };
    }

    /// Trains `module` on `train`, validating on `val` (Lightning's
    /// `trainer.fit`); `ckpt_path` resumes from a checkpoint: a path,
    /// "last" or "best".
    pub fn fit(
        &mut self,
        module: &mut dyn LightningModule,
        train: &dyn BatchSource,
        val: Option<&dyn BatchSource>,
        ckpt_path: Option<&str>,
    ) -> Result<()> {
        let vals: Vec<&dyn BatchSource> = val.into_iter().collect();
        self.fit_loaders(module, train, &vals, ckpt_path)
    }

    /// [`Trainer::fit`] validating on each of `vals` in turn (none: no
    /// validation); with several, the steps get their `dataloader_idx` and
    /// logged names end in `/dataloader_idx_N`, as in Lightning.
    pub fn fit_loaders(
        &mut self,
        module: &mut dyn LightningModule,
        train: &dyn BatchSource,
        vals: &[&dyn BatchSource],
        ckpt_path: Option<&str>,
    ) -> Result<()> {
        self.fit_data(module, Some(train), Some(vals), ckpt_path)
    }

    /// [`Trainer::fit_loaders`] where `None` takes the module's
    /// `train_dataloader` / `val_dataloader` instead (Lightning's
    /// `trainer.fit(model)`), called when the data is first needed and
    /// again every `reload_dataloaders_every_n_epochs` epochs.
    pub fn fit_data(
        &mut self,
        module: &mut dyn LightningModule,
        train: Option<&dyn BatchSource>,
        vals: Option<&[&dyn BatchSource]>,
        ckpt_path: Option<&str>,
    ) -> Result<()> {
        if train.is_none() && !module.has_train_dataloader() {
            return Err(Error::state(
                "fit has no training data: pass a train loader or give the module a train_dataloader",
            ));
        }
        let resume = match ckpt_path {
            Some(p) => Some(self.resolve_ckpt_path(p)?),
            None => None,
        };
        let (_settings, strategy) = self.start_run(module, true)?;
        let global_zero = strategy.is_global_zero();
        let mut data = FitData::new(&*module, &strategy, &self.opts, train, vals);
        self.begin_state();
        self.state.global_rank = strategy.global_rank();
        self.state.ckpt_path = resume.clone();
        self.state.world_size = strategy.world_size();
        self.state.device_sync = strategy.device_sync();
        self.defaults = self.default_callbacks(true, global_zero)?;
        let mut file_loggers = self.file_loggers(global_zero)?;
        self.state.num_val_batches = count_val_batches(&self.opts, &data.vals());
        self.state.num_train_batches = data.train().ok().and_then(|t| count_train_batches(&self.opts, t));
        let opts = self.opts.clone();
        let mut ordered: Vec<&mut Box<dyn Callback>> = Vec::new();
        let mut checkpoints: Vec<&mut Box<dyn Callback>> = Vec::new();
        for cb in self.defaults.iter_mut().chain(self.callbacks.iter_mut()) {
            if is_checkpoint(cb.as_ref()) {
                checkpoints.push(cb);
            } else {
                ordered.push(cb);
            }
        }
        ordered.extend(checkpoints);
        self.state.has_loggers = opts.logger.csv || opts.logger.tensorboard || !self.extra_loggers.is_empty();
        let mut loggers: Vec<&mut Box<dyn Logger>> = file_loggers.iter_mut().collect();
        if opts.fast_dev_run == 0 && global_zero {
            loggers.extend(self.extra_loggers.iter_mut());
        }
        let mut run = Run {
            stage: "fit",
            state: &mut self.state,
            callbacks: ordered,
            module,
            optimizers: Vec::new(),
            loggers,
            batches_in_epoch: 0,
            epoch_finished: false,
            checkpoint_format: opts.checkpoint_format,
            checkpoint_prefix: opts.checkpoint_prefix.clone(),
            scheduler_steps: (0, 0),
            extra_zero_grads: (0, 0),
            in_closure: false,
            val_batches: (0, 0),
            torch_profiler: super::torch_profiler::TorchProfiler::when(opts.profiler, strategy.root_device())?,
            strategy,
            profiler: SimpleProfiler::when(opts.profiler),
        };
        let result = fit_run(&mut run, &opts, &mut data, resume.as_deref()).map_err(|e| run.strategy.fail(e));
        let (report, traced) = run.finish_profile();
        self.profiler_report = report;
        let result = result.and(traced);
        match &result {
            Ok(()) => {
                // Every logger is finalized; the first failure is reported.
                let mut first = Ok(());
                for l in run.loggers.iter_mut() {
                    let r = l.finalize("success").ctx(format!("{} logger", l.name()));
                    first = first.and(r);
                }
                first?;
            }
            Err(e) => run.exception(e),
        }
        // Lightning tears the accelerator down on failure too; the run's
        // error stays the one reported, a failing teardown's attached.
        result.map_err(|e| run.strategy.teardown_after(&*run.module, e))
    }
}

/// Whether validation runs in `epoch` (`check_val_every_n_epoch`).
fn validates_in(opts: &super::TrainerOptions, epoch: i64) -> bool {
    opts.check_val_every_n_epoch.is_none_or(|n| (epoch + 1) % n == 0)
}

/// Training batches per epoch of `train` after `limit_train_batches`.
fn count_train_batches(opts: &super::TrainerOptions, train: &dyn BatchSource) -> Option<usize> {
    opts.effective_limit(opts.limit_train_batches).apply(train.num_batches())
}

/// Validation batches of a pass over `vals` after `limit_val_batches`.
fn count_val_batches(opts: &super::TrainerOptions, vals: &[&dyn BatchSource]) -> usize {
    let limit = opts.effective_limit(opts.limit_val_batches);
    vals.iter().map(|v| limit.apply(v.num_batches()).unwrap_or(1)).sum()
}

/// Lightning's check of an integer `val_check_interval` against the
/// training batches of an epoch (when validation runs per epoch).
fn check_val_interval(opts: &super::TrainerOptions, train_batches: Option<usize>, validating: bool) -> Result<()> {
    // fast_dev_run validates after its few batches whatever the interval.
    if let (ValCheckInterval::Batches(b), Some(n), Some(_), true, 0) =
        (opts.val_check_interval, train_batches, opts.check_val_every_n_epoch, validating, opts.fast_dev_run)
    {
        if b > n {
            return Err(Error::invalid(format!(
                "`val_check_interval` ({b}) must be less than or equal to the number of the training batches ({n}). \
                 If you want to disable validation set `limit_val_batches` to 0.0 instead. If you want to validate \
                 based on the total training batches, set `check_val_every_n_epoch=None`."
            )));
        }
    }
    Ok(())
}

/// Lightning's `trainer.estimated_stepping_batches` for `train` (this
/// rank's shard): `ceil(batches / accumulate_grad_batches) * max_epochs`,
/// at most max_steps; max_steps alone when the epochs or the batches are
/// unbounded; `None` when nothing bounds the run.
fn estimated_stepping_batches(opts: &super::TrainerOptions, train: &dyn BatchSource) -> Option<i64> {
    let max_steps = opts.step_limit();
    let bounded_steps = (max_steps >= 0).then_some(max_steps);
    let per_epoch = opts.effective_limit(opts.limit_train_batches).apply(train.num_batches());
    match (opts.epoch_limit(), per_epoch) {
        (Some(epochs), Some(batches)) => {
            let acc = opts.accumulate_grad_batches.max(1) as u64;
            let steps = (batches as u64).div_ceil(acc).saturating_mul(epochs.max(1) as u64).min(i64::MAX as u64) as i64;
            Some(bounded_steps.map_or(steps, |m| steps.min(m)))
        }
        _ => bounded_steps,
    }
}

/// The body of fit, on a prepared run.
fn fit_run(
    run: &mut Run,
    opts: &super::TrainerOptions,
    data: &mut FitData<'_>,
    resume: Option<&std::path::Path>,
) -> Result<()> {
    if let Ok(train) = data.train() {
        check_val_interval(opts, count_train_batches(opts, train), data.validating())?;
    }
    run.state.manual_optimization = !run.module.automatic_optimization();
    if run.state.manual_optimization {
        check_manual(opts, run)?;
    }
    run.simple(Hook::Setup)?;
    // The checkpoint is read first: the module's dataloader hooks are
    // called for its epoch (Lightning's `current_epoch` when a resumed fit
    // loads its data: the epoch the checkpoint ended or stopped in).
    let ck = match resume {
        Some(path) => Some(crate::checkpoint::Checkpoint::load(path)?),
        None => None,
    };
    let (start_epoch, mut skip_batches) = match &ck {
        Some(ck) if ck.epoch_finished => (ck.epoch + 1, 0),
        Some(ck) => (ck.epoch, ck.batches_in_epoch.max(0) as usize),
        None => (0, 0),
    };
    let load_epoch = ck.as_ref().map_or(0, |ck| ck.epoch);
    run.state.epoch = load_epoch;
    if data.prepare_train(&mut *run.module, &run.strategy, load_epoch)? {
        run.state.num_train_batches = count_train_batches(opts, data.train()?);
        check_val_interval(opts, run.state.num_train_batches, data.validating())?;
    }
    let setup =
        super::module::OptimizerSetup { estimated_stepping_batches: estimated_stepping_batches(opts, data.train()?) };
    run.optimizers = run.module.configure_optimizers(&setup).ctx("configure_optimizers")?;
    if run.optimizers.is_empty() {
        return Err(Error::state("configure_optimizers returned no optimizer"));
    }
    check_closure_optimizers(run)?;
    if run.checkpoint_format == crate::checkpoint::CheckpointFormat::Lightning {
        // Refused now rather than at the first checkpoint.
        for (i, cfg) in run.optimizers.iter().enumerate() {
            for s in &cfg.schedulers {
                crate::checkpoint::lightning::check_scheduler(&s.scheduler.state_dict()).map_err(|e| {
                    e.context(format!("checkpoint_format \"lightning\": {} of optimizer {i}", s.scheduler.name()))
                })?;
            }
        }
    }

    // The checkpoint (weights and optimizer state) goes once restored.
    if let (Some(ck), Some(path)) = (ck, resume) {
        run.restore(&ck, path)?;
    }
    let hparams = run.module.hparams();
    for l in run.loggers.iter_mut() {
        l.log_hyperparams(&hparams).ctx(format!("{} logger", l.name()))?;
    }
    if opts.enable_model_summary && run.strategy.is_global_zero() {
        if let Some(m) = run.module.model() {
            let s = crate::callbacks::ModelSummary::of(&m.lock().unwrap_or_else(|p| p.into_inner()), 1)?;
            eprint!("{}", s.render());
        }
    }
    run.simple(Hook::FitStart)?;
    let sanity = if opts.fast_dev_run > 0 { 0 } else { opts.num_sanity_val_steps };
    if data.validating() && sanity != 0 {
        // Lightning's isolate_rng: what the sanity check (with the
        // val_dataloader hook it calls) draws from the CPU's generator, or
        // CUDA's, leaves training's random numbers as they would be
        // without it.
        let rng = RngSnapshot::take(&run.strategy)?;
        let checked = sanity_check(run, opts, data, load_epoch, sanity);
        let restored = rng.restore(&run.strategy);
        checked?;
        restored?;
    }
    run.simple(Hook::TrainStart)?;
    run.refresh_learning_rates();
    let max_steps = opts.step_limit();
    let min_epochs = opts.min_epochs.unwrap_or(0);
    let min_steps = opts.min_steps.unwrap_or(0);
    let mut epoch = start_epoch;
    let mut total_batches: u64 = 0;
    while run.state.max_epochs.is_none_or(|m| epoch < m) && (max_steps < 0 || run.state.global_step < max_steps) {
        run.state.epoch = epoch;
        if data.prepare_train(&mut *run.module, &run.strategy, epoch)? {
            run.state.num_train_batches = count_train_batches(opts, data.train()?);
            check_val_interval(opts, run.state.num_train_batches, data.validating())?;
        }
        if validates_in(opts, epoch) && data.prepare_vals(&mut *run.module, &run.strategy, epoch, true)? {
            run.state.num_val_batches = count_val_batches(opts, &data.vals());
        }
        let vals = data.vals();
        let started = run.profile_start();
        let stop = train_epoch(run, opts, data.train()?, &vals, skip_batches, &mut total_batches)?;
        run.profile_stop("run_training_epoch", started, Default::default());
        skip_batches = 0;
        epoch += 1;
        let mins_done = epoch >= min_epochs && run.state.global_step >= min_steps;
        // A stop request stays until the minimums are met (Lightning).
        if stop || (run.state.should_stop && mins_done) {
            break;
        }
    }
    run.state.epoch = epoch;
    run.simple(Hook::TrainEnd)?;
    set_mode(run.module, true)?;
    run.simple(Hook::FitEnd)?;
    run.simple(Hook::Teardown)?;
    run.strategy.teardown(&*run.module)?;
    run.save_logs()
}

/// One training epoch; returns true when training must end (no batches).
fn train_epoch(
    run: &mut Run,
    opts: &super::TrainerOptions,
    train: &dyn BatchSource,
    vals: &[&dyn BatchSource],
    skip: usize,
    total_batches: &mut u64,
) -> Result<bool> {
    let epoch = run.state.epoch;
    let limit = opts.effective_limit(opts.limit_train_batches).apply(train.num_batches());
    let overfit = !opts.overfit_batches.is_zero();
    let val_every = match opts.val_check_interval {
        ValCheckInterval::Fraction(f) => limit.map(|n| ((n as f64 * f) as usize).max(1)),
        ValCheckInterval::Batches(b) => Some(b),
    };
    let val_this_epoch = !vals.is_empty() && validates_in(opts, epoch);
    let mut store = MetricStore::default();
    let (mut loss_sum, mut loss_count) = (0.0, 0usize);
    let manual = !run.module.automatic_optimization();
    let mut toggled = Vec::new();
    set_mode(run.module, true)?;
    run.batches_in_epoch = 0;
    run.epoch_finished = false;
    if skip == 0 {
        run.scheduler_steps.1 = 0;
        run.extra_zero_grads.1 = 0;
    }
    run.val_batches = (0, 0);
    run.state.running_loss = None;
    run.state.log_step = run.state.batches_stepped;
    run.simple(Hook::TrainEpochStart)?;
    // Param groups a finetuning callback added or changed.
    run.refresh_learning_rates();
    // What the epoch-start hooks left (GradientAccumulationScheduler).
    let acc = run.state.accumulate_grad_batches;
    if acc < 1 {
        return Err(Error::invalid(format!("accumulate_grad_batches must be >= 1, got {acc}")));
    }
    if manual && acc > 1 {
        return Err(Error::invalid(
            "gradient accumulation (accumulate_grad_batches > 1, or a GradientAccumulationScheduler) is not \
             supported with manual optimization: accumulate in the training_step",
        ));
    }
    let acc = acc as usize;
    let has_timer = run.callbacks.iter().any(|c| c.as_any().is_some_and(|a| a.is::<Timer>()));
    let mut batches = train.batches(if overfit { 0 } else { epoch as u64 })?.enumerate().skip(skip).peekable();
    let mut ran = 0usize;
    loop {
        let fetch = run.profile_start();
        let Some((i, batch)) = batches.next() else { break };
        let fetched = fetch.map(|t| t.elapsed()).unwrap_or_default();
        if limit.is_some_and(|n| i >= n) || (opts.step_limit() >= 0 && run.state.global_step >= opts.step_limit()) {
            break;
        }
        let started = run.profile_start();
        let batch = run.strategy.batch_to_device(batch.ctx(format!("loading training batch {i} of epoch {epoch}"))?)?;
        run.profile_stop("[Strategy].batch_to_device", started, Default::default());
        // The last batch by count, or the real last one of a source that
        // yields fewer batches than it announced (looked ahead by one, as
        // Lightning's prefetching fetcher does), so the epoch-end
        // validation, accumulation step and checkpoint still happen.
        let fetch = run.profile_start();
        let is_last = limit.is_some_and(|n| i + 1 >= n) || batches.peek().is_none();
        run.profile_stop("[_TrainingEpochLoop].train_dataloader_next", fetch, fetched);
        let batch_started = run.profile_start();
        // The micro-batches of accumulation that do not step skip the
        // all-reduce (DDP's no_sync).
        // (Manual optimization: every batch counts as stepped.)
        let stepped = manual || (!run.state.skip_backward && ((i + 1) % acc == 0 || is_last));
        let data = || HookData { batch_idx: i as i64, batch: Some(&batch), ..Default::default() };
        run.state.log_step = run.state.batches_stepped;
        run.hook(Hook::TrainBatchStart, data())?;
        // Built only when an error needs it.
        let step_now = run.state.global_step;
        let at = || format!("training_step (epoch {epoch}, global step {step_now}, batch {i})");
        let log_index = run.state.batches_stepped;
        let loss = if manual {
            let started = run.profile_start();
            let loss = manual_training_step(run, &mut store, &batch, i as i64, &mut toggled, &at)?;
            run.profile_stop("[Strategy].training_step", started, Default::default());
            run.state.batches_stepped += 1;
            if let Some(l) = &loss {
                loss_sum += returned_value(l, &at)?;
                loss_count += 1;
                run.state.running_loss = Some(loss_sum / loss_count as f64);
            }
            loss
        } else {
            let first_of_window = i % acc == 0 || i == skip;
            let (loss, value) = automatic_step(run, opts, &mut store, &batch, i, first_of_window, stepped, &at)?;
            loss_sum += value;
            loss_count += 1;
            run.state.running_loss = Some(loss_sum / loss_count as f64);
            if stepped {
                run.state.global_step += 1;
                run.state.batches_stepped += 1;
            }
            Some(loss)
        };
        ran += 1;
        run.batches_in_epoch = (i + 1) as i64;
        run.epoch_finished = is_last;
        run.state.callback_metrics.extend(store.callback_metrics.iter().map(|(k, v)| (k.clone(), *v)));
        run.state.progress_metrics.extend(store.progress_metrics.iter().map(|(k, v)| (k.clone(), *v)));
        // As Lightning: after the optimizer step, before on_train_batch_end
        // (and so before the epoch-end validation and checkpoint), step
        // schedulers step on optimizer steps and epoch schedulers on the
        // epoch's last batch; ReduceLROnPlateau waits for validation.
        // Learning rates change only when a scheduler steps. With manual
        // optimization the step steps its schedulers itself.
        let batch_count = (i + 1) as i64;
        let mut lr_changed = false;
        if stepped && !manual {
            let n = step_schedulers(
                &mut run.optimizers,
                Interval::Step,
                Kind::Plain,
                batch_count,
                &run.state.callback_metrics,
            )?;
            lr_changed |= run.count_scheduler_steps(n);
        }
        if is_last && !manual {
            let n = step_schedulers(
                &mut run.optimizers,
                Interval::Epoch,
                Kind::Plain,
                epoch + 1,
                &run.state.callback_metrics,
            )?;
            lr_changed |= run.count_scheduler_steps(n);
        }
        if lr_changed {
            run.refresh_learning_rates();
        }
        let step_values = store.take_step_values();
        run.hook(
            Hook::TrainBatchEnd,
            HookData { batch_idx: i as i64, batch: Some(&batch), output: loss.as_ref(), ..Default::default() },
        )?;
        run.profile_stop("run_training_batch", batch_started, Default::default());
        if stepped && (log_index + 1) % opts.log_every_n_steps == 0 && !step_values.is_empty() {
            run.log_metrics(&step_values, log_index)?;
        }
        *total_batches += 1;
        if val_this_epoch {
            let counter = if opts.check_val_every_n_epoch.is_none() { *total_batches as usize } else { i + 1 };
            let due = val_every.map_or(is_last, |n| counter % n == 0)
                || (is_last && opts.val_check_interval == ValCheckInterval::Fraction(1.0));
            if due {
                run_validation(run, opts, vals, None)?;
                set_mode(run.module, true)?;
                run.state.should_stop = run.strategy.any(run.state.should_stop)?;
            }
        }
        if stepped && !manual {
            let n = step_schedulers(
                &mut run.optimizers,
                Interval::Step,
                Kind::Plateau,
                batch_count,
                &run.state.callback_metrics,
            )?;
            if run.count_scheduler_steps(n) {
                run.refresh_learning_rates();
            }
        }
        // Lightning's `_can_stop_early`: only finished epochs count.
        // Ranks stop together. A Timer's decision differs between ranks, so
        // with one every batch's request is or-reduced (one small
        // collective); other stop requests are synchronized after
        // validation and at the end of the epoch (as in Lightning, a host
        // hook that stops one rank alone mid-epoch must do so on all).
        let mins_done = epoch >= opts.min_epochs.unwrap_or(0) && run.state.global_step >= opts.min_steps.unwrap_or(0);
        if has_timer {
            run.state.should_stop = run.strategy.any(run.state.should_stop)?;
        }
        if run.state.should_stop && mins_done {
            break;
        }
        // Nothing past the last batch is fetched (limit_train_batches).
        if is_last {
            break;
        }
    }
    run.state.log_step = run.state.batches_stepped;
    let mut train_epoch_metrics = store.end_epoch_synced(&|v, op| run.strategy.reduce(v, op))?;
    run.state.callback_metrics.extend(store.callback_metrics);
    run.state.progress_metrics.extend(store.progress_metrics);
    run.hook(Hook::TrainEpochEnd, HookData { batch_idx: -1, ..Default::default() })?;
    run.state.skip_backward = false;
    train_epoch_metrics.extend(std::mem::take(&mut run.state.hook_metrics));
    if !train_epoch_metrics.is_empty() {
        run.log_metrics(&train_epoch_metrics, (run.state.batches_stepped - 1).max(0))?;
    }
    // ReduceLROnPlateau per epoch: after on_train_epoch_end, and only when
    // the epoch ran to its end (Lightning's `_num_ready_batches_reached`).
    if run.epoch_finished && !manual {
        let n = step_schedulers(
            &mut run.optimizers,
            Interval::Epoch,
            Kind::Plateau,
            epoch + 1,
            &run.state.callback_metrics,
        )?;
        if run.count_scheduler_steps(n) {
            run.refresh_learning_rates();
        }
    }
    run.save_logs()?;
    run.state.should_stop = run.strategy.any(run.state.should_stop)?;
    Ok(ran == 0 && skip == 0)
}

/// One validation run inside fit (or the sanity check, limited to
/// `sanity_limit` batches of each loader and logging nothing), on the one
/// evaluation loop.
pub(super) fn run_validation(
    run: &mut Run,
    opts: &super::TrainerOptions,
    vals: &[&dyn BatchSource],
    sanity_limit: Option<usize>,
) -> Result<()> {
    let limits: Vec<Option<usize>> = vals
        .iter()
        .map(|v| match (opts.effective_limit(opts.limit_val_batches).apply(v.num_batches()), sanity_limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        })
        .collect();
    let log_step = (!run.state.sanity_checking).then(|| run.state.batches_stepped.max(1) - 1);
    super::eval_loop::evaluate(run, Stage::Validate, vals, &limits, log_step).map(|_| ())
}

/// The sanity check: `sanity` batches (all when negative) of each
/// validation loader, the val_dataloader hook called first when the
/// module gives the loaders; metrics and progress are left as they were.
fn sanity_check(
    run: &mut Run,
    opts: &super::TrainerOptions,
    data: &mut FitData<'_>,
    load_epoch: i64,
    sanity: i64,
) -> Result<()> {
    let record = validates_in(opts, load_epoch);
    if data.prepare_vals(&mut *run.module, &run.strategy, load_epoch, record)? {
        run.state.num_val_batches = count_val_batches(opts, &data.vals());
    }
    let vals = data.vals();
    if vals.is_empty() {
        return Ok(());
    }
    run.state.sanity_checking = true;
    run.simple(Hook::SanityCheckStart)?;
    let limit = if sanity < 0 { None } else { Some(sanity as usize) };
    let saved = run.state.callback_metrics.clone();
    run_validation(run, opts, &vals, limit)?;
    run.state.callback_metrics = saved;
    run.state.progress_metrics.clear();
    run.simple(Hook::SanityCheckEnd)?;
    run.state.sanity_checking = false;
    Ok(())
}

/// The CPU's random state and, on CUDA, the root device's, put back by
/// `restore`. Lightning's `isolate_rng` takes every visible CUDA device's
/// (and Python's and NumPy's); a rank here draws on its root device only.
/// Other device types are left alone, as there.
struct RngSnapshot {
    cpu: Tensor,
    device: Option<Tensor>,
}

impl RngSnapshot {
    /// Copies the generators' states.
    fn take(strategy: &super::strategy::RunStrategy) -> Result<Self> {
        Ok(RngSnapshot {
            cpu: crate::tensor::runtime::cpu_rng_state().ctx("the random state")?,
            device: match strategy.root_device() {
                crate::tensor::device::Device::Cuda(_) => {
                    strategy.device_rng_state().ctx("the device's random state")?
                }
                _ => None,
            },
        })
    }

    /// Puts the copied states back.
    fn restore(&self, strategy: &super::strategy::RunStrategy) -> Result<()> {
        crate::tensor::runtime::set_cpu_rng_state(&self.cpu).ctx("restoring the random state")?;
        if let Some(d) = &self.device {
            strategy.set_device_rng_state(d).ctx("restoring the device's random state")?;
        }
        Ok(())
    }
}
