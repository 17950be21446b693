//! Stochastic gradient descent, `torch.optim.SGD`.
use super::state::{add_scaled, add_scaled_, deep_copy, extra, flag, Core, GroupOptions, ParamState, Spec};
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
    /// Checks the options as torch's constructor does.
    pub fn validate(&self) -> Result<()> {
        self.validate_values()?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::invalid("Nesterov momentum requires a momentum and zero dampening"));
        }
        Ok(())
    }

    /// Checks each number's range (torch checks Nesterov's needs only in
    /// the constructor: a group may drop its momentum).
    fn validate_values(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("momentum value", self.momentum)?;
        check_non_negative("weight_decay value", self.weight_decay)?;
        if !self.dampening.is_finite() {
            return Err(Error::invalid(format!("invalid dampening value: {}", self.dampening)));
        }
        Ok(())
    }
}

impl GroupOptions for SgdOptions {
    const EXTRAS: &'static [&'static str] = &["dampening", "nesterov", "maximize"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, self.momentum)
    }
    fn extras(&self) -> Vec<f64> {
        vec![self.dampening, flag(self.nesterov), flag(self.maximize)]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        SgdOptions {
            lr: g.lr,
            momentum: g.momentum,
            dampening: extra(g, 0, self.dampening),
            weight_decay: g.weight_decay,
            nesterov: extra(g, 1, flag(self.nesterov)) != 0.0,
            maximize: extra(g, 2, flag(self.maximize)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        self.maximize
    }
    fn validate(&self) -> Result<()> {
        self.validate_values()
    }
}

const SPEC: Spec =
    Spec { kind: "sgd", has_step: false, required: &[], optional: &["momentum_buffer"], scalars: &[], fixed: &[] };

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
        SgdOptions::validate(&opts)?;
        Ok(Sgd { core: Core::new(params, &opts)?, opts })
    }

    /// The defaults of new groups (each group keeps its own values:
    /// `param_groups`, `group_hyper`).
    pub fn options(&self) -> &SgdOptions {
        &self.opts
    }

    fn update(&mut self) -> Result<()> {
        self.update_scaled(None)
    }

    /// With `found_inf` (fused only): a loss scaler's device finding, as
    /// [`Optimizer::step_scaled`].
    fn update_scaled(&mut self, found_inf: Option<&Tensor>) -> Result<()> {
        if self.core.fused {
            return super::fused::sgd_step(&mut self.core, &self.opts, found_inf);
        }
        if found_inf.is_some() {
            return Err(super::fused::unscaled_kind("sgd"));
        }
        self.core.settle_steps()?;
        if super::foreach::uses_foreach(&self.core) {
            return super::foreach::sgd_step(&mut self.core, &self.opts);
        }
        let _guard = tch::no_grad_guard();
        let d = self.opts;
        self.core.sync_state_len();
        let mut index = 0;
        for g in &self.core.groups {
            let o = d.of_group(g);
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
}

super::optimizer_via_core!(Sgd, "sgd";
    fn supports_amp_scaling(&self) -> bool {
        self.core.fused
    }
    fn step_scaled(&mut self, found_inf: &Tensor) -> Result<()> {
        self.update_scaled(Some(found_inf))
    }
    fn fused(&self) -> bool {
        self.core.fused
    }
    fn set_fused(&mut self, fused: bool) -> Result<()> {
        let kind = self.name();
        super::fused::set_fused(&mut self.core, kind, fused)
    }
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
