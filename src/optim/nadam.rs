//! NAdam, `torch.optim.NAdam` (Adam with Nesterov momentum).
use super::adam::check_beta;
use super::state::{add_scaled, addcdiv_, addcmul_, flag, read_flag, Core, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, Result};
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

const HYPERS: [&str; 5] = ["betas.1", "eps", "momentum_decay", "decoupled_weight_decay", "maximize"];
const SPEC: Spec = Spec {
    kind: "nadam",
    has_step: true,
    required: &["exp_avg", "exp_avg_sq"],
    optional: &[],
    scalars: &["mu_product"],
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
        opts.validate()?;
        Ok(NAdam { core: Core::new(params, opts.lr, opts.weight_decay, opts.betas.0)?, opts })
    }

    /// The options (defaults for new groups; others used by every group).
    pub fn options(&self) -> &NAdamOptions {
        &self.opts
    }

    fn update(&mut self) -> Result<()> {
        let o = self.opts;
        let beta2 = o.betas.1;
        self.core.for_each_grad(o.maximize, |g, p, mut grad, st| {
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
            let mu = beta1 * (1.0 - 0.5 * 0.96f64.powf(step * o.momentum_decay));
            let mu_next = beta1 * (1.0 - 0.5 * 0.96f64.powf((step + 1.0) * o.momentum_decay));
            let mu_product = st.scalars.entry("mu_product").or_insert(1.0);
            // torch: `mu_product *= mu` on a float32 0-dim tensor.
            *mu_product = f64::from((*mu_product as f32) * (mu as f32));
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

    fn add_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
        let o = self.opts;
        self.core.add_group(params, lr.unwrap_or(o.lr), o.weight_decay, o.betas.0)
    }

    fn save(&self) -> Result<Vec<(String, Tensor)>> {
        let o = &self.opts;
        let values = [o.betas.1, o.eps, o.momentum_decay, flag(o.decoupled_weight_decay), flag(o.maximize)];
        let hypers: Vec<(&str, f64)> = HYPERS.iter().copied().zip(values).collect();
        self.core.state_dict(&SPEC, &hypers)
    }

    fn load(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let parsed = self.core.parse(&SPEC, state, &HYPERS)?;
        let mut opts = self.opts;
        if let [beta2, eps, momentum_decay, decoupled, maximize] = parsed.hypers[..] {
            opts.betas.1 = beta2;
            opts.eps = eps;
            opts.momentum_decay = momentum_decay;
            opts.decoupled_weight_decay = read_flag("nadam", "decoupled_weight_decay", decoupled)?;
            opts.maximize = read_flag("nadam", "maximize", maximize)?;
        }
        opts.validate().map_err(|e| Error::format(format!("nadam state dict: {}", e.message)))?;
        self.opts = opts;
        self.core.commit(parsed);
        Ok(())
    }
}

super::optimizer_via_core!(NAdam, "nadam");
