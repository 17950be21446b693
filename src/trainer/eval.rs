//! The evaluation entry points: validate, test, predict, with their hooks.
use super::context::{Stage, StepContext};
use super::hooks::{Callback, Hook};
use super::metrics::MetricStore;
use super::run::{HookData, Run};
use super::source::BatchSource;
use super::{batch_size_of, progress, set_mode, LightningModule, Trainer};
use crate::error::{Error, Result, ResultExt};
use crate::loggers::Logger;
use std::collections::BTreeMap;
use tch::Tensor;

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

impl Trainer {
    /// Runs the validation loop once (Lightning's `trainer.validate`);
    /// `ckpt_path` first loads the weights of a checkpoint ("best", "last"
    /// or a path).
    pub fn validate(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        ckpt_path: Option<&str>,
    ) -> Result<BTreeMap<String, f64>> {
        if !module.has_validation_step() {
            return Err(Error::state("validate: the module has no validation_step"));
        }
        self.evaluate(Stage::Validate, module, source, ckpt_path).map(|(m, _)| m)
    }

    /// Runs the test loop once (Lightning's `trainer.test`).
    pub fn test(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        ckpt_path: Option<&str>,
    ) -> Result<BTreeMap<String, f64>> {
        if !module.has_test_step() {
            return Err(Error::state("test: the module has no test_step"));
        }
        self.evaluate(Stage::Test, module, source, ckpt_path).map(|(m, _)| m)
    }

    /// Runs `predict_step` over every batch and concatenates the outputs
    /// along dimension 0 (`None` when no step returned anything).
    pub fn predict(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        ckpt_path: Option<&str>,
    ) -> Result<Option<Tensor>> {
        let (_, outputs) = self.evaluate(Stage::Predict, module, source, ckpt_path)?;
        if outputs.is_empty() {
            return Ok(None);
        }
        let first = outputs[0].size();
        for (i, o) in outputs.iter().enumerate() {
            let s = o.size();
            if s.is_empty() || first.is_empty() || s[1..] != first[1..] {
                return Err(Error::shape(format!(
                    "predict: outputs cannot be concatenated: batch 0 gave shape {first:?}, batch {i} gave {s:?}"
                )));
            }
        }
        Ok(Some(Tensor::f_cat(&outputs, 0)?))
    }

    fn evaluate(
        &mut self,
        stage: Stage,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        ckpt_path: Option<&str>,
    ) -> Result<(BTreeMap<String, f64>, Vec<Tensor>)> {
        let _settings = super::run_settings::RunSettings::enter(&self.opts)?;
        let weights = match ckpt_path {
            Some(p) => Some(self.resolve_ckpt_path(p)?),
            None => None,
        };
        if let Some(s) = self.opts.seed {
            crate::seed_everything(s);
        }
        let (placement, mut strategy) = super::strategy::setup(&self.opts)?;
        placement.prepare_model(module)?;
        if let Err(e) = strategy.setup_model(module, false) {
            let _ = placement.teardown();
            return Err(strategy.fail(e));
        }
        let global_zero = strategy.is_global_zero();
        let shard = strategy.shard(source);
        let source = shard.get();
        let (epoch, step) = (self.state.epoch, self.state.global_step);
        self.begin_state();
        self.state.epoch = epoch;
        self.state.global_step = step;
        self.state.global_rank = strategy.global_rank();
        self.state.world_size = strategy.world_size();
        self.defaults = self.default_callbacks(false, global_zero)?;
        let opts = self.opts.clone();
        let callbacks: Vec<&mut Box<dyn Callback>> =
            self.defaults.iter_mut().chain(self.callbacks.iter_mut()).collect();
        let loggers: Vec<&mut Box<dyn Logger>> =
            if global_zero { self.extra_loggers.iter_mut().collect() } else { Vec::new() };
        let name = match stage {
            Stage::Test => "test",
            Stage::Predict => "predict",
            _ => "validate",
        };
        let mut run = Run {
            stage: name,
            state: &mut self.state,
            callbacks,
            module,
            optimizers: Vec::new(),
            loggers,
            batches_in_epoch: 0,
            epoch_finished: false,
            placement,
            strategy,
        };
        let result = eval_run(&mut run, &opts, stage, source, weights.as_deref()).map_err(|e| run.strategy.fail(e));
        match &result {
            Ok((metrics, _)) => {
                if opts.enable_progress_bar && stage != Stage::Predict && global_zero {
                    progress::eval_line(name, metrics);
                }
                for l in run.loggers.iter_mut() {
                    l.finalize("success").ctx(format!("{} logger", l.name()))?;
                }
            }
            Err(e) => {
                run.exception(e);
                let _ = run.placement.teardown();
            }
        }
        result
    }
}

fn eval_run(
    run: &mut Run,
    opts: &super::TrainerOptions,
    stage: Stage,
    source: &dyn BatchSource,
    weights: Option<&std::path::Path>,
) -> Result<(BTreeMap<String, f64>, Vec<Tensor>)> {
    run.simple(Hook::Setup)?;
    if let Some(path) = weights {
        let ck = crate::checkpoint::Checkpoint::load(path)?;
        let model = run.module.model().ok_or_else(|| Error::state("ckpt_path needs a LightningModule with a model"))?;
        model
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .load_state_dict(&ck.state_dict, true)
            .ctx(format!("loading {}", path.display()))?;
    }
    let limit = match stage {
        Stage::Test => opts.effective_limit(opts.limit_test_batches),
        Stage::Predict => opts.effective_limit(opts.limit_predict_batches),
        _ => opts.effective_limit(opts.limit_val_batches),
    }
    .apply(source.num_batches());
    let h = hooks_of(stage);
    set_mode(run.module, false)?;
    run.simple(h.start)?;
    run.simple(h.epoch_start)?;
    let mut store = MetricStore::default();
    let mut outputs = Vec::new();
    let epoch = run.state.epoch;
    {
        let _no_grad = tch::no_grad_guard();
        for (i, batch) in source.batches(epoch as u64)?.enumerate() {
            if limit.is_some_and(|n| i >= n) {
                break;
            }
            let batch = run.placement.prepare_batch(batch.ctx(format!("loading {} batch {i}", stage.name()))?)?;
            run.hook(h.batch_start, HookData { batch_idx: i as i64, batch: Some(&batch), ..Default::default() })?;
            let at = |name: &str| format!("{name} (batch {i})");
            let autocast = run.placement.forward_context()?;
            let (module, global_step) = (&mut *run.module, run.state.global_step);
            store.begin_split();
            let outs = run.strategy.split(&batch, &mut |chunk| {
                let mut ctx = StepContext {
                    stage,
                    epoch,
                    global_step,
                    batch_idx: i as i64,
                    batch_size: batch_size_of(chunk),
                    metrics: &mut store,
                };
                match stage {
                    Stage::Test => {
                        module.test_step(&mut ctx, chunk).map(|_| None).map_err(|e| e.context(at("test_step")))
                    }
                    Stage::Predict => module.predict_step(&mut ctx, chunk).map_err(|e| e.context(at("predict_step"))),
                    _ => module
                        .validation_step(&mut ctx, chunk)
                        .map(|_| None)
                        .map_err(|e| e.context(at("validation_step"))),
                }
            });
            store.end_split();
            drop(autocast);
            let out = run.strategy.gather_output(outs?)?;
            run.hook(
                h.batch_end,
                HookData { batch_idx: i as i64, batch: Some(&batch), output: out.as_ref(), ..Default::default() },
            )?;
            if let Some(o) = out {
                outputs.push(o);
            }
        }
    }
    let metrics = store.end_epoch_synced(&|v| run.strategy.mean(v))?;
    run.state.callback_metrics.extend(store.callback_metrics);
    run.state.progress_metrics.extend(store.progress_metrics);
    run.simple(h.epoch_end)?;
    if !metrics.is_empty() {
        run.log_metrics(&metrics, run.state.global_step)?;
    }
    run.simple(h.end)?;
    run.simple(Hook::Teardown)?;
    run.placement.teardown()?;
    Ok((metrics, outputs))
}
