//! Adamax, `torch.optim.Adamax` (Adam with the infinity norm).
use super::adam::check_beta;
use super::state::{add_scaled, addcdiv_, flag, read_flag, Core, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, Result};
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

const HYPERS: [&str; 3] = ["betas.1", "eps", "maximize"];
const SPEC: Spec =
    Spec { kind: "adamax", has_step: true, required: &["exp_avg", "exp_inf"], optional: &[], scalars: &[] };

/// Adamax with the update rule of torch's `_single_tensor_adamax`.
#[derive(Debug)]
pub struct Adamax {
    core: Core,
    opts: AdamaxOptions,
}

impl Adamax {
    /// An Adamax optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: AdamaxOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Adamax { core: Core::new(params, opts.lr, opts.weight_decay, opts.betas.0)?, opts })
    }

    /// The options (defaults for new groups; others used by every group).
    pub fn options(&self) -> &AdamaxOptions {
        &self.opts
    }

    fn update(&mut self) -> Result<()> {
        let o = self.opts;
        self.core.for_each_grad(o.maximize, |g, p, mut grad, st| {
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

    fn add_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
        let o = self.opts;
        self.core.add_group(params, lr.unwrap_or(o.lr), o.weight_decay, o.betas.0)
    }

    fn save(&self) -> Result<Vec<(String, Tensor)>> {
        let o = &self.opts;
        let values = [o.betas.1, o.eps, flag(o.maximize)];
        let hypers: Vec<(&str, f64)> = HYPERS.iter().copied().zip(values).collect();
        self.core.state_dict(&SPEC, &hypers)
    }

    fn load(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let parsed = self.core.parse(&SPEC, state, &HYPERS)?;
        let mut opts = self.opts;
        if let [beta2, eps, maximize] = parsed.hypers[..] {
            opts.betas.1 = beta2;
            opts.eps = eps;
            opts.maximize = read_flag("adamax", "maximize", maximize)?;
        }
        opts.validate().map_err(|e| Error::format(format!("adamax state dict: {}", e.message)))?;
        self.opts = opts;
        self.core.commit(parsed);
        Ok(())
    }
}

super::optimizer_via_core!(Adamax, "adamax");
