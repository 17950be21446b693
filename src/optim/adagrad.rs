//! Adagrad, `torch.optim.Adagrad`.
use super::state::{add_scaled, addcdiv_, addcmul_, extra, flag, Core, GroupOptions, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::Result;
use tch::Tensor;

/// Options of [`Adagrad`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdagradOptions {
    /// Learning rate (default 1e-2).
    pub lr: f64,
    /// Learning-rate decay per step: `lr / (1 + (step - 1) * lr_decay)`
    /// (default 0).
    pub lr_decay: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Starting value of the sum of squared gradients (default 0).
    pub initial_accumulator_value: f64,
    /// Term added to the denominator (default 1e-10).
    pub eps: f64,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for AdagradOptions {
    fn default() -> Self {
        AdagradOptions {
            lr: 1e-2,
            lr_decay: 0.0,
            weight_decay: 0.0,
            initial_accumulator_value: 0.0,
            eps: 1e-10,
            maximize: false,
        }
    }
}

impl AdagradOptions {
    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("lr_decay value", self.lr_decay)?;
        check_non_negative("weight_decay value", self.weight_decay)?;
        check_non_negative("initial_accumulator_value value", self.initial_accumulator_value)?;
        check_non_negative("epsilon value", self.eps)
    }
}

impl GroupOptions for AdagradOptions {
    const EXTRAS: &'static [&'static str] = &["lr_decay", "initial_accumulator_value", "eps", "maximize"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, 0.0)
    }
    fn extras(&self) -> Vec<f64> {
        vec![self.lr_decay, self.initial_accumulator_value, self.eps, flag(self.maximize)]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        AdagradOptions {
            lr: g.lr,
            weight_decay: g.weight_decay,
            lr_decay: extra(g, 0, self.lr_decay),
            initial_accumulator_value: extra(g, 1, self.initial_accumulator_value),
            eps: extra(g, 2, self.eps),
            maximize: extra(g, 3, flag(self.maximize)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        self.maximize
    }
    fn validate(&self) -> Result<()> {
        AdagradOptions::validate(self)
    }
}

const SPEC: Spec =
    Spec { kind: "adagrad", has_step: true, required: &["sum"], optional: &[], scalars: &[], fixed: &[] };

/// Adagrad with the update rule of torch's `_single_tensor_adagrad` (dense
/// gradients). A parameter's sum starts at `initial_accumulator_value` on
/// its first step with a gradient (torch creates it with the optimizer).
#[derive(Debug)]
pub struct Adagrad {
    core: Core,
    opts: AdagradOptions,
}

impl Adagrad {
    /// An Adagrad optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: AdagradOptions) -> Result<Self> {
        Ok(Adagrad { core: Core::new(params, &opts)?, opts })
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &AdagradOptions {
        &self.opts
    }

    /// torch's `_single_tensor_adagrad` (`_fused_adagrad` when fused,
    /// `_multi_tensor_adagrad` with foreach updates).
    fn update(&mut self) -> Result<()> {
        self.update_scaled(None)
    }

    /// With `found_inf` (fused only): a loss scaler's device finding, as
    /// [`Optimizer::step_scaled`].
    fn update_scaled(&mut self, found_inf: Option<&Tensor>) -> Result<()> {
        if self.core.fused {
            return super::fused::adagrad_step(&mut self.core, &self.opts, found_inf);
        }
        if found_inf.is_some() {
            return Err(super::fused::unscaled_kind("adagrad"));
        }
        self.core.settle_steps()?;
        if super::foreach::uses_foreach(&self.core) {
            return super::foreach::adagrad_step(&mut self.core, &self.opts);
        }
        self.core.for_each_grad(&self.opts, |g, o, p, mut grad, st| {
            if !st.buffers.contains_key("sum") {
                st.buffers.insert("sum", p.f_full_like(o.initial_accumulator_value)?);
            }
            st.step += 1.0;
            if g.weight_decay != 0.0 {
                grad = add_scaled(&grad, p, g.weight_decay)?;
            }
            let clr = g.lr / (1.0 + (st.step - 1.0) * o.lr_decay);
            let sum = st.buffer_or_zeros("sum", p)?;
            addcmul_(sum, &grad, &grad, 1.0)?;
            let mut std = sum.f_sqrt()?;
            let _ = std.f_add_scalar_(o.eps)?;
            addcdiv_(&mut p.shallow_clone(), &grad, &std, -clr)
        })
    }
}

super::optimizer_via_core!(Adagrad, "adagrad";
    fn supports_amp_scaling(&self) -> bool {
        self.core.fused
    }
    fn step_scaled(&mut self, found_inf: &Tensor) -> Result<()> {
        self.update_scaled(Some(found_inf))
    }
    fn fused(&self) -> bool {
        self.core.fused
    }
    fn set_fused(&mut self, fused: bool) -> Result<()> {
        let kind = self.name();
        super::fused::set_fused(&mut self.core, kind, fused)
    }
    fn foreach(&self) -> Option<bool> {
        self.core.foreach
    }
    fn set_foreach(&mut self, foreach: Option<bool>) -> Result<()> {
        let kind = self.name();
        super::foreach::set_foreach(&mut self.core, kind, foreach)
    }
);
