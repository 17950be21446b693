//! RAdam, `torch.optim.RAdam` (Adam with a rectified adaptive learning
//! rate).
use super::adam::check_beta;
use super::py_num::py_pow;
use super::state::{add_scaled, add_scaled_, addcmul_, extra, flag, Core, GroupOptions, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::Result;
use tch::Tensor;

/// Options of [`RAdam`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RAdamOptions {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Coefficients of the running averages (default (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Term added to the denominator (default 1e-8).
    pub eps: f64,
    /// Weight decay: L2, or decoupled with `decoupled_weight_decay`
    /// (default 0).
    pub weight_decay: f64,
    /// Decoupled weight decay `p *= 1 - lr * wd`, as RAdamW (default false).
    pub decoupled_weight_decay: bool,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for RAdamOptions {
    fn default() -> Self {
        RAdamOptions {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled_weight_decay: false,
            maximize: false,
        }
    }
}

impl RAdamOptions {
    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("epsilon value", self.eps)?;
        check_beta(0, self.betas.0)?;
        check_beta(1, self.betas.1)?;
        check_non_negative("weight_decay value", self.weight_decay)
    }
}

impl GroupOptions for RAdamOptions {
    const EXTRAS: &'static [&'static str] = &["betas.1", "eps", "decoupled_weight_decay", "maximize"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, self.betas.0)
    }
    fn extras(&self) -> Vec<f64> {
        vec![self.betas.1, self.eps, flag(self.decoupled_weight_decay), flag(self.maximize)]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        RAdamOptions {
            lr: g.lr,
            betas: (g.momentum, extra(g, 0, self.betas.1)),
            eps: extra(g, 1, self.eps),
            weight_decay: g.weight_decay,
            decoupled_weight_decay: extra(g, 2, flag(self.decoupled_weight_decay)) != 0.0,
            maximize: extra(g, 3, flag(self.maximize)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        self.maximize
    }
    fn validate(&self) -> Result<()> {
        RAdamOptions::validate(self)
    }
}

const SPEC: Spec = Spec {
    kind: "radam",
    has_step: true,
    required: &["exp_avg", "exp_avg_sq"],
    optional: &[],
    scalars: &[],
    fixed: &[],
};

/// RAdam with the update rule of torch's `_single_tensor_radam`: plain
/// bias-corrected momentum while the variance estimate is unreliable
/// (`rho_t <= 5`), then the rectified adaptive step.
#[derive(Debug)]
pub struct RAdam {
    core: Core,
    opts: RAdamOptions,
}

impl RAdam {
    /// A RAdam optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: RAdamOptions) -> Result<Self> {
        Ok(RAdam { core: Core::new(params, &opts)?, opts })
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &RAdamOptions {
        &self.opts
    }

    /// torch's `_single_tensor_radam` (`_multi_tensor_radam` with foreach
    /// updates).
    fn update(&mut self) -> Result<()> {
        if super::foreach::uses_foreach(&self.core) {
            return super::foreach_adam_variants::radam_step(&mut self.core, &self.opts);
        }
        self.core.for_each_grad(&self.opts, |g, o, p, mut grad, st| {
            let beta2 = o.betas.1;
            let (lr, beta1) = (g.lr, g.momentum);
            let mut param = p.shallow_clone();
            st.buffer_or_zeros("exp_avg", p)?;
            st.buffer_or_zeros("exp_avg_sq", p)?;
            st.step += 1.0;
            let step = st.step;
            if g.weight_decay != 0.0 {
                if o.decoupled_weight_decay {
                    let _ = param.f_mul_scalar_(1.0 - lr * g.weight_decay)?;
                } else {
                    grad = add_scaled(&grad, p, g.weight_decay)?;
                }
            }
            let exp_avg = st.buffer_or_zeros("exp_avg", p)?;
            let _ = exp_avg.f_lerp_(&grad, 1.0 - beta1)?;
            let exp_avg = exp_avg.shallow_clone();
            let exp_avg_sq = st.buffer_or_zeros("exp_avg_sq", p)?;
            let _ = exp_avg_sq.f_mul_scalar_(beta2)?;
            addcmul_(exp_avg_sq, &grad, &grad, 1.0 - beta2)?;
            let bias_correction1 = 1.0 - beta1.powf(step);
            let bias_correction2 = 1.0 - beta2.powf(step);
            let corrected = exp_avg.f_div_scalar(bias_correction1)?;
            let rho_inf = 2.0 / (1.0 - beta2) - 1.0;
            let rho_t = rho_inf - 2.0 * step * beta2.powf(step) / bias_correction2;
            let update = if rho_t > 5.0 {
                let rect =
                    py_pow((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t), 0.5);
                let mut sqrt = exp_avg_sq.f_sqrt()?;
                let _ = sqrt.f_add_scalar_(o.eps)?;
                // torch: `(bias_correction2 ** 0.5) / sqrt`, a reciprocal times the number.
                let adaptive = sqrt.f_reciprocal()?.f_mul_scalar(py_pow(bias_correction2, 0.5))?;
                corrected.f_mul_scalar(lr)?.f_mul(&adaptive)?.f_mul_scalar(rect)?
            } else {
                corrected.f_mul_scalar(lr)?
            };
            add_scaled_(&mut param, &update, -1.0)
        })
    }
}

super::optimizer_via_core!(RAdam, "radam";
    fn foreach(&self) -> Option<bool> {
        self.core.foreach
    }
    fn set_foreach(&mut self, foreach: Option<bool>) -> Result<()> {
        let kind = self.name();
        super::foreach::set_foreach(&mut self.core, kind, foreach)
    }
);
