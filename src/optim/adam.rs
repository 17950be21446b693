//! Adam and AdamW, `torch.optim.Adam` / `torch.optim.AdamW` (one shared
//! implementation; AdamW is Adam with decoupled weight decay, as in torch).
use super::state::{add_scaled, addcdiv_, addcmul_, extra, flag, Core, GroupOptions, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, Result};
use tch::Tensor;

/// Options of [`Adam`] and [`AdamW`]; the defaults are torch's Adam ones
/// (use [`AdamOptions::adamw`] for AdamW's, which has weight decay 1e-2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamOptions {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Coefficients of the running averages of the gradient and its square
    /// (default (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Term added to the denominator (default 1e-8).
    pub eps: f64,
    /// Weight decay: L2 added to the gradient for Adam, decoupled
    /// `p *= 1 - lr * wd` for AdamW (default 0, AdamW 1e-2).
    pub weight_decay: f64,
    /// Use the AMSGrad variant (default false).
    pub amsgrad: bool,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for AdamOptions {
    fn default() -> Self {
        AdamOptions { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0, amsgrad: false, maximize: false }
    }
}

impl AdamOptions {
    /// torch's AdamW defaults (weight decay 1e-2).
    pub fn adamw() -> Self {
        AdamOptions { weight_decay: 1e-2, ..Default::default() }
    }

    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("epsilon value", self.eps)?;
        check_beta(0, self.betas.0)?;
        check_beta(1, self.betas.1)?;
        check_non_negative("weight_decay value", self.weight_decay)
    }
}

/// Checks `0 <= beta < 1` as torch does.
pub(crate) fn check_beta(index: usize, beta: f64) -> Result<()> {
    if !(0.0..1.0).contains(&beta) {
        return Err(Error::invalid(format!(
            "invalid beta parameter at index {index}: {beta} (expected 0 <= beta < 1)"
        )));
    }
    Ok(())
}

impl GroupOptions for AdamOptions {
    const EXTRAS: &'static [&'static str] = &["betas.1", "eps", "amsgrad", "maximize"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, self.betas.0)
    }
    fn extras(&self) -> Vec<f64> {
        vec![self.betas.1, self.eps, flag(self.amsgrad), flag(self.maximize)]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        AdamOptions {
            lr: g.lr,
            betas: (g.momentum, extra(g, 0, self.betas.1)),
            eps: extra(g, 1, self.eps),
            weight_decay: g.weight_decay,
            amsgrad: extra(g, 2, flag(self.amsgrad)) != 0.0,
            maximize: extra(g, 3, flag(self.maximize)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        self.maximize
    }
    fn validate(&self) -> Result<()> {
        AdamOptions::validate(self)
    }
}

/// The shared implementation; `decoupled` selects AdamW.
#[derive(Debug)]
struct AdamCore {
    core: Core,
    opts: AdamOptions,
    decoupled: bool,
}

impl AdamCore {
    fn new(params: Vec<Tensor>, opts: AdamOptions, decoupled: bool) -> Result<Self> {
        Ok(AdamCore { core: Core::new(params, &opts)?, opts, decoupled })
    }

    fn kind(&self) -> &'static str {
        if self.decoupled {
            "adamw"
        } else {
            "adam"
        }
    }

    fn spec(&self) -> Spec {
        Spec {
            kind: self.kind(),
            has_step: true,
            required: &["exp_avg", "exp_avg_sq"],
            optional: &["max_exp_avg_sq"],
            scalars: &[],
            // torch's Adam(decoupled_weight_decay=True) is AdamW; fulmen
            // keeps the two kinds apart.
            fixed: if self.decoupled { &[("decoupled_weight_decay", 1.0)] } else { &[("decoupled_weight_decay", 0.0)] },
        }
    }

    /// torch's `_single_tensor_adam` (`_fused_adam` when fused,
    /// `_multi_tensor_adam` with foreach updates).
    /// With `found_inf` (fused only): a loss scaler's device finding, as
    /// [`Optimizer::step_scaled`].
    fn step(&mut self, found_inf: Option<&Tensor>) -> Result<()> {
        let decoupled = self.decoupled;
        if self.core.fused {
            return super::fused::adam_step(&mut self.core, &self.opts, decoupled, found_inf);
        }
        if found_inf.is_some() {
            return Err(super::fused::unscaled_kind(if decoupled { "adamw" } else { "adam" }));
        }
        self.core.settle_steps()?;
        if super::foreach::uses_foreach(&self.core) {
            return super::foreach::adam_step(&mut self.core, &self.opts, decoupled);
        }
        self.core.for_each_grad(&self.opts, |g, o, p, mut grad, st| {
            let (lr, beta1, beta2) = (g.lr, g.momentum, o.betas.1);
            let mut param = p.shallow_clone();
            st.buffer_or_zeros("exp_avg", p)?;
            st.buffer_or_zeros("exp_avg_sq", p)?;
            if o.amsgrad {
                st.buffer_or_zeros("max_exp_avg_sq", p)?;
            }
            st.step += 1.0;
            if g.weight_decay != 0.0 {
                if decoupled {
                    let _ = param.f_mul_scalar_(1.0 - lr * g.weight_decay)?;
                } else {
                    grad = add_scaled(&grad, p, g.weight_decay)?;
                }
            }
            let step = st.step;
            let exp_avg = st.buffer_or_zeros("exp_avg", p)?;
            let _ = exp_avg.f_lerp_(&grad, 1.0 - beta1)?;
            let exp_avg = exp_avg.shallow_clone();
            let exp_avg_sq = st.buffer_or_zeros("exp_avg_sq", p)?;
            let _ = exp_avg_sq.f_mul_scalar_(beta2)?;
            addcmul_(exp_avg_sq, &grad, &grad, 1.0 - beta2)?;
            let exp_avg_sq = exp_avg_sq.shallow_clone();

            let bias_correction1 = 1.0 - beta1.powf(step);
            let bias_correction2 = 1.0 - beta2.powf(step);
            let step_size = lr / bias_correction1;
            let bias_correction2_sqrt = super::py_num::py_pow(bias_correction2, 0.5);
            let second = if o.amsgrad {
                let max = st.buffer_or_zeros("max_exp_avg_sq", p)?;
                let m = max.f_maximum(&exp_avg_sq)?;
                max.f_copy_(&m)?;
                max.shallow_clone()
            } else {
                exp_avg_sq
            };
            let mut denom = second.f_sqrt()?.f_div_scalar(bias_correction2_sqrt)?;
            let _ = denom.f_add_scalar_(o.eps)?;
            addcdiv_(&mut param, &exp_avg, &denom, -step_size)
        })
    }

    fn add_param_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
        self.core.add_group(params, lr, &self.opts)
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        self.core.save(&self.spec(), &self.opts)
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.core.load(&self.spec(), state, &self.opts)
    }
}

/// Adam (L2 weight decay added to the gradient), with the update rule of
/// torch's `_single_tensor_adam`, including AMSGrad and maximize.
#[derive(Debug)]
pub struct Adam(AdamCore);

/// AdamW: Adam with decoupled weight decay `p *= 1 - lr * weight_decay`.
#[derive(Debug)]
pub struct AdamW(AdamCore);

impl Adam {
    /// An Adam optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: AdamOptions) -> Result<Self> {
        Ok(Adam(AdamCore::new(params, opts, false)?))
    }

    /// An AdamW optimizer (same as [`AdamW::new`]).
    pub fn new_w(params: Vec<Tensor>, opts: AdamOptions) -> Result<AdamW> {
        AdamW::new(params, opts)
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &AdamOptions {
        &self.0.opts
    }
}

impl AdamW {
    /// An AdamW optimizer over shallow clones of `params` (one group); pass
    /// [`AdamOptions::adamw`] for torch's AdamW defaults.
    pub fn new(params: Vec<Tensor>, opts: AdamOptions) -> Result<Self> {
        Ok(AdamW(AdamCore::new(params, opts, true)?))
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &AdamOptions {
        &self.0.opts
    }
}

macro_rules! impl_optimizer {
    ($t:ty, $name:literal) => {
        impl Optimizer for $t {
            fn name(&self) -> &'static str {
                $name
            }
            fn step(&mut self) -> Result<()> {
                self.0.step(None)
            }
            fn supports_amp_scaling(&self) -> bool {
                self.0.core.fused
            }
            fn step_scaled(&mut self, found_inf: &Tensor) -> Result<()> {
                self.0.step(Some(found_inf))
            }
            fn zero_grad(&mut self) {
                self.0.core.zero_grad();
            }
            fn param_groups(&self) -> &[ParamGroup] {
                &self.0.core.groups
            }
            fn param_groups_mut(&mut self) -> &mut [ParamGroup] {
                &mut self.0.core.groups
            }
            fn add_param_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
                self.0.add_param_group(params, lr)
            }
            fn group_extras(&self) -> &'static [&'static str] {
                AdamOptions::EXTRAS
            }
            fn fused(&self) -> bool {
                self.0.core.fused
            }
            fn set_fused(&mut self, fused: bool) -> Result<()> {
                let kind = self.name();
                super::fused::set_fused(&mut self.0.core, kind, fused)
            }
            fn foreach(&self) -> Option<bool> {
                self.0.core.foreach
            }
            fn set_foreach(&mut self, foreach: Option<bool>) -> Result<()> {
                let kind = self.name();
                super::foreach::set_foreach(&mut self.0.core, kind, foreach)
            }
            fn check_group(&self, group: &ParamGroup) -> Result<()> {
                self.0.opts.of_group(group).validate()
            }
            fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
                self.0.state_dict()
            }
            fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
                self.0.load_state_dict(state)
            }
            fn graphed(&mut self) -> Option<Box<dyn super::graphed::GraphedUpdates + '_>> {
                let kind = self.name();
                Some(Box::new(super::graphed::CoreGraph { core: &mut self.0.core, kind }))
            }
        }
    };
}

impl_optimizer!(Adam, "adam");
impl_optimizer!(AdamW, "adamw");

#[cfg(test)]
mod tests;
