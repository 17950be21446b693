//! L-BFGS, `torch.optim.LBFGS`: a quasi-Newton method that re-evaluates
//! the loss through a closure, up to `max_iter` times per step, with a
//! fixed step or torch's strong-Wolfe line search.
use super::lbfgs_search::strong_wolfe;
use super::py_num::{py_min, truth, Cmp, Num};
use super::state::{deep_copy, extra, scalar, GroupOptions};
use super::{check_non_negative, check_params, GradReset, Optimizer, ParamGroup};
use crate::error::{Error, ErrorCode, Result};
use tch::Tensor;

/// The most update pairs L-BFGS may keep (`history_size`): torch sets no
/// bound, but each pair holds two copies of every parameter, so a larger
/// history cannot fit a real model.
pub(crate) const MAX_HISTORY: i64 = 1 << 20;

/// Options of [`Lbfgs`]; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LbfgsOptions {
    /// Learning rate: the step length of every iteration (the first is
    /// scaled by `min(1, 1 / |g|_1)`; default 1).
    pub lr: f64,
    /// Iterations per optimizer step (default 20).
    pub max_iter: i64,
    /// Loss evaluations per optimizer step; `None` is torch's
    /// `max_iter * 5 // 4`.
    pub max_eval: Option<i64>,
    /// Stop when every gradient entry is at most this in magnitude
    /// (default 1e-7).
    pub tolerance_grad: f64,
    /// Stop when the loss or the step changes less than this (default
    /// 1e-9).
    pub tolerance_change: f64,
    /// Update pairs kept (default 100; at most [`MAX_HISTORY`]).
    pub history_size: i64,
    /// Use the strong-Wolfe line search (torch's
    /// `line_search_fn="strong_wolfe"`); otherwise a fixed step of `lr`
    /// (default false).
    pub strong_wolfe: bool,
}

impl Default for LbfgsOptions {
    fn default() -> Self {
        LbfgsOptions {
            lr: 1.0,
            max_iter: 20,
            max_eval: None,
            tolerance_grad: 1e-7,
            tolerance_change: 1e-9,
            history_size: 100,
            strong_wolfe: false,
        }
    }
}

impl LbfgsOptions {
    /// `max_eval`, or torch's default for `max_iter`.
    pub fn resolved_max_eval(&self) -> i64 {
        self.max_eval.unwrap_or(self.max_iter.saturating_mul(5) / 4)
    }

    /// Checks the options: torch's checks, plus counts that can run
    /// (`max_iter`, `max_eval` and `history_size` at least 1, the history
    /// at most [`MAX_HISTORY`]) and finite tolerances.
    pub fn validate(&self) -> Result<()> {
        check_non_negative("learning rate", self.lr)?;
        let at_least_one = |what: &str, v: i64| {
            if v < 1 {
                return Err(Error::invalid(format!("invalid {what}: {v} (expected at least 1)")));
            }
            Ok(())
        };
        at_least_one("max_iter", self.max_iter)?;
        at_least_one("max_eval", self.resolved_max_eval())?;
        at_least_one("history_size", self.history_size)?;
        if self.history_size > MAX_HISTORY {
            return Err(Error::invalid(format!(
                "invalid history_size: {} (at most {MAX_HISTORY} update pairs)",
                self.history_size
            )));
        }
        for (what, v) in [("tolerance_grad", self.tolerance_grad), ("tolerance_change", self.tolerance_change)] {
            if !v.is_finite() {
                return Err(Error::invalid(format!("invalid {what}: {v} (expected a finite value)")));
            }
        }
        Ok(())
    }
}

/// A whole number kept as f64 in a group, or an error.
fn whole(what: &str, v: f64) -> Result<i64> {
    if v.fract() != 0.0 || !(0.0..=i64::MAX as f64).contains(&v) {
        return Err(Error::invalid(format!("invalid {what}: {v} (expected a whole number)")));
    }
    Ok(v as i64)
}

impl GroupOptions for LbfgsOptions {
    const EXTRAS: &'static [&'static str] =
        &["max_iter", "max_eval", "tolerance_grad", "tolerance_change", "history_size", "line_search_fn"];
    fn basics(&self) -> (f64, f64, f64) {
        (self.lr, 0.0, 0.0)
    }
    fn extras(&self) -> Vec<f64> {
        vec![
            self.max_iter as f64,
            self.resolved_max_eval() as f64,
            self.tolerance_grad,
            self.tolerance_change,
            self.history_size as f64,
            super::state::flag(self.strong_wolfe),
        ]
    }
    fn of_group(&self, g: &ParamGroup) -> Self {
        // Values that are not whole read as 0 and fail `validate`.
        let count = |i: usize, default: i64| {
            let v = extra(g, i, default as f64);
            if v.fract() == 0.0 && (0.0..=i64::MAX as f64).contains(&v) {
                v as i64
            } else {
                0
            }
        };
        LbfgsOptions {
            lr: g.lr,
            max_iter: count(0, self.max_iter),
            max_eval: Some(count(1, self.resolved_max_eval())),
            tolerance_grad: extra(g, 2, self.tolerance_grad),
            tolerance_change: extra(g, 3, self.tolerance_change),
            history_size: count(4, self.history_size),
            strong_wolfe: extra(g, 5, super::state::flag(self.strong_wolfe)) != 0.0,
        }
    }
    fn maximize(&self) -> bool {
        false
    }
    fn validate(&self) -> Result<()> {
        LbfgsOptions::validate(self)
    }
}

/// What L-BFGS keeps between steps (torch's `state[params[0]]`).
#[derive(Debug, Default)]
struct History {
    func_evals: i64,
    n_iter: i64,
    /// The last direction.
    d: Option<Tensor>,
    /// The last step length.
    t: Option<Num>,
    /// Gradient differences `y`, newest last.
    old_dirs: Vec<Tensor>,
    /// Steps `s`, newest last.
    old_stps: Vec<Tensor>,
    /// `1 / (y . s)` of each pair.
    ro: Vec<Num>,
    /// The scale of the initial inverse Hessian.
    h_diag: Option<Num>,
    prev_flat_grad: Option<Tensor>,
    prev_loss: Option<f64>,
    /// The two-loop recursion's coefficients (torch's `al`; scratch, kept
    /// for a faithful state dict), grown as pairs are used.
    al: Option<Vec<Option<Num>>>,
}

impl Clone for History {
    fn clone(&self) -> Self {
        let shallow = |v: &[Tensor]| v.iter().map(Tensor::shallow_clone).collect();
        History {
            func_evals: self.func_evals,
            n_iter: self.n_iter,
            d: self.d.as_ref().map(Tensor::shallow_clone),
            t: self.t.clone(),
            old_dirs: shallow(&self.old_dirs),
            old_stps: shallow(&self.old_stps),
            ro: self.ro.clone(),
            h_diag: self.h_diag.clone(),
            prev_flat_grad: self.prev_flat_grad.as_ref().map(Tensor::shallow_clone),
            prev_loss: self.prev_loss,
            al: self.al.clone(),
        }
    }
}

/// L-BFGS with torch's update, stopping rules and line search, over one
/// parameter group (torch refuses more). It steps only with a closure
/// ([`Optimizer::step_with_closure`]); its state is global, kept as
/// torch keeps it on the first parameter.
#[derive(Debug)]
pub struct Lbfgs {
    groups: Vec<ParamGroup>,
    opts: LbfgsOptions,
    /// `None` until the first step.
    history: Option<History>,
    grad_reset: GradReset,
}

impl Lbfgs {
    /// An L-BFGS optimizer over shallow clones of `params`.
    pub fn new(params: Vec<Tensor>, opts: LbfgsOptions) -> Result<Self> {
        opts.validate()?;
        if params.is_empty() {
            return Err(Error::invalid("optimizer got an empty parameter list"));
        }
        check_params(&[], &params)?;
        let mut group = ParamGroup::new(&params, opts.lr, 0.0, 0.0);
        group.extras = opts.extras();
        Ok(Lbfgs { groups: vec![group], opts, history: None, grad_reset: GradReset::default() })
    }

    /// The options the optimizer was made with (its group keeps its own
    /// values: `param_groups`, `group_hyper`).
    pub fn options(&self) -> &LbfgsOptions {
        &self.opts
    }

    fn params(&self) -> &[Tensor] {
        &self.groups[0].params
    }

    /// Every gradient flattened into one vector (zeros for a parameter
    /// without one), torch's `_gather_flat_grad`.
    fn gather_flat_grad(&self) -> Result<Tensor> {
        let mut views = Vec::with_capacity(self.params().len());
        for p in self.params() {
            let g = p.grad();
            views.push(if !g.defined() {
                p.f_zeros_like()?.f_reshape([-1i64])?
            } else if g.is_sparse() {
                g.f_to_dense(None, false)?.f_reshape([-1i64])?
            } else {
                g.f_reshape([-1i64])?
            });
        }
        Ok(Tensor::f_cat(&views, 0)?)
    }

    /// `p += step * update[slice of p]` for every parameter.
    fn add_grad(&self, step: &Num, update: &Tensor) -> Result<()> {
        let alpha = step.value()?;
        let mut offset = 0i64;
        for p in self.params() {
            let n = p.numel() as i64;
            let part = update.f_narrow(0, offset, n)?.f_view_as(p)?;
            crate::tensor::scaled::add_(&mut p.shallow_clone(), &part, alpha)?;
            offset += n;
        }
        Ok(())
    }

    fn clone_params(&self) -> Result<Vec<Tensor>> {
        self.params().iter().map(deep_copy).collect()
    }

    fn set_params(&self, values: &[Tensor]) -> Result<()> {
        for (p, v) in self.params().iter().zip(values) {
            p.shallow_clone().f_copy_(v)?;
        }
        Ok(())
    }

    /// The loss and flat gradient at `x + t * d`, leaving the parameters
    /// at `x` (torch's `_directional_evaluate`).
    fn directional_evaluate(
        &self,
        closure: &mut dyn FnMut() -> Result<f64>,
        x: &[Tensor],
        t: &Num,
        d: &Tensor,
    ) -> Result<(f64, Tensor)> {
        self.add_grad(t, d)?;
        let loss = evaluate(closure)?;
        let flat_grad = self.gather_flat_grad()?;
        self.set_params(x)?;
        Ok((loss, flat_grad))
    }

    /// torch's `LBFGS.step(closure)`. A step either completes or leaves
    /// the parameters and the history as they were before it (the
    /// parameters are copied first).
    fn run(&mut self, closure: &mut dyn FnMut() -> Result<f64>) -> Result<f64> {
        let before = tch::no_grad(|| self.clone_params())?;
        let result = crate::tensor::tch_panic::catch(|| self.run_step(closure));
        if result.is_err() {
            let _guard = tch::no_grad_guard();
            // The step's own error is the one reported.
            let _ = self.set_params(&before);
        }
        result
    }

    fn run_step(&mut self, closure: &mut dyn FnMut() -> Result<f64>) -> Result<f64> {
        let _guard = tch::no_grad_guard();
        let o = self.opts.of_group(&self.groups[0]);
        o.validate()?;
        let lr = self.groups[0].lr;
        let max_eval = o.resolved_max_eval();
        let mut st = self.history.clone().unwrap_or_default();
        let orig_loss = evaluate(closure)?;
        let mut loss = orig_loss;
        let mut current_evals = 1i64;
        st.func_evals += 1;
        let mut flat_grad = self.gather_flat_grad()?;
        let small = |g: &Tensor, tol: f64| -> Result<bool> { truth(&g.f_abs()?.f_max()?.f_le(tol)?) };
        let mut opt_cond = small(&flat_grad, o.tolerance_grad)?;
        if opt_cond {
            self.history = Some(st);
            return Ok(orig_loss);
        }
        let mut n_iter = 0;
        while n_iter < o.max_iter {
            n_iter += 1;
            st.n_iter += 1;
            // The descent direction.
            let d = if st.n_iter == 1 {
                st.old_dirs.clear();
                st.old_stps.clear();
                st.ro.clear();
                st.h_diag = Some(Num::F(1.0));
                flat_grad.f_neg()?
            } else {
                self.two_loop(&mut st, &flat_grad, o.history_size)?
            };
            // A new tensor rather than torch's copy_ into the old one: the
            // kept history must not change until the step completes.
            st.prev_flat_grad = Some(deep_copy(&flat_grad)?);
            let prev_loss = loss;
            st.prev_loss = Some(loss);
            // The step length.
            let mut t = if st.n_iter == 1 {
                let inv = Num::F(1.0).div(&Num::T(flat_grad.f_abs()?.f_sum(None)?))?;
                py_min(&Num::F(1.0), &inv)?.mul(&Num::F(lr))?
            } else {
                Num::F(lr)
            };
            let gtd = Num::T(flat_grad.f_dot(&d)?);
            st.d = Some(d.shallow_clone());
            st.t = Some(t.clone());
            if gtd.cmp(Cmp::Gt, &Num::F(-o.tolerance_change))? {
                break;
            }
            let mut ls_func_evals = 0;
            if o.strong_wolfe {
                let x = self.clone_params()?;
                let this = &*self;
                let mut eval = |t: &Num| this.directional_evaluate(closure, &x, t, &d);
                let found = strong_wolfe(&mut eval, t, &d, loss, &flat_grad, &gtd, max_eval - current_evals)?;
                (loss, flat_grad, t, ls_func_evals) = (found.loss, found.flat_grad, found.t, found.evals);
                st.t = Some(t.clone());
                self.add_grad(&t, &d)?;
                opt_cond = small(&flat_grad, o.tolerance_grad)?;
            } else {
                self.add_grad(&t, &d)?;
                if n_iter != o.max_iter {
                    // Re-evaluated only when another iteration follows.
                    loss = evaluate(closure)?;
                    flat_grad = self.gather_flat_grad()?;
                    opt_cond = small(&flat_grad, o.tolerance_grad)?;
                    ls_func_evals = 1;
                }
            }
            current_evals += ls_func_evals;
            st.func_evals += ls_func_evals;
            if n_iter == o.max_iter || current_evals >= max_eval || opt_cond {
                break;
            }
            let moved = match &t {
                Num::F(v) => d.f_mul_scalar(*v)?,
                Num::T(v) => d.f_mul(v)?,
            };
            if small(&moved, o.tolerance_change)? || (loss - prev_loss).abs() < o.tolerance_change {
                break;
            }
        }
        self.history = Some(st);
        Ok(orig_loss)
    }

    /// The L-BFGS direction: updates the history with the last step, then
    /// applies the approximate inverse Hessian to the negative gradient
    /// (the two-loop recursion in one buffer).
    fn two_loop(&self, st: &mut History, flat_grad: &Tensor, history_size: i64) -> Result<Tensor> {
        let missing =
            || Error::state("LBFGS history is incomplete (a state dict without `d`, `t` or `prev_flat_grad`)");
        let prev = st.prev_flat_grad.as_ref().ok_or_else(missing)?;
        let (d, t) = (st.d.as_ref().ok_or_else(missing)?, st.t.as_ref().ok_or_else(missing)?);
        let y = flat_grad.f_sub(prev)?;
        let s = match t {
            Num::F(v) => d.f_mul_scalar(*v)?,
            Num::T(v) => d.f_mul(v)?,
        };
        let ys = y.f_dot(&s)?;
        if truth(&ys.f_gt(1e-10)?)? {
            if st.old_dirs.len() as i64 == history_size {
                let _ = st.old_dirs.remove(0);
                let _ = st.old_stps.remove(0);
                st.ro.remove(0);
            }
            st.ro.push(Num::T(ys.f_reciprocal()?));
            st.h_diag = Some(Num::T(ys.f_div(&y.f_dot(&y)?)?));
            st.old_dirs.push(y);
            st.old_stps.push(s);
        }
        let num_old = st.old_dirs.len();
        let al = st.al.get_or_insert_with(Vec::new);
        if al.len() < num_old {
            al.resize(num_old, None);
        }
        let mut q = flat_grad.f_neg()?;
        for i in (0..num_old).rev() {
            let a = Num::T(st.old_stps[i].f_dot(&q)?).mul(&st.ro[i])?;
            crate::tensor::scaled::add_(&mut q, &st.old_dirs[i], -a.value()?)?;
            al[i] = Some(a);
        }
        let mut r = match st.h_diag.as_ref().ok_or_else(missing)? {
            Num::F(v) => q.f_mul_scalar(*v)?,
            Num::T(h) => q.f_mul(h)?,
        };
        let pairs = st.old_dirs.iter().zip(&st.old_stps).zip(&st.ro).zip(al.iter());
        for (((y, s), ro), a) in pairs {
            let be_i = Num::T(y.f_dot(&r)?).mul(ro)?;
            let a = a.as_ref().ok_or_else(missing)?;
            crate::tensor::scaled::add_(&mut r, s, a.sub(&be_i)?.value()?)?;
        }
        Ok(r)
    }
}

/// Calls the closure with gradients on (torch's `enable_grad` around it).
fn evaluate(closure: &mut dyn FnMut() -> Result<f64>) -> Result<f64> {
    tch::with_grad(closure)
}

impl Optimizer for Lbfgs {
    fn name(&self) -> &'static str {
        "lbfgs"
    }

    fn step(&mut self) -> Result<()> {
        Err(Error::new(
            ErrorCode::Unsupported,
            "LBFGS re-evaluates the loss during its step: step it with a closure (fulmen_optimizer_step_closure), \
             or let the trainer's automatic optimization step it",
        ))
    }

    fn needs_closure(&self) -> bool {
        true
    }

    fn step_with_closure(&mut self, closure: &mut dyn FnMut() -> Result<f64>) -> Result<f64> {
        self.run(closure)
    }

    fn zero_grad(&mut self) {
        self.grad_reset.run(&self.groups);
    }

    fn param_groups(&self) -> &[ParamGroup] {
        &self.groups
    }

    fn param_groups_mut(&mut self) -> &mut [ParamGroup] {
        &mut self.groups
    }

    fn add_param_group(&mut self, _params: Vec<Tensor>, _lr: Option<f64>) -> Result<()> {
        Err(Error::invalid("LBFGS doesn't support per-parameter options (parameter groups)"))
    }

    fn group_extras(&self) -> &'static [&'static str] {
        LbfgsOptions::EXTRAS
    }

    fn check_group(&self, group: &ParamGroup) -> Result<()> {
        check_group_values(&self.opts, group)
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        super::lbfgs_state::save(&self.groups[0], self.history.as_ref().map(HistoryView::of))
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let read = super::lbfgs_state::load(state, &self.groups[0], &self.opts)?;
        let g = &mut self.groups[0];
        g.lr = read.group.lr;
        g.initial_lr = read.group.initial_lr;
        g.extras = read.group.extras;
        self.history = read.history.map(HistoryView::into_history);
        Ok(())
    }
}

/// Checks a group's values: whole counts where torch keeps ints, no
/// weight decay or momentum (LBFGS has neither), then the options' checks.
pub(crate) fn check_group_values(defaults: &LbfgsOptions, group: &ParamGroup) -> Result<()> {
    for (i, name) in LbfgsOptions::EXTRAS.iter().enumerate() {
        let v = extra(group, i, f64::NAN);
        match *name {
            "max_iter" | "max_eval" | "history_size" => {
                whole(name, v)?;
            }
            "line_search_fn" if v != 0.0 && v != 1.0 => {
                return Err(Error::invalid(format!("invalid line_search_fn: {v} (0 for none, 1 for strong_wolfe)")))
            }
            _ => {}
        }
    }
    if group.weight_decay != 0.0 || group.momentum != 0.0 {
        return Err(Error::invalid("LBFGS has no weight_decay or momentum"));
    }
    defaults.of_group(group).validate()
}

/// The history as the state module reads and writes it.
pub(crate) struct HistoryView {
    pub func_evals: i64,
    pub n_iter: i64,
    pub d: Option<Tensor>,
    pub t: Option<Num>,
    pub old_dirs: Vec<Tensor>,
    pub old_stps: Vec<Tensor>,
    pub ro: Vec<Num>,
    pub h_diag: Option<Num>,
    pub prev_flat_grad: Option<Tensor>,
    pub prev_loss: Option<f64>,
    pub al: Vec<Option<Num>>,
}

impl HistoryView {
    fn of(h: &History) -> HistoryView {
        let h = h.clone();
        HistoryView {
            func_evals: h.func_evals,
            n_iter: h.n_iter,
            d: h.d,
            t: h.t,
            old_dirs: h.old_dirs,
            old_stps: h.old_stps,
            ro: h.ro,
            h_diag: h.h_diag,
            prev_flat_grad: h.prev_flat_grad,
            prev_loss: h.prev_loss,
            al: h.al.unwrap_or_default(),
        }
    }

    fn into_history(self) -> History {
        History {
            func_evals: self.func_evals,
            n_iter: self.n_iter,
            d: self.d,
            t: self.t,
            old_dirs: self.old_dirs,
            old_stps: self.old_stps,
            ro: self.ro,
            h_diag: self.h_diag,
            prev_flat_grad: self.prev_flat_grad,
            prev_loss: self.prev_loss,
            al: (!self.al.is_empty()).then_some(self.al),
        }
    }
}

/// Copies of a state's tensors (so later steps do not change a saved dict).
pub(crate) fn copy_num(n: &Num) -> Result<Tensor> {
    match n {
        Num::F(v) => scalar(*v),
        Num::T(t) => deep_copy(t),
    }
}
