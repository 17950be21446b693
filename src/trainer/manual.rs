//! Manual optimization (Lightning's `automatic_optimization = False`): the
//! training step reaches the run's optimizers and schedulers through its
//! [`StepContext`] and does backward, steps and zero_grad itself.
//!
//! Each call goes through the strategy and its precision plugin as
//! Lightning's `manual_backward` and `LightningOptimizer.step` do: the
//! backward is scaled for `16-mixed` (and arms DDP's gradient averaging),
//! a step unscales, calls `on_before_optimizer_step`, skips the update when
//! (`16-mixed`) a gradient is inf/NaN and updates the loss scale; every
//! step counts in `global_step`. The hooks that fire inside the step
//! (`on_before_backward`, `on_after_backward`, `on_before_optimizer_step`)
//! reach the callbacks, not the module: it is the code running the step.
//! Metrics those hooks log, and checkpoints they ask for, are handled at
//! the batch's next hook.
use super::context::StepContext;
use super::hooks::{Callback, Hook, HookContext, TrainerState};
use super::manual_closure::Stepping;
use super::module::OptimizerConfig;
use super::options::ClipAlgorithm;
use super::strategy::RunStrategy;
use crate::error::{Error, Result, ResultExt};
use crate::optim::same_param;
use crate::optim::Optimizer;
use crate::precision::StepMade;
use tch::Tensor;

/// What a manual training step may do to the run.
pub(crate) struct ManualOptimization<'r, 'a> {
    pub callbacks: &'r mut Vec<&'a mut Box<dyn Callback>>,
    pub state: &'r mut TrainerState,
    pub optimizers: &'r mut Vec<OptimizerConfig>,
    pub strategy: &'r mut RunStrategy,
    pub stage: &'static str,
    pub batch_idx: i64,
    /// `requires_grad` of every optimizer's parameters before `toggle`
    /// (Lightning's `_param_requires_grad_state`); empty when untoggled.
    pub toggled: &'r mut Vec<(Tensor, bool)>,
    /// Whether the learning rates changed (a scheduler stepped).
    pub lr_changed: bool,
    /// The optimizer stepping with a closure, out of `optimizers`.
    pub stepping: Option<usize>,
}

/// The operations of manual optimization, as the step context sees them.
pub(crate) trait ManualControl {
    /// Number of optimizers configure_optimizers returned.
    fn optimizer_count(&self) -> usize;
    /// Lightning's `manual_backward(loss)`.
    fn backward(&mut self, loss: &Tensor) -> Result<()>;
    /// `optimizers()[index].step()`; true when the update was made (false:
    /// skipped by `16-mixed` for inf/NaN gradients).
    fn step(&mut self, index: usize) -> Result<StepMade>;
    /// `optimizers()[index].zero_grad()` (gradients set to none).
    fn zero_grad(&mut self, index: usize) -> Result<()>;
    /// Lightning's `toggle_optimizer`: only this optimizer's parameters
    /// keep `requires_grad`.
    fn toggle(&mut self, index: usize) -> Result<()>;
    /// Lightning's `untoggle_optimizer`: restores `requires_grad` of the
    /// other optimizers' parameters.
    fn untoggle(&mut self, index: usize) -> Result<()>;
    /// `lr_schedulers()[...]`: steps the scheduler of optimizer `index`
    /// (ReduceLROnPlateau reads `metric`).
    fn scheduler_step(&mut self, index: usize, metric: Option<f64>) -> Result<()>;
    /// Number of schedulers over all optimizers (`len(lr_schedulers())`).
    fn lr_scheduler_count(&self) -> usize;
    /// `lr_schedulers()[index].step()`: one scheduler by its place in the
    /// flat list (optimizer 0's schedulers in the order added, then
    /// optimizer 1's, ...).
    fn lr_scheduler_step(&mut self, index: usize, metric: Option<f64>) -> Result<()>;
    /// Learning rate of a parameter group of optimizer `index`.
    fn learning_rate(&self, index: usize, group: usize) -> Result<f64>;
    /// Lightning's `clip_gradients(optimizers()[index], value, algorithm)`:
    /// unscales first under `16-mixed` (once before the step).
    fn clip_gradients(&mut self, index: usize, value: f64, algorithm: ClipAlgorithm) -> Result<()>;
    /// Whether optimizer `index` re-evaluates the loss in its step (LBFGS).
    fn needs_closure(&self, index: usize) -> Result<bool>;
    /// Takes optimizer `index` out of the run to step with a closure,
    /// leaving a [`Stepping`] stand-in; refused under `16-mixed` (the loss
    /// is scaled) and while another closure step runs.
    fn take_for_closure(&mut self, index: usize) -> Result<Box<dyn Optimizer>>;
    /// Puts back an optimizer [`ManualControl::take_for_closure`] took.
    fn put_back(&mut self, index: usize, optimizer: Box<dyn Optimizer>);
    /// After each evaluation of a closure: the callbacks'
    /// `on_before_optimizer_step`; returns the loss the optimizer decides
    /// from (the mean over ranks under DDP).
    fn closure_evaluated(&mut self, loss: f64) -> Result<f64>;
    /// Counts an optimizer step made outside [`ManualControl::step`].
    fn count_step(&mut self);
}

impl ManualOptimization<'_, '_> {
    /// Steps optimizer `index`'s schedulers, or only its scheduler `only`;
    /// several on one optimizer step in torch's chainable forms.
    fn step_schedulers(&mut self, index: usize, only: Option<usize>, metric: Option<f64>) -> Result<()> {
        if self.stepping == Some(index) {
            return Err(Error::state(format!("optimizer {index} is stepping: its closure cannot step its schedulers")));
        }
        let cfg = self.config(index)?;
        if cfg.schedulers.is_empty() {
            return Err(Error::state(format!("optimizer {index} has no scheduler")));
        }
        let chained = cfg.chained();
        let picked = |j: usize| only.is_none_or(|o| o == j);
        let plateau = cfg.schedulers.iter().enumerate().any(|(j, s)| picked(j) && s.scheduler.reduce_on_plateau());
        if metric.is_none() && plateau {
            return Err(Error::invalid("ReduceLROnPlateau steps on a metric: pass one"));
        }
        let opt: &mut dyn Optimizer = cfg.optimizer.as_mut();
        for (_, s) in cfg.schedulers.iter_mut().enumerate().filter(|(j, _)| picked(*j)) {
            let m = metric.filter(|_| s.scheduler.reduce_on_plateau());
            let what = format!("{} scheduler step", s.scheduler.name());
            if chained {
                s.scheduler.chained_step(opt, m).ctx(what)?;
            } else {
                s.scheduler.step(opt, m).ctx(what)?;
            }
        }
        self.lr_changed = true;
        Ok(())
    }

    fn config(&mut self, index: usize) -> Result<&mut OptimizerConfig> {
        let n = self.optimizers.len();
        self.optimizers
            .get_mut(index)
            .ok_or_else(|| Error::invalid(format!("optimizer index {index} is out of range: {n} optimizers")))
    }

    /// Calls `hook` on every callback (not the module: it is running).
    /// `optimizer_idx`: the optimizer of on_before_optimizer_step.
    fn callback_hook(&mut self, hook: Hook, output: Option<&Tensor>, optimizer_idx: Option<usize>) -> Result<()> {
        super::interrupt::check()?;
        let mut ctx = HookContext::new(hook, self.stage, self.state);
        ctx.batch_idx = self.batch_idx;
        ctx.output = output;
        ctx.optimizer_idx = optimizer_idx;
        ctx.optimizers = Some(&mut self.optimizers[..]);
        for cb in self.callbacks.iter_mut() {
            cb.on_hook(&mut ctx).map_err(|e| e.context(format!("callback {} in {}", cb.name(), hook.name())))?;
        }
        Ok(())
    }
}

impl ManualControl for ManualOptimization<'_, '_> {
    fn optimizer_count(&self) -> usize {
        self.optimizers.len()
    }

    fn backward(&mut self, loss: &Tensor) -> Result<()> {
        if loss.numel() != 1 || !loss.requires_grad() {
            return Err(Error::invalid(format!(
                "manual_backward needs a one-element loss that requires grad, got shape {:?}{}",
                loss.size(),
                if loss.requires_grad() { "" } else { " without grad" }
            )));
        }
        self.callback_hook(Hook::BeforeBackward, Some(loss), None)?;
        self.strategy.prepare_manual_backward(loss)?;
        self.strategy.backward(loss).ctx("manual_backward")?;
        self.callback_hook(Hook::AfterBackward, Some(loss), None)
    }

    fn step(&mut self, index: usize) -> Result<StepMade> {
        self.config(index)?;
        if self.stepping == Some(index) {
            return Err(Error::state(format!("optimizer {index} is stepping: its closure cannot step it")));
        }
        let cfg = &mut self.optimizers[index..=index];
        // A clip_gradients before the step unscaled already.
        self.strategy.unscale_gradients_once(cfg)?;
        self.callback_hook(Hook::BeforeOptimizerStep, None, Some(index))?;
        let cfg = &mut self.optimizers[index..=index];
        let stepped = self.strategy.optimizer_step(cfg)?;
        self.state.global_step += 1;
        Ok(stepped.into_iter().next().unwrap_or(StepMade::Known(false)))
    }

    fn zero_grad(&mut self, index: usize) -> Result<()> {
        let opt = &mut self.config(index)?.optimizer;
        opt.zero_grad();
        opt.take_error().map_or(Ok(()), Err)?;
        let opt = self.optimizers[index].optimizer.as_ref();
        self.strategy.on_zero_grad(opt, true)
    }

    fn toggle(&mut self, index: usize) -> Result<()> {
        self.config(index)?;
        let mut saved: Vec<(Tensor, bool)> = Vec::new();
        for cfg in self.optimizers.iter() {
            for p in cfg.optimizer.param_groups().iter().flat_map(|g| g.params.iter()) {
                if saved.iter().any(|(q, _)| same_param(p, q)) {
                    continue;
                }
                saved.push((p.shallow_clone(), p.requires_grad()));
                let _ = p.set_requires_grad(false);
            }
        }
        for p in self.optimizers[index].optimizer.param_groups().iter().flat_map(|g| g.params.iter()) {
            let was = saved.iter().find(|(q, _)| same_param(p, q)).map_or(p.requires_grad(), |(_, r)| *r);
            let _ = p.set_requires_grad(was);
        }
        *self.toggled = saved;
        Ok(())
    }

    fn untoggle(&mut self, index: usize) -> Result<()> {
        self.config(index)?;
        for (j, cfg) in self.optimizers.iter().enumerate() {
            if j == index {
                continue;
            }
            for p in cfg.optimizer.param_groups().iter().flat_map(|g| g.params.iter()) {
                if let Some((_, was)) = self.toggled.iter().find(|(q, _)| same_param(p, q)) {
                    let _ = p.set_requires_grad(*was);
                }
            }
        }
        self.toggled.clear();
        Ok(())
    }

    fn scheduler_step(&mut self, index: usize, metric: Option<f64>) -> Result<()> {
        self.step_schedulers(index, None, metric)
    }

    fn lr_scheduler_count(&self) -> usize {
        self.optimizers.iter().map(|c| c.schedulers.len()).sum()
    }

    fn lr_scheduler_step(&mut self, index: usize, metric: Option<f64>) -> Result<()> {
        let total = self.lr_scheduler_count();
        let mut rest = index;
        for (i, cfg) in self.optimizers.iter().enumerate() {
            if rest < cfg.schedulers.len() {
                return self.step_schedulers(i, Some(rest), metric);
            }
            rest -= cfg.schedulers.len();
        }
        Err(Error::invalid(format!("scheduler index {index} is out of range: {total} schedulers")))
    }

    fn needs_closure(&self, index: usize) -> Result<bool> {
        if self.stepping == Some(index) {
            return Err(Error::state(format!("optimizer {index} is stepping: its closure cannot step it")));
        }
        let n = self.optimizers.len();
        let cfg = self
            .optimizers
            .get(index)
            .ok_or_else(|| Error::invalid(format!("optimizer index {index} is out of range: {n} optimizers")))?;
        Ok(cfg.optimizer.needs_closure())
    }

    fn take_for_closure(&mut self, index: usize) -> Result<Box<dyn Optimizer>> {
        if let Some(busy) = self.stepping {
            return Err(Error::state(format!(
                "optimizer {busy} is stepping: its closure cannot step optimizer {index} with a closure"
            )));
        }
        let scaled = self.strategy.precision().has_scaler();
        let refusal = self.strategy.closure_refusal();
        let cfg = self.config(index)?;
        if let Some(why) = refusal {
            return Err(Error::new(crate::error::ErrorCode::Unsupported, format!("{}: {why}", cfg.optimizer.name())));
        }
        if scaled {
            return Err(Error::invalid(format!(
                "precision \"16-mixed\" scales the loss, and {} re-evaluates it during its step: they are not \
                 compatible (use \"bf16-mixed\" or \"32-true\")",
                cfg.optimizer.name()
            )));
        }
        let stand_in = Box::new(Stepping::of(index, cfg.optimizer.as_ref()));
        let taken = std::mem::replace(&mut cfg.optimizer, stand_in);
        self.stepping = Some(index);
        Ok(taken)
    }

    fn put_back(&mut self, index: usize, optimizer: Box<dyn Optimizer>) {
        if let Some(cfg) = self.optimizers.get_mut(index) {
            cfg.optimizer = optimizer;
        }
        self.stepping = None;
    }

    fn closure_evaluated(&mut self, loss: f64) -> Result<f64> {
        self.callback_hook(Hook::BeforeOptimizerStep, None, self.stepping)?;
        let mut decided = [loss];
        self.strategy.reduce(&mut decided, super::metrics::ReduceFx::Mean)?;
        Ok(decided[0])
    }

    fn count_step(&mut self) {
        self.state.global_step += 1;
    }

    fn clip_gradients(&mut self, index: usize, value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        self.config(index)?;
        super::optimization::check_clip_value(value)?;
        if value <= 0.0 {
            return Ok(());
        }
        let cfg = &mut self.optimizers[index..=index];
        self.strategy.unscale_gradients_once(cfg)?;
        self.strategy.clip_gradients(&mut self.optimizers[index..=index], value, algorithm)
    }

    fn learning_rate(&self, index: usize, group: usize) -> Result<f64> {
        let n = self.optimizers.len();
        let cfg = self
            .optimizers
            .get(index)
            .ok_or_else(|| Error::invalid(format!("optimizer index {index} is out of range: {n} optimizers")))?;
        let groups = cfg.optimizer.param_groups();
        groups.get(group).map(|g| g.lr).ok_or_else(|| {
            Error::invalid(format!("parameter group {group} is out of range: optimizer {index} has {}", groups.len()))
        })
    }
}

/// Refusal of manual-optimization calls outside a manual training step.
fn not_manual() -> Error {
    Error::state(
        "manual optimization is off here: these calls work in training_step of a module with \
         automatic_optimization off",
    )
}

impl StepContext<'_> {
    pub(super) fn manual(&mut self) -> Result<&mut (dyn ManualControl + '_)> {
        match self.manual.as_mut() {
            Some(m) => Ok(&mut **m),
            None => Err(not_manual()),
        }
    }

    /// Number of optimizers (`len(self.optimizers())`).
    pub fn optimizer_count(&mut self) -> Result<usize> {
        Ok(self.manual()?.optimizer_count())
    }

    /// Lightning's `manual_backward(loss)`.
    pub fn manual_backward(&mut self, loss: &Tensor) -> Result<()> {
        self.manual()?.backward(loss)
    }

    /// Steps optimizer `index`; counts in `global_step`. Returns whether
    /// the update was made (false: skipped for inf/NaN under 16-mixed;
    /// on the device for fused updates, see [`StepMade`]).
    pub fn optimizer_step(&mut self, index: usize) -> Result<StepMade> {
        let made = self.manual()?.step(index)?;
        self.global_step += 1;
        Ok(made)
    }

    /// Sets the gradients of optimizer `index`'s parameters to none.
    pub fn optimizer_zero_grad(&mut self, index: usize) -> Result<()> {
        self.manual()?.zero_grad(index)
    }

    /// Lightning's `toggle_optimizer(optimizers()[index])`.
    pub fn toggle_optimizer(&mut self, index: usize) -> Result<()> {
        self.manual()?.toggle(index)
    }

    /// Lightning's `untoggle_optimizer(optimizers()[index])`.
    pub fn untoggle_optimizer(&mut self, index: usize) -> Result<()> {
        self.manual()?.untoggle(index)
    }

    /// Steps the scheduler of optimizer `index` (`metric` for
    /// ReduceLROnPlateau).
    pub fn scheduler_step(&mut self, index: usize, metric: Option<f64>) -> Result<()> {
        self.manual()?.scheduler_step(index, metric)
    }

    /// Number of schedulers over all optimizers.
    pub fn lr_scheduler_count(&mut self) -> Result<usize> {
        Ok(self.manual()?.lr_scheduler_count())
    }

    /// Steps scheduler `index` of the flat list (optimizer 0's schedulers
    /// in the order added, then optimizer 1's, ...).
    pub fn lr_scheduler_step(&mut self, index: usize, metric: Option<f64>) -> Result<()> {
        self.manual()?.lr_scheduler_step(index, metric)
    }

    /// Learning rate of parameter group `group` of optimizer `index`.
    pub fn learning_rate(&mut self, index: usize, group: usize) -> Result<f64> {
        self.manual()?.learning_rate(index, group)
    }

    /// Lightning's `clip_gradients(optimizers()[index], value, algorithm)`
    /// in a manual step: unscales the gradients first under `16-mixed`
    /// (the step then does not again), then clips; `value` <= 0 clips
    /// nothing.
    pub fn clip_gradients(&mut self, index: usize, value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        self.manual()?.clip_gradients(index, value, algorithm)
    }
}
