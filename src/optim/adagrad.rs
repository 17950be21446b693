//! Adagrad, `torch.optim.Adagrad`.
use super::state::{add_scaled, addcdiv_, addcmul_, flag, read_flag, Core, Spec};
use super::{check_non_negative, Optimizer, ParamGroup};
use crate::error::{Error, Result};
use tch::Tensor;

/// Options of [`Adagrad`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdagradOptions {
    /// Learning rate (default 1e-2).
    pub lr: f64,
    /// Learning-rate decay per step: `lr / (1 + (step - 1) * lr_decay)`
    /// (default 0).
    pub lr_decay: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Starting value of the sum of squared gradients (default 0).
    pub initial_accumulator_value: f64,
    /// Term added to the denominator (default 1e-10).
    pub eps: f64,
    /// Maximize the objective instead of minimizing it (default false).
    pub maximize: bool,
}

impl Default for AdagradOptions {
    fn default() -> Self {
        AdagradOptions {
            lr: 1e-2,
            lr_decay: 0.0,
            weight_decay: 0.0,
            initial_accumulator_value: 0.0,
            eps: 1e-10,
            maximize: false,
        }
    }
}

impl AdagradOptions {
    /// Checks the options as torch does.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        check_non_negative("lr_decay value", self.lr_decay)?;
        check_non_negative("weight_decay value", self.weight_decay)?;
        check_non_negative("initial_accumulator_value value", self.initial_accumulator_value)?;
        check_non_negative("epsilon value", self.eps)
    }
}

const HYPERS: [&str; 4] = ["lr_decay", "initial_accumulator_value", "eps", "maximize"];
const SPEC: Spec = Spec { kind: "adagrad", has_step: true, required: &["sum"], optional: &[], scalars: &[] };

/// Adagrad with the update rule of torch's `_single_tensor_adagrad` (dense
/// gradients). A parameter's sum starts at `initial_accumulator_value` on
/// its first step with a gradient (torch creates it with the optimizer).
#[derive(Debug)]
pub struct Adagrad {
    core: Core,
    opts: AdagradOptions,
}

impl Adagrad {
    /// An Adagrad optimizer over shallow clones of `params` (one group).
    pub fn new(params: Vec<Tensor>, opts: AdagradOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Adagrad { core: Core::new(params, opts.lr, opts.weight_decay, 0.0)?, opts })
    }

    /// The options (defaults for new groups; others used by every group).
    pub fn options(&self) -> &AdagradOptions {
        &self.opts
    }

    fn update(&mut self) -> Result<()> {
        let o = self.opts;
        self.core.for_each_grad(o.maximize, |g, p, mut grad, st| {
            if !st.buffers.contains_key("sum") {
                st.buffers.insert("sum", p.f_full_like(o.initial_accumulator_value)?);
            }
            st.step += 1.0;
            if g.weight_decay != 0.0 {
                grad = add_scaled(&grad, p, g.weight_decay)?;
            }
            let clr = g.lr / (1.0 + (st.step - 1.0) * o.lr_decay);
            let sum = st.buffer_or_zeros("sum", p)?;
            addcmul_(sum, &grad, &grad, 1.0)?;
            let mut std = sum.f_sqrt()?;
            let _ = std.f_add_scalar_(o.eps)?;
            addcdiv_(&mut p.shallow_clone(), &grad, &std, -clr)
        })
    }

    fn add_group(&mut self, params: Vec<Tensor>, lr: Option<f64>) -> Result<()> {
        let o = self.opts;
        self.core.add_group(params, lr.unwrap_or(o.lr), o.weight_decay, 0.0)
    }

    fn save(&self) -> Result<Vec<(String, Tensor)>> {
        let o = &self.opts;
        let values = [o.lr_decay, o.initial_accumulator_value, o.eps, flag(o.maximize)];
        let hypers: Vec<(&str, f64)> = HYPERS.iter().copied().zip(values).collect();
        self.core.state_dict(&SPEC, &hypers)
    }

    fn load(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let parsed = self.core.parse(&SPEC, state, &HYPERS)?;
        let mut opts = self.opts;
        if let [lr_decay, initial, eps, maximize] = parsed.hypers[..] {
            opts.lr_decay = lr_decay;
            opts.initial_accumulator_value = initial;
            opts.eps = eps;
            opts.maximize = read_flag("adagrad", "maximize", maximize)?;
        }
        opts.validate().map_err(|e| Error::format(format!("adagrad state dict: {}", e.message)))?;
        self.opts = opts;
        self.core.commit(parsed);
        Ok(())
    }
}

super::optimizer_via_core!(Adagrad, "adagrad");
