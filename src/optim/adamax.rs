//! Adamax, `torch.optim.Adamax` (Adam with the infinity norm).
use super::adam::check_beta;
use super::state::{add_scaled, addcdiv_, extra, flag, Core, GroupOptions, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::Result;
use tch::Tensor;

/// Options of [`Adamax`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamaxOptions {
    /// Learning rate (default 2e-3).
    pub lr: f64,
    /// Decay of the gradient average and of the infinity norm (default
    /// (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Term added to the norm (default 1e-8).
    pub eps: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for AdamaxOptions {
    fn default() -> Self {
        AdamaxOptions { lr: 2e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0, maximize: false }
    }
}

impl AdamaxOptions {
    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("epsilon value", self.eps)?;
        check_beta(0, self.betas.0)?;
        check_beta(1, self.betas.1)?;
        check_non_negative("weight_decay value", self.weight_decay)
    }
}

impl GroupOptions for AdamaxOptions {
    const EXTRAS: &'static [&'static str] = &["betas.1", "eps", "maximize"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, self.betas.0)
    }
    fn extras(&self) -> Vec<f64> {
        vec![self.betas.1, self.eps, flag(self.maximize)]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        AdamaxOptions {
            lr: g.lr,
            betas: (g.momentum, extra(g, 0, self.betas.1)),
            eps: extra(g, 1, self.eps),
            weight_decay: g.weight_decay,
            maximize: extra(g, 2, flag(self.maximize)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        self.maximize
    }
    fn validate(&self) -> Result<()> {
        AdamaxOptions::validate(self)
    }
}

const SPEC: Spec =
    Spec { kind: "adamax", has_step: true, required: &["exp_avg", "exp_inf"], optional: &[], scalars: &[], fixed: &[] };

/// Adamax with the update rule of torch's `_single_tensor_adamax`.
#[derive(Debug)]
pub struct Adamax {
    core: Core,
    opts: AdamaxOptions,
}

impl Adamax {
    /// An Adamax optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: AdamaxOptions) -> Result<Self> {
        Ok(Adamax { core: Core::new(params, &opts)?, opts })
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &AdamaxOptions {
        &self.opts
    }

    /// torch's `_single_tensor_adamax` (`_multi_tensor_adamax` with foreach
    /// updates).
    fn update(&mut self) -> Result<()> {
        if super::foreach::uses_foreach(&self.core) {
            return super::foreach_adam_variants::adamax_step(&mut self.core, &self.opts);
        }
        self.core.for_each_grad(&self.opts, |g, o, p, mut grad, st| {
            let (lr, beta1) = (g.lr, g.momentum);
            st.buffer_or_zeros("exp_avg", p)?;
            st.buffer_or_zeros("exp_inf", p)?;
            st.step += 1.0;
            if g.weight_decay != 0.0 {
                grad = add_scaled(&grad, p, g.weight_decay)?;
            }
            let step = st.step;
            let exp_avg = st.buffer_or_zeros("exp_avg", p)?;
            let _ = exp_avg.f_lerp_(&grad, 1.0 - beta1)?;
            let exp_avg = exp_avg.shallow_clone();
            let exp_inf = st.buffer_or_zeros("exp_inf", p)?;
            let _ = exp_inf.f_mul_scalar_(o.betas.1)?;
            let mut norm = grad.f_abs()?;
            let _ = norm.f_add_scalar_(o.eps)?;
            let max = exp_inf.f_maximum(&norm)?;
            exp_inf.f_copy_(&max)?;
            let clr = lr / (1.0 - beta1.powf(step));
            addcdiv_(&mut p.shallow_clone(), &exp_avg, exp_inf, -clr)
        })
    }
}

super::optimizer_via_core!(Adamax, "adamax";
    fn foreach(&self) -> Option<bool> {
        self.core.foreach
    }
    fn set_foreach(&mut self, foreach: Option<bool>) -> Result<()> {
        let kind = self.name();
        super::foreach::set_foreach(&mut self.core, kind, foreach)
    }
);
