//! Optimizers and learning-rate schedulers with the update rules of
//! `torch.optim` (single-tensor implementations, as PyTorch uses on CPU).
//!
//! An optimizer holds shallow clones of the parameter tensors: they share
//! storage and `.grad()` with the model's parameters, so [`Optimizer::step`]
//! updates the model in place (under `no_grad`). Per-parameter state is
//! created lazily on the first step that sees a gradient, like torch; a
//! parameter whose gradient is undefined is skipped.
//!
//! Parameters are numbered across groups in order (group 0 first), as in
//! torch's `state_dict`; that number keys the per-parameter state. Appending
//! tensors to a group through [`Optimizer::param_groups_mut`] is fine only for
//! the last group; reordering or removing parameters after a step misaligns
//! the state.
use crate::error::{Error, Result};
use tch::{Kind, Tensor};

/// Implements [`Optimizer`] for a type with `core: Core` and `opts` (a
/// `GroupOptions`) fields, a `SPEC` constant and an inherent `update`.
macro_rules! optimizer_via_core {
    ($t:ty, $name:literal $(; $($extra:tt)*)?) => {
        impl Optimizer for $t {
            $($($extra)*)?
            fn name(&self) -> &'static str {
                $name
            }
            fn step(&mut self) -> Result<()> {
                self.update()
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
                self.core.add_group(params, lr, &self.opts)
            }
            fn group_extras(&self) -> &'static [&'static str] {
                crate::optim::state::extra_names(&self.opts)
            }
            fn check_group(&self, group: &ParamGroup) -> Result<()> {
                crate::optim::state::GroupOptions::validate(&crate::optim::state::GroupOptions::of_group(
                    &self.opts, group,
                ))
            }
            fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
                self.core.save(&SPEC, &self.opts)
            }
            fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
                self.core.load(&SPEC, state, &self.opts)
            }
            fn graphed(&mut self) -> Option<Box<dyn crate::optim::graphed::GraphedUpdates + '_>> {
                Some(Box::new(crate::optim::graphed::CoreGraph { core: &mut self.core, kind: $name }))
            }
        }
    };
}
pub(crate) use optimizer_via_core;

mod adagrad;
mod adam;
mod adamax;
mod foreach;
mod foreach_adam_variants;
mod fused;
pub mod graphed;
pub mod group_hyper;
mod host;
mod lbfgs;
mod lbfgs_search;
mod lbfgs_state;
mod nadam;
mod py_num;
mod radam;
mod rmsprop;
pub mod scheduler;
mod sgd;
mod state;
pub mod state_file;

pub use adagrad::{Adagrad, AdagradOptions};
pub use adam::{Adam, AdamOptions, AdamW};
pub use adamax::{Adamax, AdamaxOptions};
pub use host::{HostOptimizer, HostRule};
pub(crate) use host::{HOST_STATE_KEY, MAX_OPTIMIZER_STATE};
pub(crate) use lbfgs::MAX_HISTORY;
pub use lbfgs::{Lbfgs, LbfgsOptions};
pub use nadam::{NAdam, NAdamOptions};
pub use radam::{RAdam, RAdamOptions};
pub use rmsprop::{RmsProp, RmsPropOptions};
pub(crate) use scheduler::MAX_CHAINED;
pub use scheduler::{
    check_sequential_milestones, AnnealStrategy, ChainedLr, ConstantLr, CosineAnnealingLr, CosineAnnealingWarmRestarts,
    CyclicLr, CyclicLrOptions, CyclicMode, ExponentialLr, LambdaLr, LinearLr, LrLambda, LrScheduler, MultiStepLr,
    OneCycleLr, OneCycleOptions, PlateauMode, PlateauOptions, PolynomialLr, ReduceLrOnPlateau, SequentialLr, StepLr,
    SwaLr, ThresholdMode,
};
pub use sgd::{Sgd, SgdOptions};
pub(crate) use state::deep_copy;

#[cfg(test)]
mod test_util;
#[cfg(test)]
mod torch_reference;

#[cfg(test)]
mod adaptive_tests;

#[cfg(test)]
mod foreach_tests;
#[cfg(test)]
mod foreach_variant_tests;
#[cfg(test)]
mod fused_tests;

#[cfg(test)]
mod group_tests;

#[cfg(test)]
mod lbfgs_tests;

/// torch's key for the momentum in an optimizer kind's param groups:
/// `"momentum"` (SGD, RMSprop, a host optimizer), `"betas.0"` (beta1 of the Adam family), or
/// none (Adagrad).
pub fn momentum_key(kind: &str) -> Option<&'static str> {
    match kind {
        "sgd" | "rmsprop" | "host" => Some("momentum"),
        "adam" | "adamw" | "adamax" | "nadam" | "radam" => Some("betas.0"),
        _ => None,
    }
}

/// A group of parameters sharing the schedulable hyperparameters.
#[derive(Debug)]
pub struct ParamGroup {
    /// Shallow clones of the parameters (same storage and grad as the model's).
    pub params: Vec<Tensor>,
    /// Learning rate.
    pub lr: f64,
    /// Weight decay (L2 added to the gradient; decoupled for AdamW).
    pub weight_decay: f64,
    /// Momentum for SGD and RMSprop, `beta1` for Adam and AdamW (what
    /// `OneCycleLR` cycles when `cycle_momentum` is on).
    pub momentum: f64,
    /// The learning rate recorded by the first scheduler attached to the
    /// optimizer (torch's `group["initial_lr"]`); `None` until then.
    pub initial_lr: Option<f64>,
    /// The optimizer kind's other constants for this group (`betas[1]`,
    /// `eps`, `alpha`, flags as 0 or 1, ...), in the order of
    /// [`Optimizer::group_extras`]; changed only through
    /// [`group_hyper::set`], which checks them.
    pub(crate) extras: Vec<f64>,
}

impl ParamGroup {
    /// The group's hyperparameters without its parameters (for checks).
    pub(crate) fn hypers(&self) -> ParamGroup {
        ParamGroup {
            extras: self.extras.clone(),
            initial_lr: self.initial_lr,
            ..ParamGroup::new(&[], self.lr, self.weight_decay, self.momentum)
        }
    }

    /// Makes a group of shallow clones of `params`.
    pub fn new(params: &[Tensor], lr: f64, weight_decay: f64, momentum: f64) -> Self {
        ParamGroup {
            params: params.iter().map(Tensor::shallow_clone).collect(),
            lr,
            weight_decay,
            momentum,
            initial_lr: None,
            extras: Vec::new(),
        }
    }
}

/// An optimizer over groups of parameters, with torch.optim semantics.
pub trait Optimizer: Send {
    /// Short name: `"sgd"`, `"adam"`, `"adamw"`, `"rmsprop"`, `"adagrad"`,
    /// `"adamax"`, `"nadam"`, `"radam"`, `"lbfgs"` or `"host"`.
    fn name(&self) -> &'static str;

    /// Performs one update of every parameter that has a gradient. An
    /// optimizer that [needs a closure](Optimizer::needs_closure) refuses
    /// with `Unsupported`.
    fn step(&mut self) -> Result<()>;

    /// Whether the step re-evaluates the loss (LBFGS): it then steps only
    /// through [`Optimizer::step_with_closure`].
    fn needs_closure(&self) -> bool {
        false
    }

    /// torch's `step(closure)`: `closure` computes the loss and its
    /// gradients (with gradients on, whatever the caller's mode) and
    /// returns the loss; the optimizer calls it as often as its algorithm
    /// needs (once for the others, before their update). Returns the
    /// first evaluation's loss, as torch does.
    fn step_with_closure(&mut self, closure: &mut dyn FnMut() -> Result<f64>) -> Result<f64> {
        let loss = tch::with_grad(closure)?;
        self.step()?;
        Ok(loss)
    }

    /// torch's `_step_supports_amp_scaling`: whether
    /// [`Optimizer::step_scaled`] takes a loss scaler's finding on the
    /// device (the fused SGD, Adam, AdamW and Adagrad updates).
    fn supports_amp_scaling(&self) -> bool {
        false
    }

    /// A step that a loss scaler's finding `found_inf` (a float32 0-dim
    /// tensor on the device, 1 after an inf or NaN gradient) skips on the
    /// device, as torch's fused updates do with `optimizer.found_inf`: the
    /// host reads nothing, and the step counts a skipped step added are
    /// taken back on the device (the host's copies are read back when they
    /// are needed: a saved state, an update that counts on the host). The
    /// gradients must be unscaled already. Kinds without it
    /// ([`Optimizer::supports_amp_scaling`] false) refuse with
    /// `Unsupported`.
    fn step_scaled(&mut self, found_inf: &Tensor) -> Result<()> {
        let _ = found_inf;
        Err(Error::new(
            crate::error::ErrorCode::Unsupported,
            format!(
                "{} cannot take a loss scaler's finding on the device (fused SGD, Adam, AdamW and Adagrad can)",
                self.name()
            ),
        ))
    }

    /// An error the optimizer kept from a call that cannot return one (a
    /// host optimizer's `zero_grad`), taken once; `None` for the built-in
    /// kinds.
    fn take_error(&mut self) -> Option<Error> {
        None
    }

    /// Resets the gradients of all parameters to undefined, torch's default
    /// `zero_grad(set_to_none=True)` (done through libtorch's C++ optimizer
    /// `zero_grad`, whose default is also set-to-none). Should that fail, the
    /// gradients are detached and zeroed instead (tch's `Tensor::zero_grad`).
    fn zero_grad(&mut self);

    /// The parameter groups.
    fn param_groups(&self) -> &[ParamGroup];

    /// Every parameter of every group, in order (sharing their storage).
    fn param_tensors(&self) -> Vec<Tensor> {
        self.param_groups().iter().flat_map(|g| g.params.iter().map(Tensor::shallow_clone)).collect()
    }

    /// The parameter groups, mutably (to change lr, weight_decay, momentum).
    fn param_groups_mut(&mut self) -> &mut [ParamGroup];

    /// Adds a group of parameters; `lr` defaults to the optimizer's default
    /// learning rate, other hyperparameters to the optimizer's defaults.
    fn add_param_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()>;

    /// torch's keys of the constants each group keeps besides `lr`,
    /// `weight_decay` and the momentum, in the order of
    /// [`ParamGroup::extras`] (Adam: `betas.1`, `eps`, `amsgrad`,
    /// `maximize`).
    fn group_extras(&self) -> &'static [&'static str];

    /// Checks a group's hyperparameters as torch's constructor checks
    /// options.
    fn check_group(&self, group: &ParamGroup) -> Result<()>;

    /// Learning rate of group 0.
    fn lr(&self) -> f64 {
        self.param_groups().first().map_or(0.0, |g| g.lr)
    }

    /// Sets the learning rate of every group.
    fn set_lr(&mut self, lr: f64) {
        for g in self.param_groups_mut() {
            g.lr = lr;
        }
    }

    /// torch's `fused=True`: whether the updates run as one libtorch
    /// kernel per group and device (SGD, Adam, AdamW, Adagrad). Saved with the
    /// state as every group's `fused` entry, and, as in torch, taken from
    /// a loaded state.
    fn fused(&self) -> bool {
        false
    }

    /// Turns the fused updates on or off. Kinds without them, and
    /// parameters they cannot take (not floating, or on a device without
    /// fused kernels), are refused with `Unsupported` when turning them on.
    fn set_fused(&mut self, fused: bool) -> Result<()> {
        if fused {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                format!("{} has no fused updates (SGD, Adam, AdamW and Adagrad have)", self.name()),
            ));
        }
        Ok(())
    }

    /// torch's `foreach`: `None` (the default) runs the foreach updates
    /// where torch does by default (every parameter on CUDA), `Some(true)`
    /// always, `Some(false)` never. Saved with the state as every group's
    /// `foreach` entry when set, and, as in torch, taken from a loaded
    /// state. Fused updates, when on, take precedence over the default.
    fn foreach(&self) -> Option<bool> {
        None
    }

    /// Chooses the foreach updates (every kind but LBFGS: torch's
    /// `_multi_tensor_*`, a few libtorch `_foreach_*` kernels per group and
    /// device instead of several per parameter). Kinds without them refuse
    /// `Some(true)` with `Unsupported` and keep nothing else; turning them
    /// on while the fused updates are on is refused (`InvalidArgument`).
    fn set_foreach(&mut self, foreach: Option<bool>) -> Result<()> {
        if foreach == Some(true) {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                format!("{} has no foreach updates (torch's has none either; every other kind has)", self.name()),
            ));
        }
        Ok(())
    }

    /// Full state as named tensors (per-param buffers, step counts, and every
    /// group's hyperparameters such as lr as 0-dim f64 tensors), names like
    /// `"state.3.exp_avg"`, `"param_groups.0.lr"`, so it fits in a safetensors
    /// file, plus `param_groups.N.params`, a 1-D i64 tensor of the numbers of
    /// the group's parameters. Tensors are copies: later steps do not change
    /// them.
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>>;

    /// Restores exactly what `state_dict` produced. Fails with a `Format`
    /// error on missing, unknown or malformed keys or a dict from another
    /// optimizer kind, and `ShapeMismatch` when a buffer's shape differs from
    /// its parameter's; on error the optimizer is unchanged.
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()>;

    /// Its steps inside device graphs (the trainer's `cuda_graphs`); `None`
    /// for kinds whose state lives on the host (LBFGS, host optimizers).
    fn graphed(&mut self) -> Option<Box<dyn graphed::GraphedUpdates + '_>> {
        None
    }
}

/// Sets gradients back to undefined (torch's `zero_grad(set_to_none=True)`).
///
/// tch cannot reset a gradient directly, so this keeps a libtorch C++
/// optimizer over the same parameters, used only for its `zero_grad` (which
/// is set-to-none in libtorch); it is built once and rebuilt only when the
/// parameter list grows.
#[derive(Default)]
pub(crate) struct GradReset {
    helper: Option<(tch::COptimizer, usize)>,
}

impl std::fmt::Debug for GradReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GradReset")
    }
}

impl GradReset {
    /// Resets the gradients of every parameter of `groups`.
    pub fn run(&mut self, groups: &[ParamGroup]) {
        let n: usize = groups.iter().map(|g| g.params.len()).sum();
        let reset = |this: &mut Self| -> std::result::Result<(), tch::TchError> {
            if this.helper.as_ref().is_none_or(|(_, count)| *count != n) {
                let mut helper = tch::COptimizer::sgd(0.0, 0.0, 0.0, 0.0, false)?;
                for p in groups.iter().flat_map(|g| g.params.iter()) {
                    helper.add_parameters(p, 0)?;
                }
                this.helper = Some((helper, n));
            }
            match this.helper.as_mut() {
                Some((h, _)) => h.zero_grad(),
                None => Ok(()),
            }
        };
        if reset(self).is_err() {
            self.helper = None;
            for p in groups.iter().flat_map(|g| g.params.iter()) {
                let mut p = p.shallow_clone();
                p.zero_grad();
            }
        }
    }
}

/// Checks that a hyperparameter is a finite number `>= 0`.
pub(crate) fn check_non_negative(what: &str, v: f64) -> Result<()> {
    if !(0.0..).contains(&v) || !v.is_finite() {
        return Err(Error::invalid(format!("invalid {what}: {v} (expected a finite value >= 0)")));
    }
    Ok(())
}

/// Whether two handles are the same parameter: the same storage address
/// and shape (parameters are shallow clones; tensors without plain
/// storage are never the same), as [`crate::nn::param_identity`] says.
pub(crate) fn same_param(a: &Tensor, b: &Tensor) -> bool {
    crate::nn::param_identity(a).is_some_and(|k| Some(k) == crate::nn::param_identity(b))
}

/// Checks a parameter list given to a constructor or `add_param_group`.
pub(crate) fn check_params(existing: &[ParamGroup], params: &[Tensor]) -> Result<()> {
    for (i, p) in params.iter().enumerate() {
        if !p.defined() {
            return Err(Error::invalid(format!("parameter {i} is an undefined tensor")));
        }
        if crate::nn::meta_init::is_meta(p) {
            return Err(Error::state(format!(
                "parameter {i} is on the meta device (the model was built in a meta-init scope): an optimizer \
                 needs the parameters that will train; build it once the model holds values (the trainer's \
                 configure_optimizers, after fulmen_fsdp wraps it, or after fulmen_model_materialize)"
            )));
        }
        if matches!(p.kind(), Kind::ComplexHalf | Kind::ComplexFloat | Kind::ComplexDouble) {
            return Err(Error::dtype(format!(
                "parameter {i} is complex ({:?}); fulmen optimizers support real tensors only",
                p.kind()
            )));
        }
    }
    let all: Vec<&Tensor> = existing.iter().flat_map(|g| g.params.iter()).collect();
    for (i, p) in params.iter().enumerate() {
        if all.iter().any(|q| same_param(p, q)) || params[..i].iter().any(|q| same_param(p, q)) {
            return Err(Error::invalid("some parameters appear in more than one parameter group"));
        }
    }
    Ok(())
}
