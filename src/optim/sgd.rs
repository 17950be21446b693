//! Stochastic gradient descent, `torch.optim.SGD`.
use super::state::{add_scaled, add_scaled_, deep_copy, flag, read_flag, Core, ParamState, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, Result};
use tch::Tensor;

/// Options of [`Sgd`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdOptions {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Momentum factor (default 0).
    pub momentum: f64,
    /// Dampening of the momentum (default 0).
    pub dampening: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Nesterov momentum (default false); needs momentum > 0 and dampening 0.
    pub nesterov: bool,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for SgdOptions {
    fn default() -> Self {
        SgdOptions { lr: 1e-3, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false, maximize: false }
    }
}

impl SgdOptions {
    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("momentum value", self.momentum)?;
        check_non_negative("weight_decay value", self.weight_decay)?;
        if !self.dampening.is_finite() {
            return Err(Error::invalid(format!("invalid dampening value: {}", self.dampening)));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::invalid("Nesterov momentum requires a momentum and zero dampening"));
        }
        Ok(())
    }
}

const SPEC: Spec = Spec { kind: "sgd", has_step: false, required: &[], optional: &["momentum_buffer"], scalars: &[] };
const HYPERS: [&str; 3] = ["dampening", "nesterov", "maximize"];

/// SGD with optional momentum, dampening, Nesterov momentum, weight decay
/// and maximize, with the update rule of torch's `_single_tensor_sgd`.
#[derive(Debug)]
pub struct Sgd {
    core: Core,
    opts: SgdOptions,
}

impl Sgd {
    /// An SGD optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: SgdOptions) -> Result<Self> {
        opts.validate()?;
        let core = Core::new(params, opts.lr, opts.weight_decay, opts.momentum)?;
        Ok(Sgd { core, opts })
    }

    /// The options (defaults for new groups; flags used by every group).
    pub fn options(&self) -> &SgdOptions {
        &self.opts
    }
}

impl Optimizer for Sgd {
    fn name(&self) -> &'static str {
        "sgd"
    }

    fn step(&mut self) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let o = self.opts;
        self.core.sync_state_len();
        let mut index = 0;
        for g in &self.core.groups {
            for p in &g.params {
                let i = index;
                index += 1;
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                let mut grad = if o.maximize { grad.f_neg()? } else { grad };
                if g.weight_decay != 0.0 {
                    grad = add_scaled(&grad, p, g.weight_decay)?;
                }
                if g.momentum != 0.0 {
                    let st = self.core.state[i].get_or_insert_with(ParamState::default);
                    let buf = match st.buffers.get_mut("momentum_buffer") {
                        Some(buf) => {
                            let _ = buf.f_mul_scalar_(g.momentum)?;
                            add_scaled_(buf, &grad, 1.0 - o.dampening)?;
                            buf.shallow_clone()
                        }
                        None => {
                            let buf = deep_copy(&grad)?;
                            st.buffers.insert("momentum_buffer", buf.shallow_clone());
                            buf
                        }
                    };
                    grad = if o.nesterov { add_scaled(&grad, &buf, g.momentum)? } else { buf };
                }
                let mut p = p.shallow_clone();
                add_scaled_(&mut p, &grad, -g.lr)?;
            }
        }
        Ok(())
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
        let hypers = [o.dampening, flag(o.nesterov), flag(o.maximize)];
        let hypers: Vec<(&str, f64)> = HYPERS.iter().copied().zip(hypers).collect();
        self.core.state_dict(&SPEC, &hypers)
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let parsed = self.core.parse(&SPEC, state, &HYPERS)?;
        let mut opts = self.opts;
        if let [dampening, nesterov, maximize] = parsed.hypers[..] {
            opts.dampening = dampening;
            opts.nesterov = read_flag("sgd", "nesterov", nesterov)?;
            opts.maximize = read_flag("sgd", "maximize", maximize)?;
        }
        if !opts.dampening.is_finite() {
            return Err(Error::format(format!("sgd state dict: bad dampening {}", opts.dampening)));
        }
        self.opts = opts;
        self.core.commit(parsed);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
