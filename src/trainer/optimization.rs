//! Lightning's overridable optimization hooks of a LightningModule under
//! automatic optimization (`optimizer_step`, `optimizer_zero_grad`,
//! `lr_scheduler_step`, `backward`, `configure_gradient_clipping`) and the
//! [`OptimizationContext`] each of them is given.
use super::automatic::{self, TrainBatch};
use super::hooks::Hook;
use super::metrics::MetricStore;
use super::module::OptimizerConfig;
use super::options::ClipAlgorithm;
use super::run::Run;
use super::TrainerOptions;
use crate::error::{Error, Result, ResultExt};
use crate::precision::StepMade;
use tch::Tensor;

/// The hook an [`OptimizationContext`] is given to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptimizationSlot {
    /// `optimizer_step`: runs the closure and steps (or not).
    OptimizerStep,
    /// `optimizer_zero_grad`: resets the gradients (or not).
    OptimizerZeroGrad,
    /// `backward`: runs backward of the loss it is given.
    Backward,
    /// `configure_gradient_clipping`: clips the gradients (or not).
    ConfigureGradientClipping,
    /// `lr_scheduler_step`: steps its scheduler (or not).
    LrSchedulerStep,
}

impl OptimizationSlot {
    /// Lightning's name of the hook.
    pub fn name(self) -> &'static str {
        match self {
            OptimizationSlot::OptimizerStep => "optimizer_step",
            OptimizationSlot::OptimizerZeroGrad => "optimizer_zero_grad",
            OptimizationSlot::Backward => "backward",
            OptimizationSlot::ConfigureGradientClipping => "configure_gradient_clipping",
            OptimizationSlot::LrSchedulerStep => "lr_scheduler_step",
        }
    }
}

/// Lightning's optimization hooks, which a module may override under
/// automatic optimization (see [`super::LightningModule::optimization_hooks`]).
/// Every default is Lightning's. The methods take `&self`: the closure
/// `optimizer_step` runs calls the others while it is running (keep state
/// in cells or behind the host's userdata).
pub trait OptimizationHooks {
    /// Lightning's `optimizer_step(epoch, batch_idx, optimizer,
    /// optimizer_closure)`, on the batches that end an accumulation
    /// window: must run the closure ([`OptimizationContext::run_closure`]
    /// alone, or through [`OptimizationContext::step`]). Default: step.
    fn optimizer_step(
        &self,
        ctx: &mut OptimizationContext,
        _epoch: i64,
        _batch_idx: i64,
        _optimizer_idx: usize,
    ) -> Result<()> {
        ctx.step().map(|_| ())
    }
    /// Lightning's `optimizer_zero_grad(epoch, batch_idx, optimizer)`, in
    /// the closure at the start of an accumulation window. Default:
    /// `zero_grad()` (gradients set to none).
    fn optimizer_zero_grad(
        &self,
        ctx: &mut OptimizationContext,
        _epoch: i64,
        _batch_idx: i64,
        _optimizer_idx: usize,
    ) -> Result<()> {
        ctx.zero_grad(true)
    }
    /// Lightning's `lr_scheduler_step(scheduler, metric)` for a scheduler
    /// that is due (`scheduler_idx` in the flat list: optimizer 0's
    /// schedulers, then optimizer 1's, ...); `metric` is the monitored
    /// value of a ReduceLROnPlateau. Default: step it.
    fn lr_scheduler_step(
        &self,
        ctx: &mut OptimizationContext,
        _scheduler_idx: usize,
        metric: Option<f64>,
    ) -> Result<()> {
        ctx.scheduler_step(metric)
    }
    /// Lightning's `backward(loss)`: `loss` is divided by
    /// `accumulate_grad_batches` and, under `16-mixed`, multiplied by the
    /// loss scale. Default: `loss.backward()`.
    fn backward(&self, _ctx: &mut OptimizationContext, loss: &Tensor) -> Result<()> {
        Ok(loss.f_backward()?)
    }
    /// Lightning's `configure_gradient_clipping(optimizer,
    /// gradient_clip_val, gradient_clip_algorithm)` with the trainer's
    /// settings, after `on_before_optimizer_step` on unscaled gradients.
    /// Default: clip when `clip_val` is set.
    fn configure_gradient_clipping(
        &self,
        ctx: &mut OptimizationContext,
        _optimizer_idx: usize,
        clip_val: Option<f64>,
        algorithm: ClipAlgorithm,
    ) -> Result<()> {
        match clip_val {
            Some(v) => ctx.clip_gradients(v, algorithm),
            None => Ok(()),
        }
    }
}

/// The closure of a training batch (training_step, zero_grad, backward)
/// that `optimizer_step` runs.
pub(super) struct ClosureArgs<'r> {
    pub opts: &'r TrainerOptions,
    pub store: &'r mut MetricStore,
    pub batch: &'r TrainBatch<'r>,
    /// Whether the batch steps (DDP synchronizes its backward).
    pub stepped: bool,
}

/// What an optimization hook can do, valid during its call: read the
/// epoch and step, change its optimizer's learning rates, and what its
/// hook is for (run the closure and step in `optimizer_step`, clip in
/// `configure_gradient_clipping`, step the scheduler in
/// `lr_scheduler_step`; zero the gradients anywhere).
pub struct OptimizationContext<'r, 'a> {
    run: &'r mut Run<'a>,
    slot: OptimizationSlot,
    optimizer: usize,
    scheduler: usize,
    closure: Option<ClosureArgs<'r>>,
    /// How often the closure ran.
    evaluations: usize,
    /// The last evaluation's loss (`None` inside: no loss returned).
    result: Option<Option<Tensor>>,
    stepped: bool,
    lr_changed: bool,
}

impl<'r, 'a> OptimizationContext<'r, 'a> {
    /// A context for `slot` about `optimizer` (and its `scheduler`-th
    /// scheduler in `lr_scheduler_step`).
    pub(super) fn new(run: &'r mut Run<'a>, slot: OptimizationSlot, optimizer: usize, scheduler: usize) -> Self {
        OptimizationContext {
            run,
            slot,
            optimizer,
            scheduler,
            closure: None,
            evaluations: 0,
            result: None,
            stepped: false,
            lr_changed: false,
        }
    }

    /// The context of `optimizer_step` for optimizer 0, with its closure.
    pub(super) fn for_closure(run: &'r mut Run<'a>, closure: ClosureArgs<'r>) -> Self {
        let mut ctx = Self::new(run, OptimizationSlot::OptimizerStep, 0, 0);
        ctx.closure = Some(closure);
        ctx
    }

    /// Ends the hook's call: the learning rates the loggers see are
    /// refreshed if they changed; returns the closure's last evaluation
    /// (`None` when it did not run or returned no loss) and how often it
    /// ran.
    pub(super) fn finish(mut self) -> (Option<Tensor>, usize) {
        if self.lr_changed {
            self.run.refresh_learning_rates();
        }
        (self.result.take().flatten(), self.evaluations)
    }
}

impl OptimizationContext<'_, '_> {
    /// The hook this context was given to.
    pub fn slot(&self) -> OptimizationSlot {
        self.slot
    }

    /// Lightning's `current_epoch`.
    pub fn epoch(&self) -> i64 {
        self.run.state.epoch
    }

    /// Lightning's `global_step` (optimizer steps completed before this
    /// batch's).
    pub fn global_step(&self) -> i64 {
        self.run.state.global_step
    }

    fn only_in(&self, slot: OptimizationSlot, what: &str) -> Result<()> {
        if self.slot == slot {
            return Ok(());
        }
        Err(Error::state(format!("{what} only works in {}, not in {}", slot.name(), self.slot.name())))
    }

    fn config(&mut self) -> Result<&mut OptimizerConfig> {
        let (i, n) = (self.optimizer, self.run.optimizers.len());
        self.run.optimizers.get_mut(i).ok_or_else(|| Error::state(format!("optimizer {i} is gone ({n} optimizers)")))
    }

    /// Lightning's `optimizer_closure()` on its own: the training step,
    /// `zero_grad` at the start of an accumulation window and backward,
    /// with their hooks, no step. Returns the loss's value (read from the
    /// device: the host asked for a number), `None` when training_step
    /// returned none. Only in `optimizer_step`.
    pub fn run_closure(&mut self) -> Result<Option<f64>> {
        self.only_in(OptimizationSlot::OptimizerStep, "running the closure")?;
        let Some(args) = self.closure.as_mut() else {
            return Err(Error::state("this optimizer_step has no closure"));
        };
        let out = automatic::custom_closure(&mut *self.run, args.opts, &mut *args.store, args.batch, args.stepped)?;
        self.evaluations += 1;
        let value = out.as_ref().map(automatic::loss_value).transpose()?;
        self.result = Some(out);
        Ok(value)
    }

    /// Lightning's `optimizer.step(closure=optimizer_closure)`, wrapped by
    /// the precision plugin as Lightning's: the closure, then (unless
    /// `16-mixed` got no loss) unscale, `on_before_optimizer_step`,
    /// `configure_gradient_clipping`, the step (skipped by `16-mixed` for
    /// inf/NaN gradients) and the scale update. Once per batch; returns
    /// whether the update was made. Only in `optimizer_step`.
    pub fn step(&mut self) -> Result<StepMade> {
        self.only_in(OptimizationSlot::OptimizerStep, "stepping the optimizer")?;
        if self.stepped {
            return Err(Error::state("the optimizer already stepped in this optimizer_step (once per batch)"));
        }
        let value = self.run_closure()?;
        let opts = self.closure.as_ref().map(|c| c.opts).ok_or_else(|| Error::state("no closure"))?;
        let run = &mut *self.run;
        let started = run.profile_start();
        let scaled_without_loss = value.is_none() && run.strategy.precision().has_scaler();
        let i = self.optimizer;
        if !scaled_without_loss {
            run.strategy.unscale_gradients(&mut run.optimizers[i..=i])?;
        }
        super::automatic::optimizer_hook(run, Hook::BeforeOptimizerStep, Some(i))?;
        configure_clipping(run, opts, i)?;
        self.stepped = true;
        let mut made = StepMade::Known(false);
        if !scaled_without_loss {
            made = run.strategy.optimizer_step(&mut run.optimizers[i..=i])?.pop().unwrap_or(StepMade::Known(false));
        }
        run.profile_stop("[Strategy].optimizer_step", started, Default::default());
        Ok(made)
    }

    /// `optimizer.zero_grad(set_to_none)`: the gradients of the
    /// optimizer's parameters become none, or zeros.
    pub fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        let cfg = self.config()?;
        if set_to_none {
            cfg.optimizer.zero_grad();
            cfg.optimizer.take_error().map_or(Ok(()), Err)?;
        } else {
            crate::tensor::grad::zero_in_place(cfg.optimizer.param_groups().iter().flat_map(|g| &g.params))?;
        }
        let run = &mut *self.run;
        run.strategy.on_zero_grad(run.optimizers[self.optimizer].optimizer.as_ref(), set_to_none)
    }

    /// Lightning's `clip_gradients(optimizer, value, algorithm)` on
    /// gradients the trainer already unscaled; `value` <= 0 clips nothing.
    /// Only in `configure_gradient_clipping`.
    pub fn clip_gradients(&mut self, value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        self.only_in(OptimizationSlot::ConfigureGradientClipping, "clip_gradients")?;
        check_clip_value(value)?;
        if value <= 0.0 {
            return Ok(());
        }
        let i = self.optimizer;
        let run = &mut *self.run;
        run.strategy.clip_gradients(&mut run.optimizers[i..=i], value, algorithm)
    }

    /// `scheduler.step()` (`scheduler.step(metric)` for ReduceLROnPlateau,
    /// which needs one), in torch's chainable form when its optimizer has
    /// several. Only in `lr_scheduler_step`.
    pub fn scheduler_step(&mut self, metric: Option<f64>) -> Result<()> {
        self.only_in(OptimizationSlot::LrSchedulerStep, "stepping the scheduler")?;
        let j = self.scheduler;
        let cfg = self.config()?;
        let plateau = cfg.schedulers.get(j).is_some_and(|s| s.scheduler.reduce_on_plateau());
        if plateau && metric.is_none() {
            return Err(Error::invalid("ReduceLROnPlateau steps on a metric: pass one"));
        }
        step_scheduler(cfg, j, metric.filter(|_| plateau))?;
        self.lr_changed = true;
        Ok(())
    }

    /// Learning rate of parameter group `group` of the hook's optimizer.
    pub fn learning_rate(&self, group: usize) -> Result<f64> {
        let cfg = self.run.optimizers.get(self.optimizer).ok_or_else(|| Error::state("the optimizer is gone"))?;
        let groups = cfg.optimizer.param_groups();
        groups.get(group).map(|g| g.lr).ok_or_else(|| group_range(group, groups.len()))
    }

    /// Sets the learning rate of parameter group `group` (a warm-up in
    /// `optimizer_step`); finite and >= 0.
    pub fn set_learning_rate(&mut self, group: usize, lr: f64) -> Result<()> {
        if !lr.is_finite() || lr < 0.0 {
            return Err(Error::invalid(format!("the learning rate must be finite and >= 0, got {lr}")));
        }
        let groups = self.config()?.optimizer.param_groups_mut();
        let n = groups.len();
        groups.get_mut(group).ok_or_else(|| group_range(group, n))?.lr = lr;
        self.lr_changed = true;
        Ok(())
    }
}

fn group_range(group: usize, n: usize) -> Error {
    Error::invalid(format!("parameter group {group} is out of range: the optimizer has {n}"))
}

/// Refuses a NaN clip value (Lightning clips nothing at <= 0).
pub(crate) fn check_clip_value(value: f64) -> Result<()> {
    if value.is_nan() {
        return Err(Error::invalid("gradient_clip_val is NaN"));
    }
    Ok(())
}

/// Steps scheduler `j` of `cfg` (in torch's chainable form when the
/// optimizer has several).
pub(super) fn step_scheduler(cfg: &mut OptimizerConfig, j: usize, metric: Option<f64>) -> Result<()> {
    let chained = cfg.chained();
    let n = cfg.schedulers.len();
    let s = cfg.schedulers.get_mut(j).ok_or_else(|| Error::state(format!("scheduler {j} is gone ({n})")))?;
    let what = format!("{} scheduler step", s.scheduler.name());
    if chained {
        s.scheduler.chained_step(cfg.optimizer.as_mut(), metric).ctx(what)
    } else {
        s.scheduler.step(cfg.optimizer.as_mut(), metric).ctx(what)
    }
}

/// Lightning's `_clip_gradients` after `on_before_optimizer_step`: the
/// module's `configure_gradient_clipping` with the trainer's settings, or
/// (no hooks) the trainer's clipping.
pub(super) fn configure_clipping(run: &mut Run, opts: &TrainerOptions, optimizer: usize) -> Result<()> {
    let Some(hooks) = run.opt_hooks.clone() else {
        if let Some(v) = opts.gradient_clip_val {
            run.strategy.clip_gradients(&mut run.optimizers, v, opts.gradient_clip_algorithm)?;
        }
        return Ok(());
    };
    let mut ctx = OptimizationContext::new(run, OptimizationSlot::ConfigureGradientClipping, optimizer, 0);
    let done =
        hooks.configure_gradient_clipping(&mut ctx, optimizer, opts.gradient_clip_val, opts.gradient_clip_algorithm);
    ctx.finish();
    done
}

/// Every optimizer's `zero_grad` (gradients set to none), and the
/// strategy told.
pub(super) fn zero_all(run: &mut Run) -> Result<()> {
    if run.grads_stay {
        // Graphed steps write into the gradients they captured: zeroed in
        // place, never released.
        for cfg in run.optimizers.iter() {
            crate::tensor::grad::zero_in_place(cfg.optimizer.param_groups().iter().flat_map(|g| &g.params))?;
        }
        for cfg in run.optimizers.iter() {
            run.strategy.on_zero_grad(cfg.optimizer.as_ref(), false)?;
        }
        return Ok(());
    }
    for cfg in run.optimizers.iter_mut() {
        cfg.optimizer.zero_grad();
        // A host optimizer's own zero_grad may have failed.
        if let Some(e) = cfg.optimizer.take_error() {
            return Err(e);
        }
    }
    for cfg in run.optimizers.iter() {
        run.strategy.on_zero_grad(cfg.optimizer.as_ref(), true)?;
    }
    Ok(())
}

/// The module's `optimizer_zero_grad` for optimizer `optimizer` at batch
/// `batch_idx`.
pub(super) fn zero_grad_hook(run: &mut Run, optimizer: usize, batch_idx: i64) -> Result<()> {
    let Some(hooks) = run.opt_hooks.clone() else { return zero_all(run) };
    let epoch = run.state.epoch;
    let mut ctx = OptimizationContext::new(run, OptimizationSlot::OptimizerZeroGrad, optimizer, 0);
    let done = hooks.optimizer_zero_grad(&mut ctx, epoch, batch_idx, optimizer);
    ctx.finish();
    done
}

/// The backward of a batch's (divided) loss: the strategy's (scaled for
/// `16-mixed`), or the module's `backward` hook given the scaled loss.
pub(super) fn backward(run: &mut Run, loss: &Tensor) -> Result<()> {
    let Some(hooks) = run.opt_hooks.clone() else {
        return run.strategy.backward(loss);
    };
    let scaled = run.strategy.precision().scale_loss(loss)?;
    crate::tensor::device::note_backward();
    let mut ctx = OptimizationContext::new(run, OptimizationSlot::Backward, 0, 0);
    let done = hooks.backward(&mut ctx, &scaled);
    ctx.finish();
    done
}

/// The module's `lr_scheduler_step` for scheduler `j` of optimizer `i`
/// (`flat` in the flat list), or the plain step without hooks.
pub(super) fn lr_scheduler_hook(run: &mut Run, i: usize, j: usize, flat: usize, metric: Option<f64>) -> Result<()> {
    let Some(hooks) = run.opt_hooks.clone() else {
        return step_scheduler(&mut run.optimizers[i], j, metric);
    };
    let mut ctx = OptimizationContext::new(run, OptimizationSlot::LrSchedulerStep, i, j);
    let done = hooks.lr_scheduler_step(&mut ctx, flat, metric);
    ctx.finish();
    done
}

/// Refuses what the module's optimization hooks cannot run with under
/// automatic optimization: several optimizers (Lightning's automatic
/// optimization has one) and an optimizer that re-evaluates the loss
/// (LBFGS).
pub(super) fn check_optimization_hooks(run: &Run) -> Result<()> {
    if run.opt_hooks.is_none() || run.state.manual_optimization {
        return Ok(());
    }
    if run.optimizers.len() > 1 {
        return Err(Error::invalid(format!(
            "the module's optimization hooks (optimizer_step, optimizer_zero_grad, lr_scheduler_step, backward, \
             configure_gradient_clipping) run under automatic optimization with one optimizer, as in Lightning; \
             configure_optimizers added {} (use manual optimization)",
            run.optimizers.len()
        )));
    }
    if let Some(cfg) = run.optimizers.iter().find(|c| c.optimizer.needs_closure()) {
        return Err(Error::unsupported(format!(
            "{} re-evaluates the loss during its step: it does not run with the module's optimization hooks",
            cfg.optimizer.name()
        )));
    }
    Ok(())
}
