//! The evaluation entry points: validate, test, predict (their loop is
//! `eval_loop`).
use super::context::Stage;
use super::eval_loop::{Evaluated, Prediction};
use super::hooks::{Callback, Hook};
use super::run::Run;
use super::source::BatchSource;
use super::{progress, LightningModule, Trainer};
use crate::error::{Error, Result, ResultExt};
use crate::loggers::Logger;
use std::collections::BTreeMap;
use tch::Tensor;

/// What validate and test return, as Lightning's `trainer.validate` /
/// `trainer.test`: one dict per loader of the epoch values logged for the
/// loggers (with several loaders, each loader's own, names ending in
/// `/dataloader_idx_N`) and those the stage's start and epoch hooks logged;
/// empty when every loader's limit is 0.
pub type EvalResults = Vec<BTreeMap<String, f64>>;

impl Trainer {
    /// Runs the validation loop once (Lightning's `trainer.validate`);
    /// `ckpt_path` first loads the weights of a checkpoint ("best", "last"
    /// or a path).
    pub fn validate(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        ckpt_path: Option<&str>,
    ) -> Result<EvalResults> {
        self.validate_loaders(module, &[source], ckpt_path)
    }

    /// [`Trainer::validate`] over each of `sources` in turn; with several,
    /// logged names end in `/dataloader_idx_N`.
    pub fn validate_loaders(
        &mut self,
        module: &mut dyn LightningModule,
        sources: &[&dyn BatchSource],
        ckpt_path: Option<&str>,
    ) -> Result<EvalResults> {
        if !module.has_validation_step() {
            return Err(Error::state("validate: the module has no validation_step"));
        }
        self.evaluate(Stage::Validate, module, Some(sources), ckpt_path, false).map(|e| e.results)
    }

    /// Runs the test loop once (Lightning's `trainer.test`).
    pub fn test(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        ckpt_path: Option<&str>,
    ) -> Result<EvalResults> {
        self.test_loaders(module, &[source], ckpt_path)
    }

    /// [`Trainer::test`] over each of `sources` in turn; with several,
    /// logged names end in `/dataloader_idx_N`.
    pub fn test_loaders(
        &mut self,
        module: &mut dyn LightningModule,
        sources: &[&dyn BatchSource],
        ckpt_path: Option<&str>,
    ) -> Result<EvalResults> {
        if !module.has_test_step() {
            return Err(Error::state("test: the module has no test_step"));
        }
        self.evaluate(Stage::Test, module, Some(sources), ckpt_path, false).map(|e| e.results)
    }

    /// Runs `predict_step` over every batch and concatenates the outputs
    /// along dimension 0 (`None` when no step returned anything).
    pub fn predict(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        ckpt_path: Option<&str>,
    ) -> Result<Option<Tensor>> {
        Ok(self.predict_loaders(module, &[source], ckpt_path)?.pop().flatten())
    }

    /// [`Trainer::predict`] over each of `sources` in turn: one
    /// concatenated output per source (Lightning's list per dataloader).
    pub fn predict_loaders(
        &mut self,
        module: &mut dyn LightningModule,
        sources: &[&dyn BatchSource],
        ckpt_path: Option<&str>,
    ) -> Result<Vec<Option<Tensor>>> {
        let evaluated = self.evaluate(Stage::Predict, module, Some(sources), ckpt_path, true)?;
        concat_predictions(evaluated.predictions)
    }

    /// Lightning's `trainer.predict`: each source's batch predictions in
    /// order (a batch that returned nothing included), or `None` with
    /// `return_predictions` false, when none are kept.
    pub fn predict_batches(
        &mut self,
        module: &mut dyn LightningModule,
        sources: &[&dyn BatchSource],
        ckpt_path: Option<&str>,
        return_predictions: bool,
    ) -> Result<Option<Vec<Vec<Prediction>>>> {
        let evaluated = self.evaluate(Stage::Predict, module, Some(sources), ckpt_path, return_predictions)?;
        Ok(return_predictions.then_some(evaluated.predictions))
    }

    /// [`Trainer::validate_loaders`] over the loaders of the module's
    /// `val_dataloader` (Lightning's `trainer.validate(model)`), called
    /// after the setup hooks.
    pub fn validate_from_module(
        &mut self,
        module: &mut dyn LightningModule,
        ckpt_path: Option<&str>,
    ) -> Result<EvalResults> {
        if !module.has_validation_step() {
            return Err(Error::state("validate: the module has no validation_step"));
        }
        if !module.has_val_dataloader() {
            return Err(Error::state("validate has no data: pass a loader or give the module a val_dataloader"));
        }
        self.evaluate(Stage::Validate, module, None, ckpt_path, false).map(|e| e.results)
    }

    /// [`Trainer::test_loaders`] over the loaders of the module's
    /// `test_dataloader` (Lightning's `trainer.test(model)`).
    pub fn test_from_module(
        &mut self,
        module: &mut dyn LightningModule,
        ckpt_path: Option<&str>,
    ) -> Result<EvalResults> {
        if !module.has_test_step() {
            return Err(Error::state("test: the module has no test_step"));
        }
        if !module.has_test_dataloader() {
            return Err(Error::state("test has no data: pass a loader or give the module a test_dataloader"));
        }
        self.evaluate(Stage::Test, module, None, ckpt_path, false).map(|e| e.results)
    }

    /// [`Trainer::predict_loaders`] over the loaders of the module's
    /// `predict_dataloader` (Lightning's `trainer.predict(model)`).
    pub fn predict_from_module(
        &mut self,
        module: &mut dyn LightningModule,
        ckpt_path: Option<&str>,
    ) -> Result<Vec<Option<Tensor>>> {
        if !module.has_predict_dataloader() {
            return Err(Error::state("predict has no data: pass a loader or give the module a predict_dataloader"));
        }
        let evaluated = self.evaluate(Stage::Predict, module, None, ckpt_path, true)?;
        concat_predictions(evaluated.predictions)
    }

    fn evaluate(
        &mut self,
        stage: Stage,
        module: &mut dyn LightningModule,
        sources: Option<&[&dyn BatchSource]>,
        ckpt_path: Option<&str>,
        keep: bool,
    ) -> Result<Evaluated> {
        // A run that fails leaves no results of an earlier one.
        self.state.eval_results.clear();
        if sources.is_some_and(|s| s.is_empty()) {
            return Err(Error::invalid(format!("{}: no loader", stage.name())));
        }
        let weights = match ckpt_path {
            Some(p) => Some(self.resolve_ckpt_path(p)?),
            None => None,
        };
        let writer = self.checkpoint_writer();
        let (_settings, strategy) = self.start_run(module, false)?;
        let global_zero = strategy.is_global_zero();
        let shards: Vec<_> =
            sources.unwrap_or_default().iter().map(|s| strategy.shard(*s, self.opts.use_distributed_sampler)).collect();
        let sources: Option<Vec<&dyn BatchSource>> = sources.map(|_| shards.iter().map(|s| s.get()).collect());
        // What a fit leaves stays for the runs after it, as in Lightning:
        // its progress, its log folder (begin_state keeps it) and its
        // default ModelCheckpoint (`best_model_path` for ckpt_path="best").
        let (epoch, step) = (self.state.epoch, self.state.global_step);
        let batches_stepped = self.state.batches_stepped;
        let val_loader_batches = std::mem::take(&mut self.state.val_loader_batches);
        let test_loader_batches = std::mem::take(&mut self.state.test_loader_batches);
        let predict_loader_batches = std::mem::take(&mut self.state.predict_loader_batches);
        let sanity_loader_batches = std::mem::take(&mut self.state.sanity_loader_batches);
        self.begin_state();
        self.state.val_loader_batches = val_loader_batches;
        self.state.test_loader_batches = test_loader_batches;
        self.state.predict_loader_batches = predict_loader_batches;
        self.state.sanity_loader_batches = sanity_loader_batches;
        self.state.num_devices = strategy.num_devices();
        self.state.node_rank = strategy.node_rank();
        self.state.epoch = epoch;
        self.state.global_step = step;
        self.state.batches_stepped = batches_stepped;
        self.state.log_step = batches_stepped;
        self.state.global_rank = strategy.global_rank();
        self.state.world_size = strategy.world_size();
        self.state.device_sync = strategy.device_sync();
        self.prepare_loggers(global_zero)?;
        let kept: Vec<Box<dyn Callback>> = std::mem::take(&mut self.defaults)
            .into_iter()
            .filter(|c| super::fit_loop::is_checkpoint(c.as_ref()))
            .collect();
        self.defaults = self.default_callbacks(false, global_zero, None)?;
        self.defaults.extend(kept);
        let opts = self.opts.clone();
        let callbacks: Vec<&mut Box<dyn Callback>> =
            self.defaults.iter_mut().chain(self.callbacks.iter_mut()).collect();
        let loggers: Vec<&mut Box<dyn Logger>> = if global_zero && opts.fast_dev_run == 0 {
            self.file_loggers.iter_mut().chain(self.extra_loggers.iter_mut()).collect()
        } else {
            Vec::new()
        };
        let name = match stage {
            Stage::Test => "test",
            Stage::Predict => "predict",
            _ => "validate",
        };
        let mut run = Run::new(name, &mut self.state, callbacks, module, loggers, &opts, strategy, writer)?;
        let result = eval_run(&mut run, &opts, stage, sources.as_deref(), weights.as_deref(), keep)
            .map_err(|e| run.strategy.fail(e));
        let (report, traced) = run.finish_profile();
        self.profiler_report = report;
        let result = result.and_then(|r| traced.map(|()| r));
        match &result {
            Ok(evaluated) => {
                if opts.enable_progress_bar && stage != Stage::Predict && global_zero {
                    progress::eval_line(name, &evaluated.metrics);
                }
                for l in run.loggers.iter_mut() {
                    l.finalize("success").ctx(format!("{} logger", l.name()))?;
                }
                run.state.eval_results = evaluated.results.clone();
            }
            Err(e) => run.exception(e),
        }
        result.map_err(|e| run.strategy.teardown_after(&*run.module, e))
    }
}

fn eval_run(
    run: &mut Run,
    opts: &super::TrainerOptions,
    stage: Stage,
    sources: Option<&[&dyn BatchSource]>,
    weights: Option<&std::path::Path>,
    keep: bool,
) -> Result<Evaluated> {
    super::datamodule::prepare_and_setup(run)?;
    run.simple(Hook::Setup)?;
    run.configure_model(false)?;
    if let Some(path) = weights {
        let ck = run.read_checkpoint(path, true)?;
        let model = run.module.model().ok_or_else(|| Error::state("ckpt_path needs a LightningModule with a model"))?;
        run.ready_params_for(&ck).ctx("preparing the parameters to load a checkpoint")?;
        let loaded = {
            let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
            let names = m.state_dict().into_iter().map(|(k, _)| k).collect();
            m.load_state_dict(&ck.weights_for(&names, &run.checkpoint_prefix), true)
                .ctx(format!("loading {}", path.display()))
        };
        let back = run.strategy.reshard_params(&mut [], loaded.is_ok());
        loaded.and(back)?;
        super::datamodule::restore(&mut *run.module, &ck).ctx(format!("loading {}", path.display()))?;
    }
    // Without loaders, the module's dataloader hook gives them now, after
    // the setup hooks (Lightning's evaluation loop `setup_data`).
    let limit = match stage {
        Stage::Test => opts.effective_limit(opts.limit_test_batches),
        Stage::Predict => opts.effective_limit(opts.limit_predict_batches),
        _ => opts.effective_limit(opts.limit_val_batches),
    };
    // A limit of 0 skips the loop before any loader is asked for
    // (Lightning's `setup_data`).
    let owned = match sources {
        Some(_) => Vec::new(),
        None if limit.is_zero() => Vec::new(),
        None => hook_sources(run, opts, stage)?,
    };
    let hooked: Vec<&dyn BatchSource> = owned.iter().map(|b| &**b as &dyn BatchSource).collect();
    let sources: &[&dyn BatchSource] = match sources {
        Some(s) => s,
        None => &hooked,
    };
    let limits: Vec<Option<usize>> = sources.iter().map(|s| limit.apply(s.num_batches())).collect();
    match stage {
        Stage::Test => run.state.test_loader_batches = limits.clone(),
        Stage::Predict => run.state.predict_loader_batches = limits.clone(),
        _ => run.state.val_loader_batches = limits.clone(),
    }
    let step = run.state.batches_stepped;
    // Checks of device values are read with the run's values and at its
    // end, failed or not (crate::tensor::deferred).
    let deferred = crate::tensor::deferred::DeferredScope::enter(run.state.global_step);
    let result = super::eval_loop::evaluate_keeping(run, stage, sources, &limits, Some(step), keep);
    let result = deferred.finish(run.state.global_step, result)?;
    super::datamodule::teardown(run)?;
    run.simple(Hook::Teardown)?;
    run.strategy.teardown(&*run.module)?;
    Ok(result)
}

/// The loaders of the module's dataloader hook for `stage` (for the
/// trainer's current epoch), sharded for this rank; at least one.
fn hook_sources(run: &mut Run, opts: &super::TrainerOptions, stage: Stage) -> Result<Vec<Box<dyn BatchSource + Send>>> {
    let epoch = run.state.epoch;
    let (hook, loaders) = match stage {
        Stage::Test => ("test_dataloader", run.module.test_dataloader(epoch)),
        Stage::Predict => ("predict_dataloader", run.module.predict_dataloader(epoch)),
        _ => ("val_dataloader", run.module.val_dataloader(epoch)),
    };
    let loaders = loaders.ctx(hook)?;
    if loaders.is_empty() || loaders.len() > super::LOADERS_MAX {
        return Err(Error::invalid(format!(
            "{}: {hook} gave {} loaders; give 1 to {}",
            stage.name(),
            loaders.len(),
            super::LOADERS_MAX
        )));
    }
    let sampler = opts.use_distributed_sampler;
    Ok(loaders.into_iter().map(|l| run.strategy.shard_owned(l, sampler)).collect())
}

/// Each source's batch predictions concatenated along dimension 0 (the
/// batches that returned nothing left out). A dict prediction has no
/// tensor to concatenate: refused, naming the call that returns it.
fn concat_predictions(per_source: Vec<Vec<Prediction>>) -> Result<Vec<Option<Tensor>>> {
    per_source
        .into_iter()
        .enumerate()
        .map(|(d, batches)| {
            if batches.iter().any(|p| !p.names.is_empty() || p.value.is_some()) {
                return Err(crate::error::Error::new(
                    crate::error::ErrorCode::Unsupported,
                    "predict_step named its predictions (a dict) or set them as a value, which predict cannot \
                     concatenate: take them per batch with predict_batches",
                ));
            }
            let outputs: Vec<Tensor> = batches.into_iter().filter_map(|p| p.output).collect();
            concat_outputs(d, &outputs)
        })
        .collect()
}

/// Concatenates one source's predict outputs along dimension 0.
fn concat_outputs(source: usize, outputs: &[Tensor]) -> Result<Option<Tensor>> {
    if outputs.is_empty() {
        return Ok(None);
    }
    let first = outputs[0].size();
    for (i, o) in outputs.iter().enumerate() {
        let s = o.size();
        if s.is_empty() || first.is_empty() || s[1..] != first[1..] {
            return Err(Error::shape(format!(
                "predict: outputs of loader {source} cannot be concatenated: batch 0 gave shape {first:?}, \
                 batch {i} gave {s:?}"
            )));
        }
    }
    Ok(Some(Tensor::f_cat(outputs, 0)?))
}
