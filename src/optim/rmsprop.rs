//! RMSprop, `torch.optim.RMSprop`.
use super::state::{add_scaled, add_scaled_, addcdiv_, addcmul_, flag, read_flag, Core, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, Result};
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

const HYPERS: [&str; 4] = ["alpha", "eps", "centered", "maximize"];
const SPEC: Spec = Spec {
    kind: "rmsprop",
    has_step: true,
    required: &["square_avg"],
    optional: &["momentum_buffer", "grad_avg"],
    scalars: &[],
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
        opts.validate()?;
        let core = Core::new(params, opts.lr, opts.weight_decay, opts.momentum)?;
        Ok(RmsProp { core, opts })
    }

    /// The options (defaults for new groups; others used by every group).
    pub fn options(&self) -> &RmsPropOptions {
        &self.opts
    }
}

impl Optimizer for RmsProp {
    fn name(&self) -> &'static str {
        "rmsprop"
    }

    fn step(&mut self) -> Result<()> {
        let o = self.opts;
        self.core.for_each_grad(o.maximize, |g, p, mut grad, st| {
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

    fn zero_grad(&mut self) {
        self.core.zero_grad();
    }

    fn param_groups(&self) -> &[ParamGroup] {
        &self.core.groups
    }

    fn param_groups_mut(&mut self) -> &mut [ParamGroup] {
        &mut self.core.groups
    }

    fn add_param_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
        let o = self.opts;
        self.core.add_group(params, lr.unwrap_or(o.lr), o.weight_decay, o.momentum)
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let o = &self.opts;
        let values = [o.alpha, o.eps, flag(o.centered), flag(o.maximize)];
        let hypers: Vec<(&str, f64)> = HYPERS.iter().copied().zip(values).collect();
        self.core.state_dict(&SPEC, &hypers)
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let parsed = self.core.parse(&SPEC, state, &HYPERS)?;
        let mut opts = self.opts;
        if let [alpha, eps, centered, maximize] = parsed.hypers[..] {
            opts.alpha = alpha;
            opts.eps = eps;
            opts.centered = read_flag("rmsprop", "centered", centered)?;
            opts.maximize = read_flag("rmsprop", "maximize", maximize)?;
        }
        if !(0.0..).contains(&opts.alpha) || !(0.0..).contains(&opts.eps) {
            return Err(Error::format(format!("rmsprop state dict: bad alpha {} or eps {}", opts.alpha, opts.eps)));
        }
        self.opts = opts;
        self.core.commit(parsed);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
