//! The evaluation loops: validate, test, predict.
use super::context::{Stage, StepContext};
use super::metrics::MetricStore;
use super::source::BatchSource;
use super::{batch_size_of, progress, set_mode, LightningModule, Trainer};
use crate::error::{Error, Result, ResultExt};
use std::collections::BTreeMap;
use tch::Tensor;

impl Trainer {
    /// Runs `stage`'s step over `source` in eval mode without gradients and
    /// returns the epoch-level metrics. Used by fit's validation too.
    pub(crate) fn run_eval(
        &mut self,
        stage: Stage,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
        epoch: i64,
    ) -> Result<(BTreeMap<String, f64>, usize)> {
        let limit = match stage {
            Stage::Test => self.opts.limit_test_batches,
            _ => self.opts.limit_val_batches,
        }
        .apply(source.num_batches());
        let mut store = MetricStore::default();
        set_mode(module, false)?;
        let _no_grad = tch::no_grad_guard();
        let mut ran = 0;
        for (i, batch) in source.batches(epoch as u64)?.enumerate() {
            if limit.is_some_and(|n| i >= n) {
                break;
            }
            let batch = batch.ctx(format!("loading {} batch {i}", stage.name()))?;
            let mut ctx = StepContext {
                stage,
                epoch,
                global_step: self.global_step,
                batch_idx: i as i64,
                batch_size: batch_size_of(&batch),
                metrics: &mut store,
            };
            let (name, r) = match stage {
                Stage::Test => ("test_step", module.test_step(&mut ctx, &batch)),
                _ => ("validation_step", module.validation_step(&mut ctx, &batch)),
            };
            r.map_err(|e| e.context(format!("{name} (epoch {epoch}, global step {}, batch {i})", self.global_step)))?;
            ran += 1;
        }
        let metrics = store.end_epoch();
        self.callback_metrics.extend(store.callback_metrics);
        Ok((metrics, ran))
    }

    /// Runs the validation loop once (Lightning's `trainer.validate`).
    pub fn validate(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
    ) -> Result<BTreeMap<String, f64>> {
        self.eval_entry(Stage::Validate, module, source)
    }

    /// Runs the test loop once (Lightning's `trainer.test`).
    pub fn test(
        &mut self,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
    ) -> Result<BTreeMap<String, f64>> {
        self.eval_entry(Stage::Test, module, source)
    }

    fn eval_entry(
        &mut self,
        stage: Stage,
        module: &mut dyn LightningModule,
        source: &dyn BatchSource,
    ) -> Result<BTreeMap<String, f64>> {
        let implemented = match stage {
            Stage::Test => module.has_test_step(),
            _ => module.has_validation_step(),
        };
        if !implemented {
            return Err(Error::state(format!(
                "{}: the module has no {}_step",
                stage.name(),
                if stage == Stage::Test { "test" } else { "validation" }
            )));
        }
        if let Some(s) = self.opts.seed {
            crate::seed_everything(s);
        }
        let (metrics, n) = self.run_eval(stage, module, source, self.current_epoch)?;
        if self.opts.enable_progress_bar {
            progress::eval_line(stage.name(), n, &metrics);
        }
        Ok(metrics)
    }

    /// Runs `predict_step` over every batch and concatenates the outputs
    /// along dimension 0 (`None` when no step returned anything).
    pub fn predict(&mut self, module: &mut dyn LightningModule, source: &dyn BatchSource) -> Result<Option<Tensor>> {
        if let Some(s) = self.opts.seed {
            crate::seed_everything(s);
        }
        let limit = self.opts.limit_predict_batches.apply(source.num_batches());
        let mut store = MetricStore::default();
        set_mode(module, false)?;
        let _no_grad = tch::no_grad_guard();
        let mut outputs = Vec::new();
        for (i, batch) in source.batches(0)?.enumerate() {
            if limit.is_some_and(|n| i >= n) {
                break;
            }
            let batch = batch.ctx(format!("loading predict batch {i}"))?;
            let mut ctx = StepContext {
                stage: Stage::Predict,
                epoch: 0,
                global_step: self.global_step,
                batch_idx: i as i64,
                batch_size: batch_size_of(&batch),
                metrics: &mut store,
            };
            if let Some(out) =
                module.predict_step(&mut ctx, &batch).map_err(|e| e.context(format!("predict_step (batch {i})")))?
            {
                outputs.push(out);
            }
        }
        if outputs.is_empty() {
            return Ok(None);
        }
        let first = outputs[0].size();
        for (i, o) in outputs.iter().enumerate() {
            let s = o.size();
            if s.is_empty() || s[1..] != first[1..] {
                return Err(Error::shape(format!(
                    "predict: outputs cannot be concatenated: batch 0 gave shape {first:?}, batch {i} gave {s:?}"
                )));
            }
        }
        Ok(Some(Tensor::f_cat(&outputs, 0)?))
    }
}
