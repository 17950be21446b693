//! Loop progress between fulmen's counters and Lightning's `loops` entry
//! (`fit_loop`'s epoch, batch and optimizer progress, whose `ready` /
//! `started` / `processed` / `completed` counts tell Lightning where in an
//! epoch a checkpoint was taken).
use super::value::{count, dict, field, whole_field};
use crate::checkpoint::file::MAX_COUNTER;
use crate::checkpoint::torch_save::Value;
use crate::checkpoint::Checkpoint;
use crate::error::Result;

/// A `{ready, completed[, started, processed]}` progress record.
fn progress(ready: i64, started: i64, processed: i64, completed: i64, full: bool) -> Value {
    let mut e = vec![("ready", count(ready)), ("completed", count(completed))];
    if full {
        e.push(("started", count(started)));
        e.push(("processed", count(processed)));
    }
    dict(e)
}

/// `{total, current}` with the same counts.
fn both(ready: i64, started: i64, processed: i64, completed: i64, full: bool) -> Value {
    dict(vec![
        ("total", progress(ready, started, processed, completed, full)),
        ("current", progress(ready, started, processed, completed, full)),
    ])
}

fn batch_progress(ready: i64, completed: i64, total_offset: i64, is_last: bool) -> Value {
    dict(vec![
        (
            "total",
            progress(ready + total_offset, ready + total_offset, ready + total_offset, completed + total_offset, true),
        ),
        ("current", progress(ready, ready, ready, completed, true)),
        ("is_last_batch", Value::Bool(is_last)),
    ])
}

fn idle_batch_progress(with_last: bool) -> Value {
    let mut bp = vec![("total", progress(0, 0, 0, 0, true)), ("current", progress(0, 0, 0, 0, true))];
    if with_last {
        bp.push(("is_last_batch", Value::Bool(false)));
    }
    dict(bp)
}

fn idle_eval_loop(with_last: bool) -> Value {
    dict(vec![("state_dict", dict(vec![])), ("batch_progress", idle_batch_progress(with_last))])
}

/// Lightning's `loops` entry for a checkpoint taken where `ck`'s counters
/// say: at the end of an epoch's training batches (as ModelCheckpoint
/// saves on train-epoch or validation end), after a batch inside an epoch
/// (`every_n_train_steps`), or before an epoch's first batch. Counts
/// fulmen does not keep (batches of earlier epochs, scheduler and
/// validation progress) are written as a run of equal epochs would have
/// them, or as zero.
pub fn to_lightning(ck: &Checkpoint) -> Value {
    let info = &ck.loop_info;
    let (e, g, k) = (ck.epoch, ck.global_step, ck.batches_in_epoch);
    let earlier = e * info.num_train_batches.max(0);
    let acc = info.accumulate_grad_batches.max(1);
    let (epoch_progress, batches, stepped_before) = if ck.epoch_finished {
        // Epoch-end: processed, not yet completed.
        (both(e + 1, e + 1, e + 1, e, true), batch_progress(k, k, earlier, true), ck.batches_stepped)
    } else if k > 0 {
        // After batch k's on_train_batch_end: that batch not completed,
        // and `_batches_that_stepped` not yet counting it when it stepped.
        let stepped = info.manual_optimization || k % acc == 0;
        (
            both(e + 1, e + 1, e, e, true),
            batch_progress(k, k - 1, earlier, false),
            ck.batches_stepped - i64::from(stepped),
        )
    } else {
        (both(e, e, e, e, true), batch_progress(0, 0, earlier, false), ck.batches_stepped)
    };
    let (auto_steps, manual_steps) = if info.manual_optimization { (0, g) } else { (g, 0) };
    let in_epoch = |steps: i64| if k > 0 || ck.epoch_finished { steps.min((k + acc - 1) / acc) } else { 0 };
    let zero_grads = (auto_steps + ck.extra_zero_grads.0, in_epoch(auto_steps) + ck.extra_zero_grads.1);
    let optimizer = dict(vec![(
        "optimizer",
        dict(vec![
            (
                "step",
                dict(vec![
                    ("total", progress(auto_steps, 0, 0, auto_steps, false)),
                    ("current", progress(in_epoch(auto_steps), 0, 0, in_epoch(auto_steps), false)),
                ]),
            ),
            (
                "zero_grad",
                dict(vec![
                    (
                        "total",
                        dict(vec![
                            ("ready", count(zero_grads.0)),
                            ("completed", count(zero_grads.0)),
                            ("started", count(zero_grads.0)),
                        ]),
                    ),
                    (
                        "current",
                        dict(vec![
                            ("ready", count(zero_grads.1)),
                            ("completed", count(zero_grads.1)),
                            ("started", count(zero_grads.1)),
                        ]),
                    ),
                ]),
            ),
        ]),
    )]);
    let fit = dict(vec![
        ("state_dict", dict(vec![])),
        ("epoch_loop.state_dict", dict(vec![("_batches_that_stepped", count(stepped_before.max(0)))])),
        ("epoch_loop.batch_progress", batches),
        ("epoch_loop.scheduler_progress", {
            let (total, epoch) = ck.scheduler_steps;
            dict(vec![("total", progress(total, 0, 0, total, false)), ("current", progress(epoch, 0, 0, epoch, false))])
        }),
        ("epoch_loop.automatic_optimization.state_dict", dict(vec![])),
        ("epoch_loop.automatic_optimization.optim_progress", optimizer),
        ("epoch_loop.manual_optimization.state_dict", dict(vec![])),
        (
            "epoch_loop.manual_optimization.optim_step_progress",
            dict(vec![
                // Lightning never resets the manual loop's `current`: it
                // counts the steps of the fit, as `total` does.
                ("total", progress(manual_steps, 0, 0, manual_steps, false)),
                ("current", progress(manual_steps, 0, 0, manual_steps, false)),
            ]),
        ),
        ("epoch_loop.val_loop.state_dict", dict(vec![])),
        ("epoch_loop.val_loop.batch_progress", {
            let (total, last) = ck.val_batches;
            dict(vec![
                ("total", progress(total, total, total, total, true)),
                ("current", progress(last, last, last, last, true)),
                ("is_last_batch", Value::Bool(last > 0)),
            ])
        }),
        ("epoch_progress", epoch_progress),
    ]);
    dict(vec![
        ("fit_loop", fit),
        ("validate_loop", idle_eval_loop(true)),
        ("test_loop", idle_eval_loop(true)),
        ("predict_loop", idle_eval_loop(false)),
    ])
}

/// A checkpoint with fulmen's counters (epoch, steps, batches done, scheduler
/// steps) from a Lightning checkpoint's `loops`, `epoch` and `global_step`
/// (`what` names the file in errors).
pub fn from_lightning(top: &Value, what: &str) -> Result<Checkpoint> {
    whole_field(top, "epoch", what, MAX_COUNTER)?;
    let global_step = whole_field(top, "global_step", what, MAX_COUNTER)?;
    let fit = field(field(top, "loops", what)?, "fit_loop", &format!("{what}.loops"))?;
    let w = format!("{what}.loops.fit_loop");
    let ep = field(field(fit, "epoch_progress", &w)?, "current", &format!("{w}.epoch_progress"))?;
    let epw = format!("{w}.epoch_progress.current");
    let ep_count = |k: &str| whole_field(ep, k, &epw, MAX_COUNTER);
    let bp = field(fit, "epoch_loop.batch_progress", &w)?;
    let bpw = format!("{w}.epoch_loop.batch_progress");
    let current = field(bp, "current", &bpw)?;
    let total = field(bp, "total", &bpw)?;
    let bp_count = |v: &Value, k: &str| whole_field(v, k, &bpw, MAX_COUNTER);
    let stepped_before = whole_field(
        field(fit, "epoch_loop.state_dict", &w)?,
        "_batches_that_stepped",
        &format!("{w}.epoch_loop.state_dict"),
        MAX_COUNTER,
    )?;
    let (ready, processed, completed) = (ep_count("ready")?, ep_count("processed")?, ep_count("completed")?);
    // Saved in on_train_batch_end: that batch is processed, not completed,
    // and `_batches_that_stepped` does not count it yet (Lightning adds it
    // back on restore when the batch stepped, as fulmen counts it).
    let at_batch_end = bp_count(total, "completed")? + 1 == bp_count(total, "processed")?;
    let manual = {
        let auto = fit
            .get("epoch_loop.automatic_optimization.optim_progress")
            .and_then(|o| o.get("optimizer"))
            .and_then(|o| o.get("step"))
            .and_then(|o| o.get("total"))
            .and_then(|o| o.get("completed"));
        !matches!(auto, Some(Value::Int(n)) if *n == global_step)
    };
    let batches_stepped =
        if at_batch_end && (manual || stepped_before < global_step) { stepped_before + 1 } else { stepped_before };
    let scheduler_steps = match fit.get("epoch_loop.scheduler_progress") {
        Some(sp) => {
            let w = format!("{w}.epoch_loop.scheduler_progress");
            let done = |part: &str| -> Result<i64> { whole_field(field(sp, part, &w)?, "completed", &w, MAX_COUNTER) };
            (done("total")?, done("current")?)
        }
        None => (0, 0),
    };
    let extra_zero_grads = extra_zero_grads(fit, &w)?;
    let ck = Checkpoint { global_step, batches_stepped, scheduler_steps, extra_zero_grads, ..Default::default() };
    Ok(if processed == ready && completed + 1 == processed {
        // The epoch's batches are done (train-epoch or validation end).
        Checkpoint {
            epoch: processed - 1,
            batches_in_epoch: bp_count(current, "processed")?,
            epoch_finished: true,
            ..ck
        }
    } else if completed == processed && processed == ready {
        // Between epochs: the next one starts from its first batch.
        Checkpoint { epoch: completed, scheduler_steps: (scheduler_steps.0, 0), ..ck }
    } else {
        // Inside an epoch.
        Checkpoint { epoch: processed, batches_in_epoch: bp_count(current, "processed")?, ..ck }
    })
}

/// `zero_grad` calls beyond the optimizer steps in a Lightning checkpoint's
/// automatic-optimization progress (an LBFGS closure's re-evaluations), in
/// all and in the epoch; (0, 0) when it has none.
fn extra_zero_grads(fit: &Value, w: &str) -> Result<(i64, i64)> {
    let Some(optimizer) = fit.get("epoch_loop.automatic_optimization.optim_progress").and_then(|o| o.get("optimizer"))
    else {
        return Ok((0, 0));
    };
    let w = format!("{w}.epoch_loop.automatic_optimization.optim_progress.optimizer");
    let completed = |what: &str, part: &str| -> Result<i64> {
        match optimizer.get(what).and_then(|v| v.get(part)) {
            Some(v) => whole_field(v, "completed", &format!("{w}.{what}.{part}"), MAX_COUNTER),
            None => Ok(0),
        }
    };
    let extra = |part: &str| -> Result<i64> { Ok((completed("zero_grad", part)? - completed("step", part)?).max(0)) };
    let (total, epoch) = (extra("total")?, extra("current")?);
    Ok((total, epoch.min(total)))
}
