//! The learning-rate range test of Lightning's `Tuner.lr_find`: a short fit
//! whose one optimizer starts at `min_lr` and whose learning rate grows
//! every step (exponentially or linearly) towards `max_lr`, recording the
//! smoothed loss of each step; the suggestion is the learning rate where
//! the loss falls fastest. The model's weights are put back afterwards.
//! Every number is computed as Lightning computes it, so the same run gives
//! the same learning rates, losses and suggestion.
use crate::error::{Error, Result};
use crate::optim::scheduler::{Base, LrScheduler};
use crate::optim::Optimizer;
use crate::trainer::hooks::{Callback, Hook, HookContext};
use crate::trainer::module::{
    Interval, LightningModule, OptimizerConfig, OptimizerSetup, SchedulerConfig, SharedModel,
};
use crate::trainer::options::{BatchLimit, LoggerChoice};
use crate::trainer::{BatchSource, StepContext, Trainer};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tch::Tensor;

/// How the learning rate grows from step to step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LrFindMode {
    /// `min_lr * (max_lr / min_lr) ** (i / num_training)` (the default).
    #[default]
    Exponential,
    /// `min_lr + (i / num_training) * (max_lr - min_lr)`.
    Linear,
}

/// Options of the range test (Lightning's `lr_find` arguments).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrFindOptions {
    /// The first learning rate (default 1e-8).
    pub min_lr: f64,
    /// The last learning rate (default 1).
    pub max_lr: f64,
    /// Learning rates to try, one per optimizer step (default 100).
    pub num_training: i64,
    /// How the learning rate grows.
    pub mode: LrFindMode,
    /// Stop once the smoothed loss exceeds this multiple of the best one
    /// (default 4; `None` never stops early).
    pub early_stop_threshold: Option<f64>,
}

impl Default for LrFindOptions {
    fn default() -> Self {
        LrFindOptions {
            min_lr: 1e-8,
            max_lr: 1.0,
            num_training: 100,
            mode: LrFindMode::Exponential,
            early_stop_threshold: Some(4.0),
        }
    }
}

impl LrFindOptions {
    fn validate(&self) -> Result<()> {
        if !(self.min_lr > 0.0 && self.min_lr.is_finite() && self.max_lr.is_finite() && self.max_lr > self.min_lr) {
            return Err(Error::invalid(format!(
                "lr_find needs 0 < min_lr < max_lr, finite; got min_lr {} and max_lr {}",
                self.min_lr, self.max_lr
            )));
        }
        if self.num_training < 1 {
            return Err(Error::invalid(format!("lr_find: num_training must be >= 1, got {}", self.num_training)));
        }
        if let Some(t) = self.early_stop_threshold {
            if !(t.is_finite() && t > 0.0) {
                return Err(Error::invalid(format!("lr_find: early_stop_threshold must be finite and > 0, got {t}")));
            }
        }
        Ok(())
    }
}

/// What the range test found: the learning rate of each step and the
/// smoothed loss after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LrFindResult {
    /// Learning rate of each step.
    pub lrs: Vec<f64>,
    /// Smoothed loss of each step (NaN where the step returned no loss).
    pub losses: Vec<f64>,
}

impl LrFindResult {
    /// Lightning's `suggestion(skip_begin, skip_end)`: the learning rate
    /// where the loss falls fastest (the most negative gradient of the
    /// loss over the learning rate, in float32 as torch computes it),
    /// leaving out the first `skip_begin` and last `skip_end` points and
    /// non-finite losses; `None` with fewer than two points.
    pub fn suggestion(&self, skip_begin: usize, skip_end: usize) -> Result<Option<f64>> {
        let n = self.losses.len();
        let end = n.saturating_sub(skip_end);
        if skip_begin >= end {
            return Ok(None);
        }
        let kept: Vec<usize> = (skip_begin..end).filter(|&i| (self.losses[i] as f32).is_finite()).collect();
        if kept.len() < 2 {
            return Ok(None);
        }
        let losses: Vec<f32> = kept.iter().map(|&i| self.losses[i] as f32).collect();
        let lrs: Vec<f32> = kept.iter().map(|&i| self.lrs[i] as f32).collect();
        let g = crate::tensor::scaled::gradient(&Tensor::f_from_slice(&losses)?, &Tensor::f_from_slice(&lrs)?)?;
        let best = g.f_argmin(0, false)?.int64_value(&[]) as usize;
        Ok(kept.get(best).map(|&i| self.lrs[i]))
    }
}

/// The finder's schedule: torch's LRScheduler over `base_lrs` = `min_lr`,
/// as Lightning's `_ExponentialLR` / `_LinearLR`.
struct FinderSchedule {
    mode: LrFindMode,
    end_lr: f64,
    num_iter: i64,
    base: Base,
}

impl FinderSchedule {
    fn lrs(&self) -> Vec<f64> {
        if self.base.last_epoch <= 0 {
            return self.base.base_lrs.clone();
        }
        let r = (self.base.last_epoch + 1) as f64 / self.num_iter as f64;
        self.base
            .base_lrs
            .iter()
            .map(|b| match self.mode {
                LrFindMode::Exponential => b * (self.end_lr / b).powf(r),
                LrFindMode::Linear => b + r * (self.end_lr - b),
            })
            .collect()
    }
}

impl LrScheduler for FinderSchedule {
    fn name(&self) -> &'static str {
        "lr_finder"
    }

    fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        self.base.check_groups(opt, "lr_finder")?;
        self.base.last_epoch += 1;
        let lrs = self.lrs();
        self.base.apply(opt, lrs);
        Ok(())
    }

    fn last_lr(&self) -> Vec<f64> {
        self.base.last_lr.clone()
    }

    fn state_dict(&self) -> Vec<(String, f64)> {
        self.base.state()
    }

    fn load_state_dict(&mut self, _state: &[(String, f64)]) -> Result<()> {
        Err(Error::state("the learning-rate finder's schedule cannot be restored"))
    }
}

/// The user's module with its one optimizer's schedule exchanged for the
/// finder's (Lightning's `_exchange_scheduler`).
struct FinderModule<'a> {
    inner: &'a mut dyn LightningModule,
    opts: LrFindOptions,
}

impl LightningModule for FinderModule<'_> {
    fn model(&self) -> Option<SharedModel> {
        self.inner.model()
    }
    fn training_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.inner.training_step(ctx, batch)
    }
    fn automatic_optimization(&self) -> bool {
        self.inner.automatic_optimization()
    }
    fn optimization_hooks(&self) -> Option<std::rc::Rc<dyn crate::trainer::OptimizationHooks>> {
        self.inner.optimization_hooks()
    }
    fn has_validation_step(&self) -> bool {
        self.inner.has_validation_step()
    }
    fn validation_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<()> {
        self.inner.validation_step(ctx, batch)
    }
    fn has_test_step(&self) -> bool {
        self.inner.has_test_step()
    }
    fn test_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<()> {
        self.inner.test_step(ctx, batch)
    }
    fn predict_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.inner.predict_step(ctx, batch)
    }
    fn configure_optimizers(&mut self, setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>> {
        let mut configs = self.inner.configure_optimizers(setup)?;
        if configs.len() != 1 {
            return Err(Error::invalid(format!(
                "configure_optimizers returned {} optimizers, but the learning rate finder works with a single one",
                configs.len()
            )));
        }
        let config = &mut configs[0];
        for g in config.optimizer.param_groups_mut() {
            g.initial_lr = Some(self.opts.min_lr);
        }
        // Every group starts at min_lr, torch's LRScheduler construction.
        let mut base = Base::attach(config.optimizer.as_mut());
        base.apply(config.optimizer.as_mut(), base.base_lrs.clone());
        let schedule =
            FinderSchedule { mode: self.opts.mode, end_lr: self.opts.max_lr, num_iter: self.opts.num_training, base };
        config.schedulers = vec![SchedulerConfig {
            scheduler: Box::new(schedule),
            interval: Interval::Step,
            frequency: 1,
            monitor: None,
            name: None,
            strict: true,
        }];
        Ok(configs)
    }
    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        self.inner.on_hook(ctx)
    }
    fn hparams(&self) -> BTreeMap<String, String> {
        self.inner.hparams()
    }
    fn validation_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.inner.validation_step_output(ctx, batch)
    }
    fn test_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.inner.test_step_output(ctx, batch)
    }
    fn overrides(&self, hook: crate::trainer::Hook) -> bool {
        self.inner.overrides(hook)
    }
    fn has_configure_model(&self) -> bool {
        self.inner.has_configure_model()
    }
    fn configure_model(&mut self, device: crate::tensor::device::Device) -> Result<()> {
        self.inner.configure_model(device)
    }
    fn configure_callbacks(&mut self) -> Result<Vec<Box<dyn crate::trainer::Callback>>> {
        self.inner.configure_callbacks()
    }
}

/// Lightning's `_LRCallback`: the learning rate before each step, the
/// smoothed loss after it, and the early stop when the loss diverges.
struct FinderCallback {
    found: Arc<Mutex<LrFindResult>>,
    early_stop_threshold: Option<f64>,
    avg_loss: f64,
    best_loss: f64,
}

/// The smoothing of Lightning's `_LRCallback`.
const BETA: f64 = 0.98;

impl Callback for FinderCallback {
    fn name(&self) -> String {
        "LRFinder".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        let stepping = (ctx.batch_idx + 1) % ctx.state.accumulate_grad_batches.max(1) == 0;
        match ctx.hook {
            Hook::TrainBatchStart if stepping => {
                let lr = ctx.state.learning_rates.first().map(|g| g.lr).unwrap_or(f64::NAN);
                self.found.lock().unwrap_or_else(|p| p.into_inner()).lrs.push(lr);
            }
            Hook::TrainBatchEnd if stepping => {
                let Some(loss) = ctx.output else {
                    self.found.lock().unwrap_or_else(|p| p.into_inner()).losses.push(f64::NAN);
                    return Ok(());
                };
                let current = loss.f_double_value(&[])?;
                let step = ctx.state.global_step;
                self.avg_loss = BETA * self.avg_loss + (1.0 - BETA) * current;
                let smoothed = self.avg_loss / (1.0 - BETA.powf((step + 1) as f64));
                if self.early_stop_threshold.is_some_and(|t| step > 1 && smoothed > t * self.best_loss) {
                    ctx.state.should_stop = true;
                }
                if smoothed < self.best_loss || step == 1 {
                    self.best_loss = smoothed;
                }
                self.found.lock().unwrap_or_else(|p| p.into_inner()).losses.push(smoothed);
            }
            _ => {}
        }
        Ok(())
    }
}

impl Trainer {
    /// Lightning's `Tuner(trainer).lr_find`: a range test of learning rates
    /// on `train` (validating on `val` as fit would), with this trainer's
    /// options but no loggers, checkpoints, progress bar or callbacks of its
    /// own, and at most `num_training` steps. The module's model gets its
    /// weights back afterwards, whatever happened; the trainer's own state
    /// is untouched. Needs automatic optimization and a single optimizer.
    pub fn lr_find(
        &self,
        module: &mut dyn LightningModule,
        train: &dyn BatchSource,
        val: Option<&dyn BatchSource>,
        opts: &LrFindOptions,
    ) -> Result<LrFindResult> {
        opts.validate()?;
        if self.options().fast_dev_run != 0 {
            return Err(Error::invalid("lr_find does not run with fast_dev_run"));
        }
        if !module.automatic_optimization() {
            return Err(Error::invalid("lr_find needs automatic optimization"));
        }
        let model = module.model().ok_or_else(|| Error::state("lr_find needs a LightningModule with a model"))?;
        let mut run_opts = self.options().clone();
        run_opts.max_steps = opts.num_training;
        run_opts.logger = LoggerChoice { csv: false, tensorboard: false };
        run_opts.enable_checkpointing = false;
        run_opts.enable_progress_bar = false;
        run_opts.enable_model_summary = false;
        run_opts.limit_val_batches = BatchLimit::Count(opts.num_training as usize);
        let mut finder = Trainer::new(run_opts)?;
        let found = Arc::new(Mutex::new(LrFindResult::default()));
        finder.add_callback(Box::new(FinderCallback {
            found: Arc::clone(&found),
            early_stop_threshold: opts.early_stop_threshold,
            avg_loss: 0.0,
            best_loss: 0.0,
        }));
        let saved: Vec<(String, Tensor)> = {
            let m = model.lock().unwrap_or_else(|p| p.into_inner());
            tch::no_grad(|| m.state_dict().into_iter().map(|(k, t)| (k, t.copy())).collect())
        };
        let fitted = finder.fit(&mut FinderModule { inner: module, opts: *opts }, train, val, None);
        let restored = model.lock().unwrap_or_else(|p| p.into_inner()).load_state_dict(&saved, true);
        fitted?;
        restored.map_err(|e| e.context("lr_find: putting the weights back"))?;
        let result = found.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Ok(result)
    }
}
