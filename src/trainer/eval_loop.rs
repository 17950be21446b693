//! The one evaluation loop (Lightning's `_EvaluationLoop` and
//! `_PredictionLoop`): validation inside fit and the sanity check, and the
//! validate / test / predict runs. Eval mode, no grad, the stage's hooks,
//! epoch metrics into the callback metrics and the loggers.
use super::batch_size_of;
use super::context::{Stage, StepContext};
use super::hooks::Hook;
use super::metrics::MetricStore;
use super::run::{HookData, Run};
use super::source::BatchSource;
use crate::error::{Result, ResultExt};
use std::collections::BTreeMap;
use tch::Tensor;

/// The epoch metrics of an evaluation run and, for predict, the steps'
/// outputs per source (each batch's, when the run keeps them).
pub(super) type Evaluated = (BTreeMap<String, f64>, Vec<Vec<Prediction>>);

/// One predict batch's output: the tensor predict_step returned, and the
/// tensors it added ([`StepContext::add_prediction`]), which make the
/// prediction a tuple.
#[derive(Debug)]
pub struct Prediction {
    /// What the step returned (`None`: nothing).
    pub output: Option<Tensor>,
    /// The tensors it added, in order.
    pub added: Vec<Tensor>,
}

/// Hooks of one evaluation stage.
struct StageHooks {
    start: Hook,
    epoch_start: Hook,
    batch_start: Hook,
    batch_end: Hook,
    epoch_end: Hook,
    end: Hook,
}

fn hooks_of(stage: Stage) -> StageHooks {
    use Hook::*;
    match stage {
        Stage::Test => StageHooks {
            start: TestStart,
            epoch_start: TestEpochStart,
            batch_start: TestBatchStart,
            batch_end: TestBatchEnd,
            epoch_end: TestEpochEnd,
            end: TestEnd,
        },
        Stage::Predict => StageHooks {
            start: PredictStart,
            epoch_start: PredictEpochStart,
            batch_start: PredictBatchStart,
            batch_end: PredictBatchEnd,
            epoch_end: PredictEpochEnd,
            end: PredictEnd,
        },
        _ => StageHooks {
            start: ValidationStart,
            epoch_start: ValidationEpochStart,
            batch_start: ValidationBatchStart,
            batch_end: ValidationBatchEnd,
            epoch_end: ValidationEpochEnd,
            end: ValidationEnd,
        },
    }
}

/// Runs `stage` (validate, test or predict) over each of `sources` in turn
/// (Lightning's sequential mode for several loaders), at most `limits[i]`
/// batches of source i. With several sources the steps see their
/// `dataloader_idx` and their logged names end in `/dataloader_idx_N`. The
/// epoch metrics go to the loggers at `log_step` (none when `None`, as in
/// the sanity check). Returns the epoch metrics and, for predict, the
/// steps' outputs per source.
pub(super) fn evaluate(
    run: &mut Run,
    stage: Stage,
    sources: &[&dyn BatchSource],
    limits: &[Option<usize>],
    log_step: Option<i64>,
) -> Result<Evaluated> {
    evaluate_keeping(run, stage, sources, limits, log_step, true)
}

/// [`evaluate`]; `keep` false drops the predict outputs as they are made
/// (Lightning's `return_predictions=False`).
pub(super) fn evaluate_keeping(
    run: &mut Run,
    stage: Stage,
    sources: &[&dyn BatchSource],
    limits: &[Option<usize>],
    log_step: Option<i64>,
    keep: bool,
) -> Result<Evaluated> {
    let h = hooks_of(stage);
    let counted = run.counts_validation(stage);
    if counted {
        run.progress.val_batch.reset_on_run();
    }
    run.model_eval(stage)?;
    run.state.batch_hook_logs.clear();
    run.simple(h.start)?;
    run.simple(h.epoch_start)?;
    let mut store = MetricStore::default();
    let mut outputs = Vec::new();
    {
        let _no_grad = tch::no_grad_guard();
        for (d, source) in sources.iter().enumerate() {
            let idx = (sources.len() > 1).then_some(d);
            let limit = limits.get(d).copied().flatten();
            outputs.push(run_source(run, stage, &h, *source, limit, idx, &mut store, keep)?);
        }
    }
    if counted {
        // The last batch was fetched (written as Lightning's fetcher has it
        // at the validation's end).
        run.progress.val_batch.is_last_batch = run.progress.val_batch.progress.current.ready > 0;
    }
    let mut metrics = store.end_epoch_synced(&|v, op, g| run.strategy.reduce_in(v, op, g))?;
    run.state.callback_metrics.extend(store.callback_metrics);
    run.state.progress_metrics.extend(store.progress_metrics);
    run.simple(h.epoch_end)?;
    metrics.extend(std::mem::take(&mut run.state.hook_metrics));
    if let (Some(step), false) = (log_step, metrics.is_empty()) {
        run.state.logged_metrics.extend(metrics.iter().map(|(k, v)| (k.clone(), *v)));
        run.log_metrics(&metrics, step)?;
    }
    run.simple(h.end)?;
    run.model_train(stage)?;
    Ok((metrics, outputs))
}

/// The batches of one source: its steps and batch hooks; returns the
/// predict outputs (none unless `keep`).
#[allow(clippy::too_many_arguments)]
fn run_source(
    run: &mut Run,
    stage: Stage,
    h: &StageHooks,
    source: &dyn BatchSource,
    limit: Option<usize>,
    dataloader_idx: Option<usize>,
    store: &mut MetricStore,
    keep: bool,
) -> Result<Vec<Prediction>> {
    let epoch = run.state.epoch;
    let d = dataloader_idx.unwrap_or(0);
    let mut outputs = Vec::new();
    // Lightning's action names.
    let (next, step) = match stage {
        Stage::Test => ("[_EvaluationLoop].test_next", "[Strategy].test_step"),
        Stage::Predict => ("[_PredictionLoop].predict_next", "[Strategy].predict_step"),
        _ => ("[_EvaluationLoop].val_next", "[Strategy].validation_step"),
    };
    // The samples' dataset indices of each batch, for the callbacks that
    // ask (Lightning's `current_batch_indices`, the prediction writer's).
    let wanted = stage == Stage::Predict && run.callbacks.iter().any(|c| c.wants_batch_indices());
    let index_of = if wanted { source.sample_indices(epoch as u64) } else { None };
    let mut batches = source.batches(epoch as u64)?.enumerate();
    loop {
        let fetch = run.profile_start();
        let Some((i, batch)) = batches.next() else { break };
        run.profile_stop(next, fetch, Default::default());
        if limit.is_some_and(|n| i >= n) {
            break;
        }
        let what = match dataloader_idx {
            Some(d) => format!("loading {} batch {i} of loader {d}", stage.name()),
            None => format!("loading {} batch {i}", stage.name()),
        };
        let batch = run.transfer_batch(batch.ctx(what)?, i as i64, d)?;
        let indices = index_of.as_ref().map(|of| of(i));
        let data = || HookData {
            batch_idx: i as i64,
            dataloader_idx: d,
            batch: Some(&batch),
            batch_indices: indices.as_deref(),
            ..Default::default()
        };
        let counted = run.counts_validation(stage);
        if counted {
            run.progress.val_batch.progress.increment_ready();
        }
        run.hook(h.batch_start, data())?;
        let batch_size = batch_size_of(&batch);
        run.drain_batch_hook_logs(store, dataloader_idx, batch_size, false)?;
        if counted {
            run.progress.val_batch.progress.increment_started();
        }
        // Inside fit, through the DDP wrapper as Lightning's validation.
        run.strategy.eval_forward()?;
        let autocast = run.strategy.forward_context()?;
        let started = run.profile_start();
        let (module, global_step) = (&mut *run.module, run.state.global_step);
        let at = |name: &str| match dataloader_idx {
            Some(d) => format!("{name} (epoch {epoch}, global step {global_step}, batch {i}, dataloader_idx {d})"),
            None => format!("{name} (epoch {epoch}, global step {global_step}, batch {i})"),
        };
        store.begin_split();
        let mut added: Vec<Vec<Tensor>> = Vec::new();
        let outs = run.strategy.split(&batch, &mut |chunk| {
            let mut ctx = StepContext {
                stage,
                epoch,
                global_step,
                batch_idx: i as i64,
                batch_size: batch_size_of(chunk),
                dataloader_idx,
                metrics: &mut *store,
                manual: None,
                extra_outputs: Vec::new(),
            };
            let out = match stage {
                Stage::Test => module.test_step_output(&mut ctx, chunk).map_err(|e| e.context(at("test_step"))),
                Stage::Predict => module.predict_step(&mut ctx, chunk).map_err(|e| e.context(at("predict_step"))),
                _ => module.validation_step_output(&mut ctx, chunk).map_err(|e| e.context(at("validation_step"))),
            };
            // Only predictions carry added tensors (validation and test
            // batches would gather nothing, once per batch).
            if stage == Stage::Predict {
                added.push(std::mem::take(&mut ctx.extra_outputs));
            }
            out
        });
        store.end_split();
        drop(autocast);
        run.profile_stop(step, started, Default::default());
        let out = run.strategy.gather_output(outs?)?;
        let added = gather_added(run, added)?;
        if counted {
            run.progress.val_batch.progress.increment_processed();
        }
        run.hook(h.batch_end, HookData { output: out.as_ref(), ..data() })?;
        run.drain_batch_hook_logs(store, dataloader_idx, batch_size, false)?;
        if counted {
            run.progress.val_batch.progress.increment_completed();
        }
        // Validation and test outputs go to their batch-end hooks only.
        if keep && stage == Stage::Predict {
            outputs.push(Prediction { output: out, added });
        }
    }
    Ok(outputs)
}

/// The tensors each chunk's predict step added, gathered position by
/// position as the returned ones are (one chunk: as they are). Chunks that
/// added different numbers are a `ShapeMismatch` error.
fn gather_added(run: &Run, mut per_chunk: Vec<Vec<Tensor>>) -> Result<Vec<Tensor>> {
    if per_chunk.len() <= 1 {
        return Ok(per_chunk.pop().unwrap_or_default());
    }
    let n = per_chunk[0].len();
    if per_chunk.iter().any(|c| c.len() != n) {
        let counts: Vec<usize> = per_chunk.iter().map(Vec::len).collect();
        return Err(crate::error::Error::shape(format!(
            "predict_step added a different number of predictions on each device: {counts:?}"
        )));
    }
    let mut gathered = Vec::with_capacity(n);
    for j in 0..n {
        let parts = per_chunk.iter().map(|c| Some(c[j].shallow_clone())).collect();
        if let Some(t) = run.strategy.gather_output(parts)? {
            gathered.push(t);
        }
    }
    Ok(gathered)
}
