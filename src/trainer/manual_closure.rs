//! `opt.step(closure)` under manual optimization (Lightning's
//! `LightningOptimizer.step(closure=...)`): the optimizer calls a closure
//! of the training step, which computes the loss, zeroes the gradients and
//! runs `manual_backward` through the same step context, as often as its
//! algorithm needs (LBFGS), or once before the update (the others).
//!
//! While it steps, the optimizer is out of the run's list: its slot holds
//! a [`Stepping`] stand-in whose `zero_grad` and parameter groups still
//! work (the closure zeroes the gradients of the optimizer it belongs
//! to), and which refuses to step, to have a scheduler step it, or to
//! give its state.
use super::context::StepContext;
use crate::error::{Error, Result};
use crate::optim::{GradReset, Optimizer, ParamGroup};
use tch::Tensor;

/// What stands in an optimizer's slot while it steps with a closure.
#[derive(Debug)]
pub(crate) struct Stepping {
    index: usize,
    name: &'static str,
    groups: Vec<ParamGroup>,
    /// The stepping optimizer's per-group keys, so its groups still read.
    extras: &'static [&'static str],
    reset: GradReset,
}

impl Stepping {
    /// A stand-in for optimizer `index`, over the same parameters and
    /// with the same hyperparameters.
    pub fn of(index: usize, optimizer: &dyn Optimizer) -> Self {
        let groups = optimizer
            .param_groups()
            .iter()
            .map(|g| ParamGroup { params: g.params.iter().map(Tensor::shallow_clone).collect(), ..g.hypers() })
            .collect();
        let extras = optimizer.group_extras();
        Stepping { index, name: optimizer.name(), groups, extras, reset: GradReset::default() }
    }

    fn busy(&self, what: &str) -> Error {
        Error::state(format!(
            "optimizer {} ({}) is stepping: its closure cannot {what} it (only zero_grad it and run backward)",
            self.index, self.name
        ))
    }
}

impl Optimizer for Stepping {
    fn name(&self) -> &'static str {
        self.name
    }
    fn step(&mut self) -> Result<()> {
        Err(self.busy("step"))
    }
    fn zero_grad(&mut self) {
        self.reset.run(&self.groups);
    }
    fn param_groups(&self) -> &[ParamGroup] {
        &self.groups
    }
    fn param_groups_mut(&mut self) -> &mut [ParamGroup] {
        &mut self.groups
    }
    fn add_param_group(&mut self, _: Vec<Tensor>, _: Option<f64>) -> Result<()> {
        Err(self.busy("add a param group to"))
    }
    fn group_extras(&self) -> &'static [&'static str] {
        self.extras
    }
    fn check_group(&self, _: &ParamGroup) -> Result<()> {
        Err(self.busy("change a param group of"))
    }
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        Err(self.busy("read the state of"))
    }
    fn load_state_dict(&mut self, _: &[(String, Tensor)]) -> Result<()> {
        Err(self.busy("load a state into"))
    }
}

/// A closure of the training step: computes the loss at the parameters'
/// current values and its gradients, through the context it is given;
/// returns the loss.
pub type StepClosure<'f> = dyn FnMut(&mut StepContext<'_>) -> Result<f64> + 'f;

impl StepContext<'_> {
    /// Lightning's `opt.step(closure=closure)` for optimizer `index`: an
    /// optimizer that re-evaluates the loss (LBFGS) calls `closure` as
    /// often as it needs, each call followed by the callbacks'
    /// `on_before_optimizer_step`; the others call it once, then step as
    /// [`StepContext::optimizer_step`] does. Counts one in `global_step`.
    /// Returns whether the update was made and the first evaluation's
    /// loss (torch's return value).
    ///
    /// Under DDP, LBFGS decides from the loss averaged over ranks, so
    /// every rank evaluates as often and the gradient averaging of
    /// `manual_backward` pairs up. A failed step leaves LBFGS's parameters
    /// and history as they were.
    pub fn optimizer_step_closure(
        &mut self,
        index: usize,
        closure: &mut StepClosure<'_>,
    ) -> Result<(crate::precision::StepMade, f64)> {
        if !self.manual()?.needs_closure(index)? {
            let loss = closure(self)?;
            let made = self.optimizer_step(index)?;
            return Ok((made, loss));
        }
        let mut optimizer = self.manual()?.take_for_closure(index)?;
        // The optimizer goes back even when a callback panics inside the
        // closure (the panic then goes on).
        let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            optimizer.step_with_closure(&mut || {
                let loss = closure(self)?;
                self.manual()?.closure_evaluated(loss)
            })
        }));
        self.manual()?.put_back(index, optimizer);
        let first = stepped.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        self.manual()?.count_step();
        self.global_step += 1;
        Ok((crate::precision::StepMade::Known(true), first))
    }
}
