//! Loop progress in Lightning's `loops` entry: the fit loop's kept
//! [`FitProgress`] written as `fit_loop` (epoch, batch, scheduler,
//! optimizer and validation progress, whose `ready` / `started` /
//! `processed` / `completed` counts tell Lightning where in an epoch a
//! checkpoint was taken), and read back whole.
use super::value::{count, dict, field, whole_field};
use crate::checkpoint::file::MAX_COUNTER;
use crate::checkpoint::torch_save::Value;
use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::trainer::loop_progress::{BatchProgress, Counts, FitProgress, Progress, SavedAt, Tracker};

/// A tracker with the counts its class has, in the order Lightning's
/// dataclasses write them.
fn tracker_value(t: &Tracker, counts: Counts) -> Value {
    let mut e = vec![("ready", count(t.ready)), ("completed", count(t.completed))];
    if counts != Counts::ReadyCompleted {
        e.push(("started", count(t.started)));
    }
    if counts == Counts::Processed {
        e.push(("processed", count(t.processed)));
    }
    dict(e)
}

fn progress_value(p: &Progress) -> Value {
    dict(vec![("total", tracker_value(&p.total, p.counts)), ("current", tracker_value(&p.current, p.counts))])
}

fn batch_value(b: &BatchProgress, with_last: bool) -> Value {
    let mut e = vec![
        ("total", tracker_value(&b.progress.total, b.progress.counts)),
        ("current", tracker_value(&b.progress.current, b.progress.counts)),
    ];
    if with_last {
        e.push(("is_last_batch", Value::Bool(b.is_last_batch)));
    }
    dict(e)
}

fn idle_eval_loop(with_last: bool) -> Value {
    dict(vec![("state_dict", dict(vec![])), ("batch_progress", batch_value(&BatchProgress::default(), with_last))])
}

/// Lightning's `fit_loop` state for `p`.
fn fit_value(p: &FitProgress) -> Value {
    dict(vec![
        ("state_dict", dict(vec![])),
        ("epoch_loop.state_dict", dict(vec![("_batches_that_stepped", count(p.batches_that_stepped.max(0)))])),
        ("epoch_loop.batch_progress", batch_value(&p.batch, true)),
        ("epoch_loop.scheduler_progress", progress_value(&p.scheduler)),
        ("epoch_loop.automatic_optimization.state_dict", dict(vec![])),
        (
            "epoch_loop.automatic_optimization.optim_progress",
            dict(vec![(
                "optimizer",
                dict(vec![
                    ("step", progress_value(&p.optimizer.step)),
                    ("zero_grad", progress_value(&p.optimizer.zero_grad)),
                ]),
            )]),
        ),
        ("epoch_loop.manual_optimization.state_dict", dict(vec![])),
        ("epoch_loop.manual_optimization.optim_step_progress", progress_value(&p.manual_step)),
        ("epoch_loop.val_loop.state_dict", dict(vec![])),
        ("epoch_loop.val_loop.batch_progress", batch_value(&p.val_batch, true)),
        ("epoch_progress", progress_value(&p.epoch)),
    ])
}

/// Lightning's `loops` entry for `ck`: the progress the run kept, or for a
/// checkpoint that predates kept progress, the one its counters imply.
pub fn to_lightning(ck: &Checkpoint) -> Value {
    let progress = ck.progress.unwrap_or_else(|| from_counters(ck));
    dict(vec![
        ("fit_loop", fit_value(&progress)),
        ("validate_loop", idle_eval_loop(true)),
        ("test_loop", idle_eval_loop(true)),
        ("predict_loop", idle_eval_loop(false)),
    ])
}

/// The progress a fulmen checkpoint written before progress was kept
/// implies: saved at an epoch end, after a batch, or before an epoch's
/// first batch, as `ck`'s counters say. Counts such a file lacks (batches
/// of earlier epochs) are those of a run of equal epochs.
pub fn from_counters(ck: &Checkpoint) -> FitProgress {
    let info = &ck.loop_info;
    let (e, g, k) = (ck.epoch, ck.global_step, ck.batches_in_epoch);
    let earlier = e * info.num_train_batches.max(0);
    let acc = info.accumulate_grad_batches.max(1);
    let all = |n: i64| Tracker { ready: n, started: n, processed: n, completed: n };
    let mut p = FitProgress::default();
    let (epoch, completed, stepped_before) = if ck.epoch_finished {
        (Tracker { completed: e, ..all(e + 1) }, k, ck.batches_stepped)
    } else if k > 0 {
        let stepped = info.manual_optimization || k % acc == 0;
        (
            Tracker { ready: e + 1, started: e + 1, processed: e, completed: e },
            k - 1,
            ck.batches_stepped - i64::from(stepped),
        )
    } else {
        (all(e), 0, ck.batches_stepped)
    };
    p.epoch.total = epoch;
    p.epoch.current = epoch;
    p.batches_that_stepped = stepped_before.max(0);
    p.batch.progress.total = Tracker { completed: completed + earlier, ..all(k + earlier) };
    p.batch.progress.current = Tracker { completed, ..all(k) };
    p.batch.is_last_batch = ck.epoch_finished;
    let (auto_steps, manual_steps) = if info.manual_optimization { (0, g) } else { (g, 0) };
    let in_epoch = if k > 0 || ck.epoch_finished { auto_steps.min((k + acc - 1) / acc) } else { 0 };
    let done = |n: i64| Tracker { ready: n, completed: n, ..Default::default() };
    p.optimizer.step.total = done(auto_steps);
    p.optimizer.step.current = done(in_epoch);
    let zero_grads = (auto_steps + ck.extra_zero_grads.0, in_epoch + ck.extra_zero_grads.1);
    p.optimizer.zero_grad.total = Tracker { started: zero_grads.0, ..done(zero_grads.0) };
    p.optimizer.zero_grad.current = Tracker { started: zero_grads.1, ..done(zero_grads.1) };
    p.scheduler.total = done(ck.scheduler_steps.0);
    p.scheduler.current = done(ck.scheduler_steps.1);
    p.manual_step.total = done(manual_steps);
    p.manual_step.current = done(manual_steps);
    let (val_total, val_last) = ck.val_batches;
    p.val_batch.progress.total = all(val_total);
    p.val_batch.progress.current = all(val_last);
    p.val_batch.is_last_batch = val_last > 0;
    p
}

/// A count of a tracker: required ones must be there; others read as 0
/// when absent, and are checked when present.
fn tracker_count(v: &Value, key: &str, what: &str, required: bool) -> Result<i64> {
    if required || v.get(key).is_some() {
        whole_field(v, key, what, MAX_COUNTER)
    } else {
        Ok(0)
    }
}

/// A tracker of `counts` read from `v` (`what` names it in errors); the
/// counts in `required` must be there.
fn tracker_from(v: &Value, counts: Counts, what: &str, required: &[&str]) -> Result<Tracker> {
    let read = |key: &str, has: bool| -> Result<i64> {
        if has {
            tracker_count(v, key, what, required.contains(&key))
        } else {
            Ok(0)
        }
    };
    Ok(Tracker {
        ready: read("ready", true)?,
        started: read("started", counts != Counts::ReadyCompleted)?,
        processed: read("processed", counts == Counts::Processed)?,
        completed: read("completed", true)?,
    })
}

/// A `{total, current}` progress of `counts`, required, from `v`.
fn progress_from(v: &Value, counts: Counts, what: &str, required: &[&str]) -> Result<Progress> {
    Ok(Progress {
        counts,
        total: tracker_from(field(v, "total", what)?, counts, &format!("{what}.total"), required)?,
        current: tracker_from(field(v, "current", what)?, counts, &format!("{what}.current"), required)?,
    })
}

/// A progress that may be absent (files from older Lightning versions).
fn optional_progress(v: Option<&Value>, counts: Counts, what: &str) -> Result<Progress> {
    match v {
        Some(v) => progress_from(v, counts, what, &[]),
        None => Ok(Progress::new(counts)),
    }
}

fn is_last_batch(v: &Value) -> bool {
    matches!(v.get("is_last_batch"), Some(Value::Bool(true)))
}

/// The fit loop's progress from a Lightning checkpoint's `loops.fit_loop`
/// (`w` names it in errors).
fn fit_from(fit: &Value, w: &str) -> Result<FitProgress> {
    let bp = field(fit, "epoch_loop.batch_progress", w)?;
    let bpw = format!("{w}.epoch_loop.batch_progress");
    let ep = field(fit, "epoch_progress", w)?;
    let epw = format!("{w}.epoch_progress");
    let mut p = FitProgress {
        epoch: Progress {
            counts: Counts::Processed,
            current: tracker_from(
                field(ep, "current", &epw)?,
                Counts::Processed,
                &format!("{epw}.current"),
                &["ready", "processed", "completed"],
            )?,
            ..Progress::new(Counts::Processed)
        },
        batches_that_stepped: whole_field(
            field(fit, "epoch_loop.state_dict", w)?,
            "_batches_that_stepped",
            &format!("{w}.epoch_loop.state_dict"),
            MAX_COUNTER,
        )?,
        batch: BatchProgress {
            progress: Progress {
                counts: Counts::Processed,
                total: tracker_from(
                    field(bp, "total", &bpw)?,
                    Counts::Processed,
                    &format!("{bpw}.total"),
                    &["processed", "completed"],
                )?,
                current: tracker_from(
                    field(bp, "current", &bpw)?,
                    Counts::Processed,
                    &format!("{bpw}.current"),
                    &["processed"],
                )?,
            },
            is_last_batch: is_last_batch(bp),
        },
        ..FitProgress::default()
    };
    p.epoch.total = match ep.get("total") {
        Some(t) => tracker_from(t, Counts::Processed, &format!("{epw}.total"), &[])?,
        None => p.epoch.current,
    };
    p.scheduler = optional_progress(
        fit.get("epoch_loop.scheduler_progress"),
        Counts::ReadyCompleted,
        &format!("{w}.epoch_loop.scheduler_progress"),
    )?;
    let optimizer = fit.get("epoch_loop.automatic_optimization.optim_progress").and_then(|o| o.get("optimizer"));
    let ow = format!("{w}.epoch_loop.automatic_optimization.optim_progress.optimizer");
    p.optimizer.step =
        optional_progress(optimizer.and_then(|o| o.get("step")), Counts::ReadyCompleted, &format!("{ow}.step"))?;
    p.optimizer.zero_grad =
        optional_progress(optimizer.and_then(|o| o.get("zero_grad")), Counts::Started, &format!("{ow}.zero_grad"))?;
    p.manual_step = optional_progress(
        fit.get("epoch_loop.manual_optimization.optim_step_progress"),
        Counts::ReadyCompleted,
        &format!("{w}.epoch_loop.manual_optimization.optim_step_progress"),
    )?;
    if let Some(vp) = fit.get("epoch_loop.val_loop.batch_progress") {
        let vw = format!("{w}.epoch_loop.val_loop.batch_progress");
        p.val_batch = BatchProgress {
            progress: progress_from(vp, Counts::Processed, &vw, &[])?,
            is_last_batch: is_last_batch(vp),
        };
    }
    Ok(p)
}

/// A checkpoint with the fit loop's progress and fulmen's counters
/// (epoch, steps, batches done, scheduler steps) from a Lightning
/// checkpoint's `loops`, `epoch` and `global_step` (`what` names the file
/// in errors).
pub fn from_lightning(top: &Value, what: &str) -> Result<Checkpoint> {
    whole_field(top, "epoch", what, MAX_COUNTER)?;
    let global_step = whole_field(top, "global_step", what, MAX_COUNTER)?;
    let fit = field(field(top, "loops", what)?, "fit_loop", &format!("{what}.loops"))?;
    let p = fit_from(fit, &format!("{what}.loops.fit_loop"))?;
    let b = p.batch.progress;
    // Saved in on_train_batch_end: that batch is processed, not completed,
    // and `_batches_that_stepped` does not count it yet (Lightning adds it
    // back on restore when the batch stepped, as fulmen counts it).
    let at_batch_end = b.total.completed + 1 == b.total.processed;
    let manual = {
        let auto = fit
            .get("epoch_loop.automatic_optimization.optim_progress")
            .and_then(|o| o.get("optimizer"))
            .and_then(|o| o.get("step"))
            .and_then(|o| o.get("total"))
            .and_then(|o| o.get("completed"));
        !matches!(auto, Some(Value::Int(n)) if *n == global_step)
    };
    let stepped_before = p.batches_that_stepped;
    let batches_stepped =
        if at_batch_end && (manual || stepped_before < global_step) { stepped_before + 1 } else { stepped_before };
    let scheduler_steps = (p.scheduler.total.completed, p.scheduler.current.completed);
    let extra_zero_grads = p.extra_zero_grads();
    let e = p.epoch.current;
    let ck = Checkpoint {
        global_step,
        batches_stepped,
        scheduler_steps,
        extra_zero_grads,
        progress: Some(p),
        ..Default::default()
    };
    Ok(match p.saved_at() {
        // The epoch's batches are done (train-epoch or validation end).
        SavedAt::EpochEnd => {
            Checkpoint { epoch: e.processed - 1, batches_in_epoch: b.current.processed, epoch_finished: true, ..ck }
        }
        // Between epochs: the next one starts from its first batch.
        SavedAt::EpochStart => Checkpoint { epoch: e.completed, scheduler_steps: (scheduler_steps.0, 0), ..ck },
        // After the epoch's last batch (its on_train_batch_end): Lightning
        // completes the epoch on restore.
        SavedAt::BatchEnd if at_batch_end && p.batch.is_last_batch => {
            Checkpoint { epoch: e.processed, batches_in_epoch: b.current.processed, epoch_finished: true, ..ck }
        }
        // Inside an epoch.
        SavedAt::BatchEnd => Checkpoint { epoch: e.processed, batches_in_epoch: b.current.processed, ..ck },
    })
}
