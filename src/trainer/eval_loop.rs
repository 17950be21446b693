//! The one evaluation loop (Lightning's `_EvaluationLoop` and
//! `_PredictionLoop`): validation inside fit and the sanity check, and the
//! validate / test / predict runs. Eval mode, no grad, the stage's hooks,
//! epoch metrics into the callback metrics and the loggers.
use super::batch_size_of;
use super::context::{AddedPredictions, Stage, StepContext};
use super::hooks::Hook;
use super::metrics::MetricStore;
use super::run::{HookData, Run};
use super::source::BatchSource;
use crate::error::{Error, Result, ResultExt};
use std::collections::BTreeMap;
use tch::Tensor;

/// What an evaluation run gives back.
pub(super) struct Evaluated {
    /// The epoch metrics sent to the loggers: every loader's and the
    /// stage's hooks'.
    pub metrics: BTreeMap<String, f64>,
    /// Lightning's return value of validate / test: per loader, the epoch
    /// values it logged for the loggers, with those the stage's start and
    /// epoch hooks logged (empty when the run was skipped).
    pub results: Vec<BTreeMap<String, f64>>,
    /// For predict, the steps' outputs per source (each batch's, when the
    /// run keeps them).
    pub predictions: Vec<Vec<Prediction>>,
}

/// Whether an evaluation over loaders limited to `limits` batches is
/// skipped (Lightning's `skip`: every loader limited to none, or no
/// loader, as when a limit of 0 asked for none).
fn skipped(limits: &[Option<usize>]) -> bool {
    limits.iter().all(|l| *l == Some(0))
}

/// One predict batch's output: the tensor predict_step returned, and the
/// tensors it added ([`StepContext::add_prediction`]), which make the
/// prediction a tuple, or named ([`StepContext::add_named_prediction`]) a
/// dict; or the whole value it set ([`StepContext::set_prediction`]).
#[derive(Debug)]
pub struct Prediction {
    /// What the step returned (`None`: nothing; always for a dict).
    pub output: Option<Tensor>,
    /// The tensors it added, in order.
    pub added: Vec<Tensor>,
    /// Their names when the prediction is a dict (else empty).
    pub names: Vec<String>,
    /// The whole prediction, when the step set it as a value.
    pub value: Option<crate::nn::Value>,
}

impl Prediction {
    /// The same prediction, sharing the tensors.
    pub fn share(&self) -> Prediction {
        Prediction {
            output: self.output.as_ref().map(Tensor::shallow_clone),
            added: self.added.iter().map(Tensor::shallow_clone).collect(),
            names: self.names.clone(),
            value: self.value.as_ref().map(crate::nn::Value::shallow_clone),
        }
    }

    /// As Lightning's predict_step returned it: None, the tensor, a tuple
    /// (the tensor then the added ones) or a dict of the named ones; the
    /// tensors shared.
    pub fn to_value(&self) -> crate::nn::Value {
        use crate::nn::Value;
        let tensor = |t: &Tensor| Value::Tensor(t.shallow_clone());
        if let Some(v) = &self.value {
            return v.shallow_clone();
        }
        match (&self.output, self.added.is_empty()) {
            (Some(t), true) => tensor(t),
            (None, true) => Value::None,
            (None, false) if !self.names.is_empty() => Value::Dict(
                self.names.iter().map(|n| Value::Str(n.clone())).zip(self.added.iter().map(tensor)).collect(),
            ),
            (output, false) => Value::Tuple(output.iter().chain(&self.added).map(tensor).collect()),
        }
    }
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
/// `dataloader_idx` and their logged names end in `/dataloader_idx_N`. Each
/// batch's step values go to the loggers at the loader's count of batches,
/// the epoch metrics at `log_step` (none when `None`, as in the sanity
/// check). When every loader is limited to no batch nothing runs, no hook
/// either (Lightning's skip). Returns the metrics, the per-loader results
/// and, for predict, the steps' outputs per source.
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
    // Every rank skips or none does (a rank with no batch still meets the
    // others' collectives).
    let skip = skipped(limits);
    let skip = if run.state.world_size > 1 { !run.strategy.any(!skip)? } else { skip };
    if skip {
        let predictions = sources.iter().map(|_| Vec::new()).collect();
        return Ok(Evaluated { metrics: BTreeMap::new(), results: Vec::new(), predictions });
    }
    let h = hooks_of(stage);
    let counted = run.counts_validation(stage);
    if counted {
        run.progress.val_batch.reset_on_run();
    }
    run.model_eval(stage)?;
    run.state.batch_hook_logs.clear();
    run.simple(h.start)?;
    run.simple(h.epoch_start)?;
    let mut store = MetricStore::evaluation();
    let mut outputs = Vec::new();
    let mut ran = Vec::new();
    if run.eval_batches_logged.len() < sources.len() {
        run.eval_batches_logged.resize(sources.len(), 0);
    }
    {
        let _no_grad = tch::no_grad_guard();
        for (d, source) in sources.iter().enumerate() {
            let idx = (sources.len() > 1).then_some(d);
            let limit = limits.get(d).copied().flatten();
            let how = SourceRun { limit, dataloader_idx: idx, keep, log_steps: log_step.is_some() };
            let (predictions, batches) = run_source(run, stage, &h, *source, how, &mut store)?;
            outputs.push(predictions);
            if batches > 0 {
                ran.push(d);
            }
        }
    }
    run.verify_deferred()?;
    if counted {
        // The last batch was fetched (written as Lightning's fetcher has it
        // at the validation's end).
        run.progress.val_batch.is_last_batch = run.progress.val_batch.progress.current.ready > 0;
    }
    let mut metrics = store.end_epoch_synced(&|v, op, g| run.strategy.reduce_in(v, op, g))?;
    // Lightning's return value: a dict at each change of loader and one
    // at the end, so one per loader that gave batches, after a dict of the
    // hooks' values alone when the first of them is not loader 0. Predict
    // logs nothing and returns predictions instead.
    let mut dicts: Vec<Option<usize>> = Vec::new();
    if stage != Stage::Predict {
        if ran.first() != Some(&0) {
            dicts.push(None);
        }
        dicts.extend(ran.iter().map(|d| Some(*d)));
    }
    let mut results: Vec<BTreeMap<String, f64>> = dicts
        .iter()
        .map(|d| {
            let ours = |k: &String| store.loader_of(k).is_none_or(|from| Some(from) == *d);
            metrics.iter().filter(|(k, _)| ours(k)).map(|(k, v)| (k.clone(), *v)).collect()
        })
        .collect();
    run.state.callback_metrics.extend_from(&std::mem::take(&mut store.callback_metrics));
    run.state.progress_metrics.extend_from(&std::mem::take(&mut store.progress_metrics));
    run.state.settle_metrics()?;
    run.simple(h.epoch_end)?;
    // What the start and epoch hooks logged joins every loader's results
    // (Lightning logs them with no dataloader_idx).
    let hooked = std::mem::take(&mut run.state.hook_metrics);
    for r in results.iter_mut() {
        r.extend(hooked.iter().map(|(k, v)| (k.clone(), *v)));
    }
    metrics.extend(hooked);
    if let (Some(step), false) = (log_step, metrics.is_empty()) {
        run.state.logged_metrics.extend_values(metrics.iter().map(|(k, v)| (k.clone(), *v)));
        run.log_metrics(&metrics, step)?;
    }
    run.simple(h.end)?;
    run.model_train(stage)?;
    Ok(Evaluated { metrics, results, predictions: outputs })
}

/// How one source runs: its batch limit, its `dataloader_idx` (with
/// several loaders), whether predict outputs are kept, and whether step
/// values go to the loggers (not in the sanity check).
struct SourceRun {
    limit: Option<usize>,
    dataloader_idx: Option<usize>,
    keep: bool,
    log_steps: bool,
}

/// Lightning's `update_eval_step_metrics` after a batch of loader `d`: its
/// step values (reduced over ranks where logged with sync_dist) go to the
/// logged metrics and, without an epoch, to the loggers at the loader's
/// count of batches so far; with `logging` off (the sanity check) they are
/// dropped.
fn log_batch_values(run: &mut Run, store: &mut MetricStore, d: usize, logging: bool) -> Result<()> {
    if !logging {
        store.take_step_values();
        return Ok(());
    }
    store.sync_step(&|v, op, g| run.strategy.reduce_in(v, op, g))?;
    let mut values = store.take_step_values();
    let step = run.eval_batches_logged[d];
    run.eval_batches_logged[d] += 1;
    // The loggers take this batch's values now: device values are read.
    values.settle()?;
    if values.is_empty() {
        return Ok(());
    }
    run.state.logged_metrics.extend_from(&values);
    run.log_metrics_with(&values, None, step)
}

/// The batches of one source: its steps and batch hooks; returns the
/// predict outputs (none unless `how.keep`) and the number of batches run.
fn run_source(
    run: &mut Run,
    stage: Stage,
    h: &StageHooks,
    source: &dyn BatchSource,
    how: SourceRun,
    store: &mut MetricStore,
) -> Result<(Vec<Prediction>, usize)> {
    let SourceRun { limit, dataloader_idx, keep, log_steps } = how;
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
    let mut count = 0;
    loop {
        let fetch = run.profile_start();
        let Some((i, batch)) = batches.next() else { break };
        run.profile_stop(next, fetch, Default::default());
        if limit.is_some_and(|n| i >= n) {
            break;
        }
        count += 1;
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
        let global_step = run.state.global_step;
        let at = |name: &str| batch_at(name, epoch, global_step, i, dataloader_idx);
        let stepped = super::graphed_eval::eval_step(run, stage, store, &batch, i, dataloader_idx);
        drop(autocast);
        run.profile_stop(step, started, Default::default());
        let (outs, added) = stepped?;
        let out = run.strategy.gather_output(outs)?;
        let added = gather_added(run, added)?;
        if out.is_some() && !added.names.is_empty() {
            return Err(Error::state(format!(
                "{}: it named its predictions (a dict) and returned a tensor too: name that one as well",
                at("predict_step")
            )));
        }
        if out.is_some() && added.value.is_some() {
            return Err(Error::state(format!(
                "{}: it set its whole prediction and returned a tensor too: put that one in the value",
                at("predict_step")
            )));
        }
        if counted {
            run.progress.val_batch.progress.increment_processed();
        }
        let prediction = Prediction { output: out, added: added.tensors, names: added.names, value: added.value };
        let is_prediction = stage == Stage::Predict;
        let data_end =
            HookData { output: prediction.output.as_ref(), prediction: is_prediction.then_some(&prediction), ..data() };
        run.hook(h.batch_end, data_end)?;
        run.drain_batch_hook_logs(store, dataloader_idx, batch_size, false)?;
        if counted {
            run.progress.val_batch.progress.increment_completed();
        }
        if stage != Stage::Predict {
            log_batch_values(run, store, d, log_steps)?;
        }
        // Validation and test outputs go to their batch-end hooks only.
        if keep && stage == Stage::Predict {
            outputs.push(prediction);
        }
    }
    Ok((outputs, count))
}

/// The tensors each chunk's predict step added, gathered position by
/// position as the returned ones are (one chunk: as they are). Chunks that
/// added different numbers, or other names, are a `ShapeMismatch` error.
fn gather_added(run: &Run, mut per_chunk: Vec<AddedPredictions>) -> Result<AddedPredictions> {
    if per_chunk.len() <= 1 {
        return Ok(per_chunk.pop().unwrap_or_default());
    }
    if per_chunk.iter().any(|c| c.value.is_some()) {
        return Err(Error::new(
            crate::error::ErrorCode::Unsupported,
            "predict_step set its whole prediction as a value, which the devices' chunks cannot be gathered from \
             (strategy dp): add tensors instead",
        ));
    }
    let n = per_chunk[0].tensors.len();
    if per_chunk.iter().any(|c| c.tensors.len() != n || c.names != per_chunk[0].names) {
        let counts: Vec<usize> = per_chunk.iter().map(|c| c.tensors.len()).collect();
        return Err(Error::shape(format!(
            "predict_step added different predictions on each device: {counts:?} tensors, names {:?}",
            per_chunk.iter().map(|c| c.names.clone()).collect::<Vec<_>>()
        )));
    }
    let mut gathered = Vec::with_capacity(n);
    for j in 0..n {
        let parts = per_chunk.iter().map(|c| Some(c.tensors[j].shallow_clone())).collect();
        if let Some(t) = run.strategy.gather_output(parts)? {
            gathered.push(t);
        }
    }
    let names = std::mem::take(&mut per_chunk[0].names);
    Ok(AddedPredictions { tensors: gathered, names, value: None })
}

/// What a step of the module gave: each chunk's output and, for predict,
/// the tensors each chunk added.
pub(super) type StepOutputs = (Vec<Option<Tensor>>, Vec<AddedPredictions>);

/// The module's step of `stage` on batch `i` (on each chunk under DP),
/// logging into `store`.
pub(super) fn module_step(
    run: &mut Run,
    stage: Stage,
    store: &mut MetricStore,
    batch: &[Tensor],
    i: usize,
    dataloader_idx: Option<usize>,
) -> Result<StepOutputs> {
    let (module, epoch, global_step) = (&mut *run.module, run.state.epoch, run.state.global_step);
    let at = || batch_at(stage.fx_name(), epoch, global_step, i, dataloader_idx);
    store.begin_split();
    let mut added: Vec<AddedPredictions> = Vec::new();
    let outs = run.strategy.split(batch, &mut |chunk| {
        let mut ctx = StepContext {
            stage,
            epoch,
            global_step,
            batch_idx: i as i64,
            batch_size: batch_size_of(chunk),
            dataloader_idx,
            metrics: &mut *store,
            manual: None,
            extra_outputs: Default::default(),
        };
        let out = match stage {
            Stage::Test => module.test_step_output(&mut ctx, chunk),
            Stage::Predict => module.predict_step(&mut ctx, chunk),
            _ => module.validation_step_output(&mut ctx, chunk),
        }
        .map_err(|e| e.context(at()));
        // Only predictions carry added tensors (validation and test
        // batches would gather nothing, once per batch).
        if stage == Stage::Predict {
            added.push(std::mem::take(&mut ctx.extra_outputs));
        }
        out
    });
    store.end_split();
    Ok((outs?, added))
}

/// Where `name` (a step function) ran on batch `i`, for error messages.
pub(super) fn batch_at(name: &str, epoch: i64, global_step: i64, i: usize, dataloader_idx: Option<usize>) -> String {
    match dataloader_idx {
        Some(d) => format!("{name} (epoch {epoch}, global step {global_step}, batch {i}, dataloader_idx {d})"),
        None => format!("{name} (epoch {epoch}, global step {global_step}, batch {i})"),
    }
}
