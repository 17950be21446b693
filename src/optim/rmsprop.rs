//! RMSprop, `torch.optim.RMSprop`.
use super::state::{add_scaled, add_scaled_, addcdiv_, addcmul_, extra, flag, Core, GroupOptions, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::Result;
use tch::Tensor;

/// Options of [`RmsProp`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsPropOptions {
    /// Learning rate (default 1e-2).
    pub lr: f64,
    /// Smoothing constant of the squared-gradient average (default 0.99).
    pub alpha: f64,
    /// Term added to the denominator (default 1e-8).
    pub eps: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Momentum factor (default 0).
    pub momentum: f64,
    /// Normalise by the estimated variance of the gradient (default false).
    pub centered: bool,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for RmsPropOptions {
    fn default() -> Self {
        RmsPropOptions {
            lr: 1e-2,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
            maximize: false,
        }
    }
}

impl RmsPropOptions {
    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("epsilon value", self.eps)?;
        check_non_negative("momentum value", self.momentum)?;
        check_non_negative("weight_decay value", self.weight_decay)?;
        check_non_negative("alpha value", self.alpha)
    }
}

impl GroupOptions for RmsPropOptions {
    const EXTRAS: &'static [&'static str] = &["alpha", "eps", "centered", "maximize"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, self.momentum)
    }
    fn extras(&self) -> Vec<f64> {
        vec![self.alpha, self.eps, flag(self.centered), flag(self.maximize)]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        RmsPropOptions {
            lr: g.lr,
            alpha: extra(g, 0, self.alpha),
            eps: extra(g, 1, self.eps),
            weight_decay: g.weight_decay,
            momentum: g.momentum,
            centered: extra(g, 2, flag(self.centered)) != 0.0,
            maximize: extra(g, 3, flag(self.maximize)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        self.maximize
    }
    fn validate(&self) -> Result<()> {
        RmsPropOptions::validate(self)
    }
}

const SPEC: Spec = Spec {
    kind: "rmsprop",
    has_step: true,
    required: &["square_avg"],
    optional: &["momentum_buffer", "grad_avg"],
    scalars: &[],
    fixed: &[],
};

/// RMSprop with optional momentum, centering, weight decay and maximize,
/// with the update rule of torch's `_single_tensor_rmsprop`.
#[derive(Debug)]
pub struct RmsProp {
    core: Core,
    opts: RmsPropOptions,
}

impl RmsProp {
    /// An RMSprop optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: RmsPropOptions) -> Result<Self> {
        Ok(RmsProp { core: Core::new(params, &opts)?, opts })
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &RmsPropOptions {
        &self.opts
    }

    /// torch's `_single_tensor_rmsprop` (`_multi_tensor_rmsprop` with
    /// foreach updates).
    fn update(&mut self) -> Result<()> {
        if super::foreach::uses_foreach(&self.core) {
            return super::foreach::rmsprop_step(&mut self.core, &self.opts);
        }
        self.core.for_each_grad(&self.opts, |g, o, p, mut grad, st| {
            st.buffer_or_zeros("square_avg", p)?;
            if g.momentum > 0.0 {
                st.buffer_or_zeros("momentum_buffer", p)?;
            }
            if o.centered {
                st.buffer_or_zeros("grad_avg", p)?;
            }
            st.step += 1.0;
            if g.weight_decay != 0.0 {
                grad = add_scaled(&grad, p, g.weight_decay)?;
            }
            let square_avg = st.buffer_or_zeros("square_avg", p)?;
            let _ = square_avg.f_mul_scalar_(o.alpha)?;
            addcmul_(square_avg, &grad, &grad, 1.0 - o.alpha)?;
            let square_avg = square_avg.shallow_clone();
            let mut avg = if o.centered {
                let grad_avg = st.buffer_or_zeros("grad_avg", p)?;
                let _ = grad_avg.f_lerp_(&grad, 1.0 - o.alpha)?;
                let grad_avg = grad_avg.shallow_clone();
                let mut avg = square_avg.f_addcmul(&grad_avg.f_neg()?, &grad_avg)?;
                let _ = avg.f_sqrt_()?;
                avg
            } else {
                square_avg.f_sqrt()?
            };
            let _ = avg.f_add_scalar_(o.eps)?;
            let mut param = p.shallow_clone();
            if g.momentum > 0.0 {
                let buf = st.buffer_or_zeros("momentum_buffer", p)?;
                let _ = buf.f_mul_scalar_(g.momentum)?;
                addcdiv_(buf, &grad, &avg, 1.0)?;
                add_scaled_(&mut param, buf, -g.lr)
            } else {
                addcdiv_(&mut param, &grad, &avg, -g.lr)
            }
        })
    }
}

super::optimizer_via_core!(RmsProp, "rmsprop";
    fn foreach(&self) -> Option<bool> {
        self.core.foreach
    }
    fn set_foreach(&mut self, foreach: Option<bool>) -> Result<()> {
        let kind = self.name();
        super::foreach::set_foreach(&mut self.core, kind, foreach)
    }
);

#[cfg(test)]
mod tests;
