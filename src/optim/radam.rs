//! RAdam, `torch.optim.RAdam` (Adam with a rectified adaptive learning
//! rate).
use super::adam::check_beta;
use super::state::{add_scaled, add_scaled_, addcmul_, flag, read_flag, Core, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, Result};
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

const HYPERS: [&str; 4] = ["betas.1", "eps", "decoupled_weight_decay", "maximize"];
const SPEC: Spec =
    Spec { kind: "radam", has_step: true, required: &["exp_avg", "exp_avg_sq"], optional: &[], scalars: &[] };

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
        opts.validate()?;
        Ok(RAdam { core: Core::new(params, opts.lr, opts.weight_decay, opts.betas.0)?, opts })
    }

    /// The options (defaults for new groups; others used by every group).
    pub fn options(&self) -> &RAdamOptions {
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
                    ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)).powf(0.5);
                let mut sqrt = exp_avg_sq.f_sqrt()?;
                let _ = sqrt.f_add_scalar_(o.eps)?;
                // torch: `(bias_correction2 ** 0.5) / sqrt`, a reciprocal times the number.
                let adaptive = sqrt.f_reciprocal()?.f_mul_scalar(bias_correction2.powf(0.5))?;
                corrected.f_mul_scalar(lr)?.f_mul(&adaptive)?.f_mul_scalar(rect)?
            } else {
                corrected.f_mul_scalar(lr)?
            };
            add_scaled_(&mut param, &update, -1.0)
        })
    }

    fn add_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
        let o = self.opts;
        self.core.add_group(params, lr.unwrap_or(o.lr), o.weight_decay, o.betas.0)
    }

    fn save(&self) -> Result<Vec<(String, Tensor)>> {
        let o = &self.opts;
        let values = [o.betas.1, o.eps, flag(o.decoupled_weight_decay), flag(o.maximize)];
        let hypers: Vec<(&str, f64)> = HYPERS.iter().copied().zip(values).collect();
        self.core.state_dict(&SPEC, &hypers)
    }

    fn load(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let parsed = self.core.parse(&SPEC, state, &HYPERS)?;
        let mut opts = self.opts;
        if let [beta2, eps, decoupled, maximize] = parsed.hypers[..] {
            opts.betas.1 = beta2;
            opts.eps = eps;
            opts.decoupled_weight_decay = read_flag("radam", "decoupled_weight_decay", decoupled)?;
            opts.maximize = read_flag("radam", "maximize", maximize)?;
        }
        opts.validate().map_err(|e| Error::format(format!("radam state dict: {}", e.message)))?;
        self.opts = opts;
        self.core.commit(parsed);
        Ok(())
    }
}

super::optimizer_via_core!(RAdam, "radam");
