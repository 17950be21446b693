//! The training epoch loop (Lightning's `_TrainingEpochLoop`): the batches
//! of one epoch, their optimization, schedulers, validation at
//! `val_check_interval`, the hooks and checkpoints between batches.
use super::automatic::TrainBatch;
use super::fit_loop::{run_validation, validates_in};
use super::hooks::Hook;
use super::manual_optimization::{check_returned, manual_training_step};
use super::metric_map::MetricMap;
use super::metrics::MetricStore;
use super::module::{Interval, SchedulerConfig};
use super::optimization::lr_scheduler_hook;
use super::options::ValCheckInterval;
use super::prefetch::Prefetched;
use super::run::{HookData, Run};
use super::set_mode;
use super::source::BatchSource;
use crate::callbacks::Timer;
use crate::error::{Error, Result, ResultExt};

/// Which schedulers a call of `step_schedulers` steps: Lightning steps
/// ReduceLROnPlateau apart, after validation, because it reads a metric.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Every scheduler but ReduceLROnPlateau.
    Plain,
    /// ReduceLROnPlateau only.
    Plateau,
}

/// The monitored value a due scheduler steps on: its metric for a
/// ReduceLROnPlateau, `None` for the others.
fn scheduler_metric(s: &SchedulerConfig, metrics: &MetricMap) -> Result<Option<f64>> {
    match (&s.monitor, s.scheduler.reduce_on_plateau()) {
        (Some(name), true) => Ok(Some(metrics.read(name)?.ok_or_else(|| {
            Error::state(format!(
                "scheduler {} monitors `{name}`, which was not logged; logged: {:?}",
                s.scheduler.name(),
                metrics.names()
            ))
        })?)),
        _ => Ok(None),
    }
}

/// Whether a due ReduceLROnPlateau with `strict` off must skip its step
/// because its monitored metric was not logged (Lightning warns and skips).
fn skips_missing_monitor(s: &SchedulerConfig, metrics: &MetricMap) -> bool {
    !s.strict && s.scheduler.reduce_on_plateau() && s.monitor.as_ref().is_some_and(|m| !metrics.has(m))
}

/// Steps the schedulers of `interval` and `kind` whose frequency divides
/// `count` (Lightning's `current_idx`: the batch index in the epoch + 1 for
/// step schedulers, the epoch + 1 for epoch ones), each through the
/// module's `lr_scheduler_step` when it has one; returns how many were due.
pub(super) fn step_schedulers(run: &mut Run, interval: Interval, kind: Kind, count: i64) -> Result<usize> {
    let mut stepped = 0;
    let mut flat = 0;
    for i in 0..run.optimizers.len() {
        for j in 0..run.optimizers[i].schedulers.len() {
            let index = flat;
            flat += 1;
            let s = &run.optimizers[i].schedulers[j];
            let plateau = s.scheduler.reduce_on_plateau();
            if s.interval != interval || (kind == Kind::Plateau) != plateau || count % s.frequency.max(1) != 0 {
                continue;
            }
            if skips_missing_monitor(s, &run.state.callback_metrics) {
                let message = format!(
                    "ReduceLROnPlateau conditioned on metric {} which is not available but strict is set to \
                     `False`. Skipping learning rate update.",
                    s.monitor.as_deref().unwrap_or_default()
                );
                run.warn_once("scheduler_monitor_missing", &message);
                continue;
            }
            let metric = scheduler_metric(s, &run.state.callback_metrics)?;
            lr_scheduler_hook(run, i, j, index, metric)?;
            stepped += 1;
        }
    }
    Ok(stepped)
}

/// The start of an epoch (Lightning's `on_advance_start`): train mode, the
/// epoch's progress and its start hooks; returns the accumulation the
/// hooks left (GradientAccumulationScheduler), checked.
fn begin_epoch(run: &mut Run, skip: usize, manual: bool) -> Result<usize> {
    set_mode(run.module, true)?;
    // A resumed epoch (`skip` batches done) keeps its restored progress
    // and, as in Lightning, is not counted as started again.
    let resumed = skip > 0;
    run.progress.start_epoch(resumed);
    if !resumed {
        run.progress.epoch.increment_ready();
    }
    run.state.running_loss.clear();
    run.state.log_step = run.state.batches_stepped;
    run.simple(Hook::TrainEpochStart)?;
    if !resumed {
        run.progress.epoch.increment_started();
    }
    // Param groups a finetuning callback added or changed.
    run.refresh_learning_rates();
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
    Ok(acc as usize)
}

/// As Lightning, after a batch's optimizer step and before its
/// `on_train_batch_end` (so before the epoch-end validation and
/// checkpoint): step schedulers step on optimizer steps and epoch
/// schedulers on the epoch's last batch; ReduceLROnPlateau waits for
/// validation. Learning rates change only when a scheduler steps. (With
/// manual optimization the step steps its schedulers itself.)
fn step_batch_schedulers(run: &mut Run, stepped: bool, is_last: bool, batch_count: i64) -> Result<()> {
    let mut lr_changed = false;
    if stepped {
        let n = step_schedulers(run, Interval::Step, Kind::Plain, batch_count)?;
        lr_changed |= run.count_scheduler_steps(n);
    }
    if is_last {
        let epoch = run.state.epoch;
        let n = step_schedulers(run, Interval::Epoch, Kind::Plain, epoch + 1)?;
        lr_changed |= run.count_scheduler_steps(n);
    }
    if lr_changed {
        run.refresh_learning_rates();
    }
    Ok(())
}

/// Steps the ReduceLROnPlateau schedulers of `interval` whose frequency
/// divides `count`, after the validation that logs their metric.
fn step_plateau_schedulers(run: &mut Run, interval: Interval, count: i64) -> Result<()> {
    let n = step_schedulers(run, interval, Kind::Plateau, count)?;
    if run.count_scheduler_steps(n) {
        run.refresh_learning_rates();
    }
    Ok(())
}

/// The end of an epoch (Lightning's `on_advance_end`): the epoch's metrics
/// and its end hooks, the per-epoch ReduceLROnPlateau step when the epoch
/// ran to its end (`_num_ready_batches_reached`), the logs, and the
/// ranks' stop decision.
fn end_epoch(run: &mut Run, mut store: MetricStore, manual: bool) -> Result<()> {
    run.verify_deferred()?;
    run.state.log_step = run.state.batches_stepped;
    run.drain_batch_hook_logs(&mut store, None, 1, true)?;
    let mut train_epoch_metrics = store.end_epoch_synced(&|v, op, g| run.strategy.reduce_in(v, op, g))?;
    run.state.callback_metrics.extend_from(&store.callback_metrics);
    run.state.progress_metrics.extend_from(&store.progress_metrics);
    run.state.settle_metrics()?;
    run.progress.epoch.increment_processed();
    run.hook(Hook::TrainEpochEnd, HookData { batch_idx: -1, ..Default::default() })?;
    run.state.skip_backward = false;
    train_epoch_metrics.extend(std::mem::take(&mut run.state.train_hook_metrics));
    run.state.logged_metrics.extend_values(train_epoch_metrics.iter().map(|(k, v)| (k.clone(), *v)));
    if !train_epoch_metrics.is_empty() {
        run.log_metrics(&train_epoch_metrics, (run.state.batches_stepped - 1).max(0))?;
    }
    if run.progress.epoch_batches_done() && !manual {
        step_plateau_schedulers(run, Interval::Epoch, run.state.epoch + 1)?;
    }
    run.progress.epoch.increment_completed();
    run.save_logs()?;
    run.state.should_stop = run.strategy.any(run.state.should_stop)?;
    Ok(())
}

/// Lightning's `on_train_batch_start` returning -1 at batch `i`: the batch
/// is the epoch's last, processed but neither started nor completed
/// (`batch_progress.increment_by(0, is_last_batch=True)`), and under
/// automatic optimization the schedulers of a stepping batch and of the
/// epoch's last batch step; the caller then ends the epoch (no
/// `on_train_batch_end`, validation or step logging for it).
fn skip_rest_of_epoch(run: &mut Run, manual: bool, i: usize) -> Result<()> {
    run.progress.batch.is_last_batch = true;
    run.progress.batch.progress.increment_processed();
    if !manual {
        step_batch_schedulers(run, true, true, (i + 1) as i64)?;
    }
    Ok(())
}

/// Whether a wall-time `val_check_interval` of `t` is up (Lightning's
/// `_should_check_val_fx` with `_val_check_time_interval`): on any rank,
/// so that all ranks validate together.
fn time_is_up(run: &mut Run, t: std::time::Duration) -> Result<bool> {
    let up = run.last_validation.elapsed() >= t;
    run.strategy.any(up)
}

/// One training epoch; returns true when training must end (no batches).
pub(super) fn train_epoch(
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
    let interval = opts.effective_val_check_interval();
    let val_every = match interval {
        ValCheckInterval::Fraction(f) => limit.map(|n| ((n as f64 * f) as usize).max(1)),
        ValCheckInterval::Batches(b) => Some(b),
        ValCheckInterval::Time(_) => None,
    };
    let val_this_epoch = !vals.is_empty() && validates_in(opts, epoch);
    let mut store = MetricStore::default();
    // Logs of batch hooks outside this loop (a failed run's) do not count.
    run.state.batch_hook_logs.clear();
    let manual = !run.module.automatic_optimization();
    let mut toggled = Vec::new();
    let acc = begin_epoch(run, skip, manual)?;
    let has_timer = run.callbacks.iter().any(|c| c.as_any().is_some_and(|a| a.is::<Timer>()));
    let mut batches = train.batches(if overfit { 0 } else { epoch as u64 })?.enumerate().skip(skip).peekable();
    let mut ran = 0usize;
    let prefetching = run.prefetches_batches();
    // The next batch, already on its way to the device (super::prefetch).
    let mut ahead: Option<(usize, Result<Prefetched>)> = None;
    loop {
        let fetch = run.profile_start();
        let (i, batch) = match ahead.take() {
            Some((i, on_device)) => (i, on_device.and_then(Prefetched::take)),
            None => {
                let Some(next) = batches.next() else { break };
                next
            }
        };
        let fetched = fetch.map(|t| t.elapsed()).unwrap_or_default();
        if limit.is_some_and(|n| i >= n) || (opts.step_limit() >= 0 && run.state.global_step >= opts.step_limit()) {
            break;
        }
        let started = run.profile_start();
        let batch =
            run.transfer_batch(batch.ctx(format!("loading training batch {i} of epoch {epoch}"))?, i as i64, 0)?;
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
        run.progress.batch.is_last_batch = is_last;
        run.progress.batch.progress.increment_ready();
        run.hook(Hook::TrainBatchStart, data())?;
        let batch_size = super::batch_size_of(&batch);
        run.drain_batch_hook_logs(&mut store, None, batch_size, true)?;
        if std::mem::take(&mut run.state.skip_rest_of_epoch) {
            skip_rest_of_epoch(run, manual, i)?;
            // Fetched, so the next epoch still runs (Lightning's total
            // batch index counts it too).
            ran += 1;
            *total_batches += 1;
            break;
        }
        run.progress.batch.progress.increment_started();
        // Built only when an error needs it.
        let step_now = run.state.global_step;
        let at = || format!("training_step (epoch {epoch}, global step {step_now}, batch {i})");
        let log_index = run.state.batches_stepped;
        let loss = if manual {
            let started = run.profile_start();
            let loss = manual_training_step(run, &mut store, &batch, i as i64, &mut toggled, &at)?;
            run.profile_stop("[Strategy].training_step", started, Default::default());
            run.progress.manual_step.increment_by(run.state.global_step - step_now);
            run.state.batches_stepped += 1;
            if let Some(l) = &loss {
                check_returned(l, &at)?;
                run.state.running_loss.add(l)?;
            }
            loss
        } else {
            let first_of_window = i % acc == 0 || i == skip;
            let train = TrainBatch { tensors: &batch, index: i, first_of_window, at: &at };
            // A step that returned no loss still counts as an optimizer
            // step when it steps (Lightning calls the step, which finds no
            // gradients of this batch).
            let out = super::graphed_step::train_step(run, opts, &mut store, &train, stepped)?;
            if let Some(loss) = &out {
                run.state.running_loss.add(loss)?;
            }
            if stepped {
                run.state.global_step += 1;
                run.state.batches_stepped += 1;
            }
            out
        };
        ran += 1;
        // The step is queued: the next batch goes to the device while it
        // runs.
        if prefetching && !is_last {
            ahead = batches.next().map(|(j, next)| (j, next.and_then(|b| run.strategy.copy_ahead(b))));
        }
        // What on_before_backward ... on_before_zero_grad logged.
        run.drain_batch_hook_logs(&mut store, None, batch_size, true)?;
        run.progress.batch.progress.increment_processed();
        run.state.callback_metrics.extend_from(&store.callback_metrics);
        run.state.progress_metrics.extend_from(&store.progress_metrics);
        if !manual {
            step_batch_schedulers(run, stepped, is_last, (i + 1) as i64)?;
        }
        run.hook(
            Hook::TrainBatchEnd,
            HookData { batch_idx: i as i64, batch: Some(&batch), output: loss.as_ref(), ..Default::default() },
        )?;
        // As Lightning's `update_train_step_metrics` after
        // on_train_batch_end: what that hook logged is in this step's logs.
        run.drain_batch_hook_logs(&mut store, None, batch_size, true)?;
        let mut step_values = store.take_step_values();
        run.progress.batch.progress.increment_completed();
        run.profile_stop("run_training_batch", batch_started, Default::default());
        if stepped && (log_index + 1) % opts.log_every_n_steps == 0 {
            // The steps' device checks are read where values are logged.
            run.verify_deferred()?;
            // Device values logged per step are read here, with the checks.
            step_values.settle()?;
            if !step_values.is_empty() {
                run.log_metrics(&step_values, log_index)?;
            }
        }
        // Read or still pending (not a logging step): read once either way.
        run.state.logged_metrics.extend_from(&step_values);
        *total_batches += 1;
        if val_this_epoch {
            let due = match interval {
                ValCheckInterval::Time(t) => time_is_up(run, t)?,
                _ => {
                    let counter = if opts.check_val_every_n_epoch.is_none() { *total_batches as usize } else { i + 1 };
                    val_every.map_or(is_last, |n| counter % n == 0)
                        || (is_last && interval == ValCheckInterval::Fraction(1.0))
                }
            };
            if due {
                // Lightning's `not _should_accumulate()`: the gradients are
                // released before a validation that follows a step.
                if (i + 1) % acc == 0 || is_last {
                    run.validation_zero_grad()?;
                }
                // Back in train mode after it (on_validation_model_train).
                run_validation(run, opts, vals, None)?;
                run.state.should_stop = run.strategy.any(run.state.should_stop)?;
            }
        }
        if stepped && !manual {
            step_plateau_schedulers(run, Interval::Step, (i + 1) as i64)?;
        }
        if stepped {
            run.progress.batches_that_stepped += 1;
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
    end_epoch(run, store, manual)?;
    Ok(ran == 0 && skip == 0)
}

#[cfg(test)]
#[path = "hook_returns_tests.rs"]
mod hook_returns_tests;
