//! The fit loop (Lightning's `_FitLoop`): the sanity check, then epochs
//! ([`super::epoch_loop`]) until `max_epochs` / `max_steps` / a stop, with
//! validation, callbacks, logging and checkpoints; `Trainer::fit`.
use super::automatic::check_closure_optimizers;
use super::context::Stage;
use super::epoch_loop::train_epoch;
use super::fit_data::FitData;
use super::hooks::{Callback, Hook};
use super::manual_optimization::check_manual;
use super::next_fit::{limit_reached, FitLoopState};
use super::options::ValCheckInterval;
use super::run::Run;
use super::source::BatchSource;
use super::{set_mode, LightningModule, Trainer};
use crate::callbacks::{ModelCheckpoint, ModelCheckpointOptions, ProgressBar, Timer};
use crate::error::{Error, Result, ResultExt};
use crate::loggers::Logger;
use tch::Tensor;

/// Whether `cb` is a ModelCheckpoint.
pub(super) fn is_checkpoint(cb: &dyn Callback) -> bool {
    cb.as_any().is_some_and(|a| a.is::<ModelCheckpoint>())
}

impl Trainer {
    /// The built-in callbacks a run adds: progress bar, a Timer for
    /// `max_time`, and a ModelCheckpoint when checkpointing is on and the
    /// user added none: `kept`, the one an earlier fit made, when there is
    /// one (Lightning's trainer makes its own once).
    pub(crate) fn default_callbacks(
        &self,
        fitting: bool,
        global_zero: bool,
        kept: Option<Box<dyn Callback>>,
    ) -> Result<Vec<Box<dyn Callback>>> {
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
                d.push(match kept {
                    Some(k) => k,
                    None => Box::new(ModelCheckpoint::new(ModelCheckpointOptions::default())?),
                });
            }
        }
        Ok(d)
    }

    /// Creates this run's file loggers in a new `version_N` folder (on
    /// rank 0 only: other ranks log nothing, as Lightning's loggers).
    fn new_file_loggers(&mut self, global_zero: bool) -> Result<Vec<Box<dyn Logger>>> {
        let mut out: Vec<Box<dyn Logger>> = Vec::new();
        let choice = self.opts.logger;
        if self.opts.fast_dev_run > 0 || !(choice.csv || choice.tensorboard) || !global_zero {
            self.state.log_dir = None;
            self.state.run_dir = None;
            return Ok(out);
        }
        let dir = crate::loggers::next_version_dir(&self.opts.default_root_dir)?;
        if choice.csv {
            out.push(Box::new(crate::loggers::CsvLogger::create(&dir)?));
        }
        if choice.tensorboard {
            out.push(Box::new(crate::loggers::TensorBoardLogger::create(&dir)?));
        }
        self.state.run_dir = Some(dir.clone());
        self.state.log_dir = Some(dir);
        Ok(out)
    }

    /// The loggers of a run: the `logger` option's file loggers, those
    /// the last run left (made on first use: Lightning's trainer makes
    /// its loggers once, so every run logs in one `version_N`); then the
    /// run's log folder, whether a logger takes media, and whether the run
    /// has loggers at all.
    pub(super) fn prepare_loggers(&mut self, global_zero: bool) -> Result<()> {
        if self.file_loggers.is_empty() {
            self.file_loggers = self.new_file_loggers(global_zero)?;
        }
        self.logger_folder_and_media(global_zero)?;
        let choice = self.opts.logger;
        self.state.has_loggers = choice.csv || choice.tensorboard || !self.extra_loggers.is_empty();
        Ok(())
    }

    /// Without a file logger of the `logger` option, the run's log folder
    /// is the first added logger's that has one (Lightning's
    /// `trainer.log_dir`, which is `loggers[0].log_dir`; ModelCheckpoint
    /// writes under it), made now; and whether a logger takes images,
    /// histograms and texts.
    pub(crate) fn logger_folder_and_media(&mut self, global_zero: bool) -> Result<()> {
        let choice = self.opts.logger;
        self.state.media_loggers = choice.tensorboard || self.extra_loggers.iter().any(|l| l.accepts_media());
        if self.state.log_dir.is_none() && global_zero && self.opts.fast_dev_run == 0 {
            for l in self.extra_loggers.iter_mut() {
                if let Some(dir) = l.resolve_log_dir().ctx(format!("{} logger", l.name()))? {
                    self.state.run_dir = l.run_dir().or_else(|| Some(dir.clone()));
                    self.state.log_dir = Some(dir);
                    break;
                }
            }
        }
        Ok(())
    }

    /// Resets the state for a new run and fills in what hooks read; the
    /// log folders stay, as the trainer's loggers they belong to do.
    pub(crate) fn begin_state(&mut self) {
        let o = &self.opts;
        self.state = super::hooks::TrainerState {
            log_dir: self.state.log_dir.take(),
            run_dir: self.state.run_dir.take(),
            root_dir: o.default_root_dir.clone(),
            check_val_every_n_epoch: o.check_val_every_n_epoch,
            val_once_per_epoch: o.effective_val_check_interval() == ValCheckInterval::Fraction(1.0),
            val_check_by_time: matches!(o.effective_val_check_interval(), ValCheckInterval::Time(_)),
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
        self.state.eval_results.clear();
        if train.is_none() && !module.has_train_dataloader() {
            return Err(Error::state(
                "fit has no training data: pass a train loader or give the module a train_dataloader",
            ));
        }
        let resume = match ckpt_path {
            Some(p) => Some(self.resolve_ckpt_path(p)?),
            // A requeued SLURM job goes on from its last hpc checkpoint.
            None if self.opts.slurm_auto_requeue && super::slurm::detected() => {
                super::slurm::resume_path(&self.opts.default_root_dir)
            }
            None => None,
        };
        // Without a checkpoint the loop goes on from the last fit's
        // progress (Lightning's trainer keeps its fit_loop).
        let carried = self.fit_loop.filter(|_| resume.is_none());
        let progress = carried.map(|c| c.for_next_fit(self.opts.step_limit() != -1));
        let writer = self.checkpoint_writer();
        let (_settings, strategy) = self.start_run(module, true)?;
        let global_zero = strategy.is_global_zero();
        let mut data = FitData::new(&*module, &strategy, &self.opts, train, vals);
        self.begin_state();
        if let (Some(c), Some(p)) = (carried, progress) {
            self.state.global_step = c.global_step;
            self.state.batches_stepped = c.batches_stepped;
            self.state.epoch = FitLoopState::next_epoch(&p);
        }
        self.state.global_rank = strategy.global_rank();
        self.state.ckpt_path = resume.clone();
        self.state.checkpoint_plugin = self.checkpoint_io.is_some();
        self.state.world_size = strategy.world_size();
        self.state.device_sync = strategy.device_sync();
        let kept = std::mem::take(&mut self.defaults).into_iter().find(|c| is_checkpoint(c.as_ref()));
        self.defaults = self.default_callbacks(true, global_zero, kept)?;
        self.prepare_loggers(global_zero)?;
        self.state.num_devices = strategy.num_devices();
        self.state.node_rank = strategy.node_rank();
        set_val_batches(&mut self.state, &self.opts, &data.vals());
        self.state.num_train_batches = data.train().ok().and_then(|t| count_train_batches(&self.opts, t));
        let opts = self.opts.clone();
        let ordered = fit_order(&mut self.defaults, &mut self.callbacks);
        let mut loggers: Vec<&mut Box<dyn Logger>> = self.file_loggers.iter_mut().collect();
        if opts.fast_dev_run == 0 && global_zero {
            loggers.extend(self.extra_loggers.iter_mut());
        }
        let mut run = Run::new("fit", &mut self.state, ordered, module, loggers, &opts, strategy, writer)?;
        if let Some(p) = progress {
            run.progress = p;
        }
        run.graphs = super::graphed_step::GraphedSteps::when(&opts);
        run.grads_stay = run.graphs.is_some();
        run.requeue = super::slurm::Requeue::when(opts.slurm_auto_requeue, &opts.default_root_dir);
        let _sigusr1 = super::slurm::SignalGuard::install(run.requeue.is_some());
        // Checks of device values wait to be read with the run's other
        // values (crate::tensor::deferred); what is left is read at the end,
        // failed or not.
        let deferred = crate::tensor::deferred::DeferredScope::enter(run.state.global_step);
        let result = fit_run(&mut run, &opts, &mut data, resume.as_deref());
        super::graphed_step::end(&mut run);
        let result = deferred.finish(run.state.global_step, result).map_err(|e| run.strategy.fail(e));
        let estimated = data.train().ok().map(|t| estimated_stepping_batches(&opts, t));
        let (report, traced) = run.finish_profile();
        self.profiler_report = report;
        let failed = result.and(traced).inspect_err(|e| run.exception(e));
        // The last background checkpoint save (on_exception's too) is done
        // before the loggers end (MLflow uploads the files at the end) and
        // before the run returns; its error is the run's when it had none.
        let result = run.checkpoints.finish(failed.as_ref().map(|_| ()).map_err(Clone::clone));
        let result = match (failed, result) {
            (Ok(()), Ok(())) => {
                // Every logger is finalized; the first failure is reported.
                let mut first = Ok(());
                for l in run.loggers.iter_mut() {
                    let r = l.finalize("success").ctx(format!("{} logger", l.name()));
                    first = first.and(r);
                }
                first
            }
            (Ok(()), Err(save)) => {
                for l in run.loggers.iter_mut() {
                    let _ = l.finalize("failed");
                }
                Err(save)
            }
            (Err(_), result) => result,
        };
        // Lightning tears the accelerator down on failure too (done
        // already after a fit that ended); the run's error stays the one
        // reported, a failing teardown's attached.
        let result = result.map_err(|e| run.strategy.teardown_after(&*run.module, e));
        // Kept for save_checkpoint and the queries after the run, whether
        // it ended or failed (Lightning's trainer keeps its optimizers and
        // loops).
        let remains = super::after_run::FitRemains::of(&mut run, estimated);
        self.fit_loop = Some(FitLoopState {
            progress: remains.progress,
            global_step: run.state.global_step,
            batches_stepped: run.state.batches_stepped,
        });
        self.last_fit = Some(remains);
        result
    }
}

/// The callbacks in a fit's order: the built-in ones and the user's, every
/// ModelCheckpoint last (so it sees what the others logged and saves the
/// state they leave, as in Lightning).
pub(super) fn fit_order<'a>(
    defaults: &'a mut [Box<dyn Callback>],
    user: &'a mut [Box<dyn Callback>],
) -> Vec<&'a mut Box<dyn Callback>> {
    let mut ordered: Vec<&mut Box<dyn Callback>> = Vec::new();
    let mut checkpoints: Vec<&mut Box<dyn Callback>> = Vec::new();
    for cb in defaults.iter_mut().chain(user.iter_mut()) {
        if is_checkpoint(cb.as_ref()) {
            checkpoints.push(cb);
        } else {
            ordered.push(cb);
        }
    }
    ordered.extend(checkpoints);
    ordered
}

/// Records the batches of a validation over `vals`: in all (0: no
/// validation) and per loader (Lightning's `num_val_batches`).
fn set_val_batches(state: &mut super::hooks::TrainerState, opts: &super::TrainerOptions, vals: &[&dyn BatchSource]) {
    state.num_val_batches = count_val_batches(opts, vals);
    let limit = opts.effective_limit(opts.limit_val_batches);
    state.val_loader_batches = vals.iter().map(|v| limit.apply(v.num_batches())).collect();
}

/// Whether validation runs in `epoch` (`check_val_every_n_epoch`).
pub(super) fn validates_in(opts: &super::TrainerOptions, epoch: i64) -> bool {
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
    super::datamodule::prepare_and_setup(run)?;
    run.simple(Hook::Setup)?;
    run.configure_model(true)?;
    // The checkpoint is read first: the module's dataloader hooks are
    // called for its epoch (Lightning's `current_epoch` when a resumed fit
    // loads its data: the epoch the checkpoint ended or stopped in).
    let ck = match resume {
        Some(path) => Some(run.read_checkpoint(path, false)?),
        None => None,
    };
    let (start_epoch, mut skip_batches) = match &ck {
        Some(ck) if ck.epoch_finished => (ck.epoch + 1, 0),
        Some(ck) => (ck.epoch, ck.batches_in_epoch.max(0) as usize),
        // A new fit, or one going on from the trainer's last (its epoch).
        None => (run.state.epoch, 0),
    };
    let load_epoch = ck.as_ref().map_or(start_epoch, |ck| ck.epoch);
    run.state.epoch = load_epoch;
    if data.prepare_train(&mut *run.module, &run.strategy, load_epoch)? {
        run.state.num_train_batches = count_train_batches(opts, data.train()?);
        check_val_interval(opts, run.state.num_train_batches, data.validating())?;
    }
    let setup =
        super::module::OptimizerSetup { estimated_stepping_batches: estimated_stepping_batches(opts, data.train()?) };
    run.optimizers = run.module.configure_optimizers(&setup).ctx("configure_optimizers")?;
    if run.optimizers.is_empty() {
        // Lightning trains on with its `_MockOptimizer`: every step runs
        // training_step, backward and the hooks, and counts in global_step.
        run.warn_once(
            "no optimizer",
            "`LightningModule.configure_optimizers` added no optimizer (Lightning: returned `None`), this fit will \
             run with no optimizer",
        );
    }
    check_closure_optimizers(run)?;
    super::automatic::check_optimizer_devices(run)?;
    super::optimization::check_optimization_hooks(run)?;
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
    // The steps since the restored one count in the device checks' errors.
    crate::tensor::deferred::restart(run.state.global_step);
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
    let max_steps = opts.step_limit();
    let done = limit_reached(run.state.max_epochs, max_steps, start_epoch, run.state.global_step);
    if let Some(why) = done {
        // Lightning's fit loop skips itself, with on_train_start and
        // on_train_end, when it is done before its first epoch.
        let step = run.state.global_step;
        let from = if resume.is_some() {
            format!("; the checkpoint ended at epoch {start_epoch}, step {step}")
        } else if start_epoch > 0 || step > 0 {
            format!(
                "; this fit went on from the trainer's last one (epoch {start_epoch}, step {step}): raise the limit \
                 (fulmen_trainer_set_max_epochs / fulmen_trainer_set_max_steps) or pass ckpt_path to train on"
            )
        } else {
            String::new()
        };
        run.warn_once("fit_done", &format!("`Trainer.fit` stopped: {why}{from}"));
        run.state.epoch = start_epoch;
        return finish_fit(run);
    }
    run.simple(Hook::TrainStart)?;
    run.refresh_learning_rates();
    // A wall-time val_check_interval counts from here (after the sanity
    // check), as Lightning's fit loop starts its clock.
    run.last_validation = std::time::Instant::now();
    let min_epochs = opts.min_epochs.unwrap_or(0);
    let min_steps = opts.min_steps.unwrap_or(0);
    let mut epoch = start_epoch;
    let mut total_batches: u64 = 0;
    while limit_reached(run.state.max_epochs, max_steps, epoch, run.state.global_step).is_none() {
        run.state.epoch = epoch;
        if data.prepare_train(&mut *run.module, &run.strategy, epoch)? {
            run.state.num_train_batches = count_train_batches(opts, data.train()?);
            check_val_interval(opts, run.state.num_train_batches, data.validating())?;
        }
        if validates_in(opts, epoch) && data.prepare_vals(&mut *run.module, &run.strategy, epoch, true)? {
            set_val_batches(run.state, opts, &data.vals());
            // Reloaded loaders count their logged batches from 0 again.
            run.eval_batches_logged.clear();
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
    run.verify_deferred()?;
    run.simple(Hook::TrainEnd)?;
    finish_fit(run)
}

/// What a fit does after its loop: on_fit_end, the datamodule's and the
/// module's teardown, the strategy's, and the logs.
fn finish_fit(run: &mut Run) -> Result<()> {
    set_mode(run.module, true)?;
    run.simple(Hook::FitEnd)?;
    super::datamodule::teardown(run)?;
    run.simple(Hook::Teardown)?;
    run.strategy.teardown_optimizers(&mut run.optimizers)?;
    run.strategy.teardown(&*run.module)?;
    run.save_logs()
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
    super::eval_loop::evaluate(run, Stage::Validate, vals, &limits, log_step)?;
    run.last_validation = std::time::Instant::now();
    Ok(())
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
        set_val_batches(run.state, opts, &data.vals());
    }
    let vals = data.vals();
    if vals.is_empty() {
        return Ok(());
    }
    let limit = if sanity < 0 { None } else { Some(sanity as usize) };
    run.state.sanity_loader_batches = run
        .state
        .val_loader_batches
        .iter()
        .map(|b| match (*b, limit) {
            (Some(n), Some(l)) => Some(n.min(l)),
            (None, l) => l,
            (b, None) => b,
        })
        .collect();
    run.state.sanity_checking = true;
    run.simple(Hook::SanityCheckStart)?;
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
