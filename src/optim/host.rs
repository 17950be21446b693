//! An optimizer whose update rule is the host's own code: fulmen keeps its
//! parameter groups (lr, weight_decay, momentum, which schedulers and
//! `group_hyper` change as for any optimizer), zeroes gradients unless the
//! host does, and saves the host's state as opaque bytes beside the groups.
use super::state::{Core, GroupOptions, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, ErrorCode, Result};
use tch::{Kind, Tensor};

/// The most bytes a host optimizer's state may have (1 GiB,
/// FULMEN_MAX_OPTIMIZER_STATE), checked
/// before anything is copied or allocated for it.
pub(crate) const MAX_OPTIMIZER_STATE: usize = 1 << 30;

/// The flat state entry holding the host's bytes (a 1-D uint8 tensor);
/// torch's form keeps them as a `bytes` entry of the same name.
pub(crate) const HOST_STATE_KEY: &str = "host_state";

/// The host's side of a [`HostOptimizer`].
pub trait HostRule: Send {
    /// Updates the parameters of `groups` in place from their gradients
    /// (called under no_grad).
    fn step(&mut self, groups: &[ParamGroup]) -> Result<()>;

    /// Whether the host clears gradients itself ([`HostRule::zero_grad`]).
    fn has_zero_grad(&self) -> bool;

    /// Clears the gradients (`set_to_none` as torch's `zero_grad`).
    fn zero_grad(&mut self, set_to_none: bool) -> Result<()>;

    /// The host's state as bytes (empty for none), at most
    /// [`MAX_OPTIMIZER_STATE`].
    fn state(&self) -> Result<Vec<u8>>;

    /// Restores what [`HostRule::state`] gave (`bytes` empty: none saved).
    fn load_state(&mut self, bytes: &[u8]) -> Result<()>;
}

/// The group constants of a host optimizer: lr, weight_decay and momentum,
/// each finite and >= 0; no others.
#[derive(Debug, Clone, Copy)]
struct HostOptions {
    lr: f64,
    weight_decay: f64,
    momentum: f64,
}

impl GroupOptions for HostOptions {
    const EXTRAS: &'static [&'static str] = &[];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, self.weight_decay, self.momentum)
    }
    fn extras(&self) -> Vec<f64> {
        Vec::new()
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        HostOptions { lr: g.lr, weight_decay: g.weight_decay, momentum: g.momentum }
    }
    fn maximize(&self) -> bool {
        false
    }
    fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("weight_decay value", self.weight_decay)?;
        check_non_negative("momentum value", self.momentum)
    }
}

const SPEC: Spec = Spec { kind: "host", has_step: false, required: &[], optional: &[], scalars: &[], fixed: &[] };

/// An optimizer whose step is a [`HostRule`].
pub struct HostOptimizer {
    core: Core,
    opts: HostOptions,
    rule: Box<dyn HostRule>,
    /// The error of a host `zero_grad` (which [`Optimizer::zero_grad`]
    /// cannot return), reported by the next step or
    /// [`Optimizer::take_error`].
    pending: Option<Error>,
}

impl std::fmt::Debug for HostOptimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostOptimizer").field("core", &self.core).finish_non_exhaustive()
    }
}

impl HostOptimizer {
    /// One group of `params` with learning rate `lr` (weight_decay and
    /// momentum 0); `rule` is made only once the group is accepted.
    pub fn new(params: Vec<Tensor>, lr: f64, rule: impl FnOnce() -> Box<dyn HostRule>) -> Result<Self> {
        let opts = HostOptions { lr, weight_decay: 0.0, momentum: 0.0 };
        let core = Core::new(params, &opts)?;
        Ok(HostOptimizer { core, opts, rule: rule(), pending: None })
    }
}

/// The host's bytes from a flat state entry: a 1-D uint8 tensor of at most
/// [`MAX_OPTIMIZER_STATE`] elements.
fn host_bytes(t: &Tensor) -> Result<Vec<u8>> {
    if !t.defined() || t.dim() != 1 || t.kind() != Kind::Uint8 {
        return Err(Error::format(format!(
            "host optimizer state dict: '{HOST_STATE_KEY}' should be a 1-D uint8 tensor (got {:?} of shape {:?})",
            if t.defined() { Some(t.kind()) } else { None },
            if t.defined() { t.size() } else { Vec::new() }
        )));
    }
    let n = usize::try_from(t.size()[0]).unwrap_or(usize::MAX);
    if n > MAX_OPTIMIZER_STATE {
        return Err(Error::format(format!(
            "host optimizer state dict: '{HOST_STATE_KEY}' holds {n} bytes; at most {MAX_OPTIMIZER_STATE} are read"
        )));
    }
    Ok(Vec::<u8>::try_from(t)?)
}

impl Optimizer for HostOptimizer {
    fn name(&self) -> &'static str {
        "host"
    }

    fn step(&mut self) -> Result<()> {
        if let Some(e) = self.pending.take() {
            return Err(e.context("the host optimizer's zero_grad"));
        }
        let _guard = tch::no_grad_guard();
        self.rule.step(&self.core.groups)
    }

    fn zero_grad(&mut self) {
        if !self.rule.has_zero_grad() {
            self.core.zero_grad();
            return;
        }
        if let Err(e) = self.rule.zero_grad(true) {
            self.pending.get_or_insert(e);
        }
    }

    fn take_error(&mut self) -> Option<Error> {
        self.pending.take()
    }

    fn param_groups(&self) -> &[ParamGroup] {
        &self.core.groups
    }

    fn param_groups_mut(&mut self) -> &mut [ParamGroup] {
        &mut self.core.groups
    }

    fn add_param_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
        self.core.add_group(params, lr, &self.opts)
    }

    fn group_extras(&self) -> &'static [&'static str] {
        HostOptions::EXTRAS
    }

    fn check_group(&self, group: &ParamGroup) -> Result<()> {
        self.opts.of_group(group).validate()
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = self.core.save(&SPEC, &self.opts)?;
        let bytes = self.rule.state()?;
        if bytes.len() > MAX_OPTIMIZER_STATE {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("a host optimizer's state has {} bytes; at most {MAX_OPTIMIZER_STATE} are saved", bytes.len()),
            ));
        }
        if !bytes.is_empty() {
            out.push((HOST_STATE_KEY.to_string(), Tensor::f_from_slice(&bytes)?));
        }
        Ok(out)
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let mut groups = Vec::with_capacity(state.len());
        let mut host = None;
        for (k, t) in state {
            if k == HOST_STATE_KEY {
                if host.is_some() {
                    return Err(Error::format(format!("host optimizer state dict: duplicate key '{k}'")));
                }
                host = Some(host_bytes(t)?);
            } else {
                groups.push((k.clone(), t.shallow_clone()));
            }
        }
        // The groups are read (and checked) first, kept only once the host
        // took its bytes: on any error nothing changes on fulmen's side.
        let parsed = self.core.parse_checked(&SPEC, &groups, &self.opts)?;
        self.rule.load_state(host.as_deref().unwrap_or_default())?;
        self.core.commit(parsed);
        Ok(())
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
