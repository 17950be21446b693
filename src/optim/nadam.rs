//! NAdam, `torch.optim.NAdam` (Adam with Nesterov momentum).
use super::adam::check_beta;
use super::foreach_adam_variants::{nadam_mu, nadam_mu_product};
use super::state::{add_scaled, addcdiv_, addcmul_, extra, flag, Core, GroupOptions, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::Result;
use tch::Tensor;

/// Options of [`NAdam`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NAdamOptions {
    /// Learning rate (default 2e-3).
    pub lr: f64,
    /// Coefficients of the running averages (default (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Term added to the denominator (default 1e-8).
    pub eps: f64,
    /// Weight decay: L2, or decoupled with `decoupled_weight_decay`
    /// (default 0).
    pub weight_decay: f64,
    /// Momentum decay `psi` of the momentum schedule (default 4e-3).
    pub momentum_decay: f64,
    /// Decoupled weight decay `p *= 1 - lr * wd`, as NAdamW (default false).
    pub decoupled_weight_decay: bool,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for NAdamOptions {
    fn default() -> Self {
        NAdamOptions {
            lr: 2e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            momentum_decay: 4e-3,
            decoupled_weight_decay: false,
            maximize: false,
        }
    }
}

impl NAdamOptions {
    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("epsilon value", self.eps)?;
        check_beta(0, self.betas.0)?;
        check_beta(1, self.betas.1)?;
        check_non_negative("weight_decay value", self.weight_decay)?;
        check_non_negative("momentum_decay value", self.momentum_decay)
    }
}

impl GroupOptions for NAdamOptions {
    const EXTRAS: &'static [&'static str] = &["betas.1", "eps", "momentum_decay", "decoupled_weight_decay", "maximize"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, self.betas.0)
    }
    fn extras(&self) -> Vec<f64> {
        vec![self.betas.1, self.eps, self.momentum_decay, flag(self.decoupled_weight_decay), flag(self.maximize)]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        NAdamOptions {
            lr: g.lr,
            betas: (g.momentum, extra(g, 0, self.betas.1)),
            eps: extra(g, 1, self.eps),
            weight_decay: g.weight_decay,
            momentum_decay: extra(g, 2, self.momentum_decay),
            decoupled_weight_decay: extra(g, 3, flag(self.decoupled_weight_decay)) != 0.0,
            maximize: extra(g, 4, flag(self.maximize)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        self.maximize
    }
    fn validate(&self) -> Result<()> {
        NAdamOptions::validate(self)
    }
}

const SPEC: Spec = Spec {
    kind: "nadam",
    has_step: true,
    required: &["exp_avg", "exp_avg_sq"],
    optional: &[],
    scalars: &["mu_product"],
    fixed: &[],
};

/// NAdam with the update rule of torch's `_single_tensor_nadam`. The
/// momentum product is kept as torch keeps it, a float32 number (torch's
/// default scalar dtype), so the steps match torch's bit for bit.
#[derive(Debug)]
pub struct NAdam {
    core: Core,
    opts: NAdamOptions,
}

impl NAdam {
    /// A NAdam optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: NAdamOptions) -> Result<Self> {
        Ok(NAdam { core: Core::new(params, &opts)?, opts })
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &NAdamOptions {
        &self.opts
    }

    /// torch's `_single_tensor_nadam` (`_multi_tensor_nadam` with foreach
    /// updates).
    fn update(&mut self) -> Result<()> {
        if super::foreach::uses_foreach(&self.core) {
            return super::foreach_adam_variants::nadam_step(&mut self.core, &self.opts);
        }
        self.core.for_each_grad(&self.opts, |g, o, p, mut grad, st| {
            let beta2 = o.betas.1;
            let (lr, beta1) = (g.lr, g.momentum);
            let mut param = p.shallow_clone();
            st.buffer_or_zeros("exp_avg", p)?;
            st.buffer_or_zeros("exp_avg_sq", p)?;
            st.scalars.entry("mu_product").or_insert(1.0);
            st.step += 1.0;
            let step = st.step;
            let bias_correction2 = 1.0 - beta2.powf(step);
            if g.weight_decay != 0.0 {
                if o.decoupled_weight_decay {
                    let _ = param.f_mul_scalar_(1.0 - lr * g.weight_decay)?;
                } else {
                    grad = add_scaled(&grad, p, g.weight_decay)?;
                }
            }
            let mu = nadam_mu(beta1, o.momentum_decay, step);
            let mu_next = nadam_mu(beta1, o.momentum_decay, step + 1.0);
            let mu_product = st.scalars.entry("mu_product").or_insert(1.0);
            *mu_product = nadam_mu_product(*mu_product, mu);
            let mu_product = *mu_product;
            let exp_avg = st.buffer_or_zeros("exp_avg", p)?;
            let _ = exp_avg.f_lerp_(&grad, 1.0 - beta1)?;
            let exp_avg = exp_avg.shallow_clone();
            let exp_avg_sq = st.buffer_or_zeros("exp_avg_sq", p)?;
            let _ = exp_avg_sq.f_mul_scalar_(beta2)?;
            addcmul_(exp_avg_sq, &grad, &grad, 1.0 - beta2)?;
            let mut denom = exp_avg_sq.f_div_scalar(bias_correction2)?.f_sqrt()?;
            let mu_product_next = mu_product * mu_next;
            let _ = denom.f_add_scalar_(o.eps)?;
            addcdiv_(&mut param, &grad, &denom, -lr * (1.0 - mu) / (1.0 - mu_product))?;
            addcdiv_(&mut param, &exp_avg, &denom, (-lr * mu_next) / (1.0 - mu_product_next))
        })
    }
}

super::optimizer_via_core!(NAdam, "nadam";
    fn foreach(&self) -> Option<bool> {
        self.core.foreach
    }
    fn set_foreach(&mut self, foreach: Option<bool>) -> Result<()> {
        let kind = self.name();
        super::foreach::set_foreach(&mut self.core, kind, foreach)
    }
);
