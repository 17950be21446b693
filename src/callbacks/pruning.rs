//! Lightning's `ModelPruning` callback with torch.nn.utils.prune's
//! unstructured methods (`l1_unstructured`, `random_unstructured`),
//! per parameter or globally over all of them, at the end of each training
//! (or validation) epoch of fit.
//!
//! torch reparametrises a pruned parameter as `weight_orig * weight_mask`,
//! recomputed by a forward pre-hook before every forward. fulmen's models
//! hold plain parameters, so this callback keeps the masks and multiplies
//! each pruned parameter by its mask in place: when it prunes, and after
//! every training batch (an optimizer's momentum or weight decay may move
//! a pruned entry); before every optimizer step it masks the gradients
//! too, as torch's gradient of `weight_orig` is masked (so clipping norms
//! agree). Training sees torch's effective weights at every step, the
//! entries kept update as `weight_orig`'s do, and the model's state_dict
//! always holds the pruned weights: what Lightning saves with
//! `make_pruning_permanent`. The masks themselves are not in checkpoints
//! (neither are they in Lightning's permanent ones).
//!
//! The lottery ticket reset puts the kept entries back to their values at
//! fit's setup at every pruning. Lightning 2.6 on the CPU does so only at
//! the first (its copy of the first weights then shares the trained
//! weights' memory: `weight_orig.data = copy.data`); on a GPU it resets at
//! every pruning, as here.
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::to_device_of;
use crate::trainer::hooks::{Callback, Hook, HookContext};
use crate::trainer::SharedModel;
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

/// The most names `parameter_names` or `parameters_to_prune` may list.
pub const MAX_PRUNING_NAMES: usize = 65536;

/// Lightning's default `parameter_names`.
const PARAMETER_NAMES: [&str; 2] = ["weight", "bias"];

/// How the entries to prune are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruningMethod {
    /// torch's `l1_unstructured`: the entries of smallest magnitude.
    L1Unstructured,
    /// torch's `random_unstructured`: entries drawn from torch's generator.
    RandomUnstructured,
}

impl PruningMethod {
    /// Lightning's `pruning_fn` names (any case); the structured methods
    /// are refused.
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_lowercase().as_str() {
            "l1_unstructured" => Ok(Self::L1Unstructured),
            "random_unstructured" => Ok(Self::RandomUnstructured),
            "ln_structured" | "random_structured" => Err(Error::unsupported(format!(
                "ModelPruning: pruning_fn {name:?} (structured pruning) is not supported; \
                 use \"l1_unstructured\" or \"random_unstructured\""
            ))),
            _ => Err(Error::invalid(format!(
                "ModelPruning: pruning_fn {name:?} is not one of \"l1_unstructured\", \"random_unstructured\""
            ))),
        }
    }

    /// The name Lightning's sparsity log gives it: torch's class (global
    /// pruning) or function (per parameter).
    fn log_name(self, global: bool) -> &'static str {
        match (self, global) {
            (Self::L1Unstructured, true) => "L1Unstructured",
            (Self::L1Unstructured, false) => "l1_unstructured",
            (Self::RandomUnstructured, true) => "RandomUnstructured",
            (Self::RandomUnstructured, false) => "random_unstructured",
        }
    }
}

/// How much each pruning removes (Lightning's `amount`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PruningAmount {
    /// A fraction in [0, 1] of the entries not pruned yet.
    Fraction(f64),
    /// A number of entries (at most those not pruned yet).
    Count(i64),
}

impl PruningAmount {
    /// torch's `_validate_pruning_amount_init`.
    pub fn validate(self) -> Result<()> {
        let bad = match self {
            PruningAmount::Fraction(f) => !(0.0..=1.0).contains(&f),
            PruningAmount::Count(n) => n < 0,
        };
        if bad {
            return Err(Error::invalid(format!(
                "ModelPruning: amount={} should either be a float in the range [0, 1] or a non-negative integer",
                self.text()
            )));
        }
        Ok(())
    }

    /// Lightning skips a pruning of amount 0.
    fn is_zero(self) -> bool {
        match self {
            PruningAmount::Fraction(f) => f == 0.0,
            PruningAmount::Count(n) => n == 0,
        }
    }

    /// torch's `_compute_nparams_toprune` and `_validate_pruning_amount`:
    /// how many of the `alive` entries of `what` to prune (a fraction
    /// rounded half to even, as Python's `round`).
    fn entries(self, alive: i64, what: &str) -> Result<i64> {
        match self {
            PruningAmount::Fraction(f) => Ok((f * alive as f64).round_ties_even() as i64),
            PruningAmount::Count(n) if n > alive => Err(Error::new(
                ErrorCode::OutOfRange,
                format!("ModelPruning: amount={n} should be smaller than the number of parameters to prune={alive} ({what})"),
            )),
            PruningAmount::Count(n) => Ok(n),
        }
    }

    fn text(self) -> String {
        match self {
            PruningAmount::Fraction(f) => format!("{f}"),
            PruningAmount::Count(n) => n.to_string(),
        }
    }
}

/// The callback's arguments, Lightning's defaults but for `pruning_fn`
/// and `amount`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPruningOptions {
    /// Lightning's `pruning_fn`.
    pub method: PruningMethod,
    /// Lightning's `amount` (default 0.5).
    pub amount: PruningAmount,
    /// The parameters' own names (after the last dot) pruned in every
    /// module: "weight" and / or "bias" (empty: both, Lightning's default).
    pub parameter_names: Vec<String>,
    /// Lightning's `parameters_to_prune` as full parameter names
    /// ("0.weight"), in this order; empty: every module's
    /// `parameter_names`.
    pub parameters_to_prune: Vec<String>,
    /// Prune over all the parameters at once (default true).
    pub use_global_unstructured: bool,
    /// Prune at all (default true).
    pub apply_pruning: bool,
    /// Stop masking at the end of training (default true).
    pub make_pruning_permanent: bool,
    /// After each pruning, put the entries kept back to their values at
    /// fit's setup (default true).
    pub use_lottery_ticket_hypothesis: bool,
    /// Prune at the end of each training epoch (default), or else at the
    /// end of each validation run of fit (not the sanity check).
    pub prune_on_train_epoch_end: bool,
    /// 0 silent (default), 1 the overall sparsity on stderr after each
    /// pruning, 2 also each parameter's.
    pub verbose: i32,
}

impl ModelPruningOptions {
    /// Lightning's defaults with `method` and `amount`.
    pub fn new(method: PruningMethod, amount: PruningAmount) -> Self {
        ModelPruningOptions {
            method,
            amount,
            parameter_names: Vec::new(),
            parameters_to_prune: Vec::new(),
            use_global_unstructured: true,
            apply_pruning: true,
            make_pruning_permanent: true,
            use_lottery_ticket_hypothesis: true,
            prune_on_train_epoch_end: true,
            verbose: 0,
        }
    }

    /// Lightning's and torch's checks.
    pub fn validate(&self) -> Result<()> {
        self.amount.validate()?;
        if self.parameter_names.len() > MAX_PRUNING_NAMES || self.parameters_to_prune.len() > MAX_PRUNING_NAMES {
            return Err(Error::invalid(format!("ModelPruning: at most {MAX_PRUNING_NAMES} names")));
        }
        for name in &self.parameter_names {
            if !PARAMETER_NAMES.contains(&name.as_str()) {
                return Err(Error::invalid(format!(
                    "ModelPruning: the provided `parameter_names` name: {name:?} isn't in (\"weight\", \"bias\")"
                )));
            }
        }
        if let Some(name) = first_repeated(&self.parameter_names).or(first_repeated(&self.parameters_to_prune)) {
            return Err(Error::invalid(format!("ModelPruning: {name:?} is listed twice")));
        }
        if self.parameters_to_prune.iter().any(String::is_empty) {
            return Err(Error::invalid("ModelPruning: an empty name in parameters_to_prune"));
        }
        if !(0..=2).contains(&self.verbose) {
            return Err(Error::invalid(format!(
                "ModelPruning: `verbose` must be any of (0, 1, 2), got {}",
                self.verbose
            )));
        }
        Ok(())
    }
}

/// The first name listed twice.
fn first_repeated(names: &[String]) -> Option<&String> {
    names.iter().enumerate().find(|(i, n)| names[..*i].contains(*n)).map(|(_, n)| n)
}

/// The ModelPruning callback.
pub struct ModelPruning {
    opts: ModelPruningOptions,
    /// The parameters pruned (fit's setup), in Lightning's order.
    names: Vec<String>,
    /// Each pruned parameter's mask (its dtype: 1 kept, 0 pruned).
    masks: BTreeMap<String, Tensor>,
    /// The parameters' values at fit's setup (the lottery ticket's).
    originals: BTreeMap<String, Tensor>,
}

impl ModelPruning {
    /// The callback with `opts` (checked).
    pub fn new(opts: ModelPruningOptions) -> Result<Self> {
        opts.validate()?;
        Ok(ModelPruning { opts, names: Vec::new(), masks: BTreeMap::new(), originals: BTreeMap::new() })
    }

    /// The mask of parameter `name` (1 kept, 0 pruned), once pruned and
    /// until pruning is made permanent.
    pub fn mask(&self, name: &str) -> Option<&Tensor> {
        self.masks.get(name)
    }

    /// The parameters it prunes (known from fit's setup), in order.
    pub fn parameter_names(&self) -> &[String] {
        &self.names
    }

    fn on_setup(&mut self, model: &SharedModel) -> Result<()> {
        let params = named_parameters(model);
        let names = select(&params, &self.opts)?;
        if self.opts.make_pruning_permanent {
            self.masks.clear();
        } else {
            // The reparametrisation Lightning leaves on the model goes on.
            self.masks.retain(|k, _| names.contains(k));
        }
        self.originals.clear();
        if self.opts.use_lottery_ticket_hypothesis {
            let _guard = tch::no_grad_guard();
            for (name, t) in params.iter().filter(|(k, _)| names.contains(k)) {
                self.originals.insert(name.clone(), crate::optim::deep_copy(t)?);
            }
        }
        self.names = names;
        Ok(())
    }

    /// The pruned parameters of `model`, in `names` order.
    fn targets(&self, model: &SharedModel) -> Result<Vec<(String, Tensor)>> {
        let mut params: BTreeMap<String, Tensor> = named_parameters(model).into_iter().collect();
        self.names
            .iter()
            .map(|n| {
                params
                    .remove(n)
                    .map(|t| (n.clone(), t))
                    .ok_or_else(|| Error::state(format!("ModelPruning: the model no longer has parameter {n:?}")))
            })
            .collect()
    }

    /// Multiplies every pruned parameter by its mask (torch's forward
    /// pre-hook: the weights the next forward sees).
    fn apply_masks(&self, model: &SharedModel) -> Result<()> {
        if self.masks.is_empty() {
            return Ok(());
        }
        let _guard = tch::no_grad_guard();
        for (name, p) in named_parameters(model) {
            if let Some(mask) = self.masks.get(&name) {
                let _ = p.f_detach()?.f_mul_(&like(mask, &p)?)?;
            }
        }
        Ok(())
    }

    /// Masks the gradients of the pruned parameters (torch's gradient of
    /// `weight_orig` is the effective weight's times the mask).
    fn mask_grads(&self, model: &SharedModel) -> Result<()> {
        if self.masks.is_empty() {
            return Ok(());
        }
        let _guard = tch::no_grad_guard();
        for (name, p) in named_parameters(model) {
            if let Some(mask) = self.masks.get(&name) {
                let mut grad = p.grad();
                if grad.defined() {
                    let _ = grad.f_mul_(&like(mask, &grad)?)?;
                }
            }
        }
        Ok(())
    }

    /// Lightning's `_run_pruning`: prunes `amount` more, puts the kept
    /// entries back to their first values (lottery ticket), masks.
    fn run_pruning(&mut self, model: &SharedModel, global_rank: usize) -> Result<()> {
        if !self.opts.apply_pruning || self.opts.amount.is_zero() {
            return Ok(());
        }
        let targets = self.targets(model)?;
        let verbose = self.opts.verbose > 0 && global_rank == 0;
        let before = if verbose { self.stats(&targets)? } else { Vec::new() };
        self.prune(&targets, self.opts.amount)?;
        let _guard = tch::no_grad_guard();
        for (name, t) in &targets {
            if let Some(first) = self.originals.get(name).filter(|_| self.opts.use_lottery_ticket_hypothesis) {
                t.f_detach()?.f_copy_(&to_device_of(first, t)?)?;
            }
            if let Some(mask) = self.masks.get(name) {
                let _ = t.f_detach()?.f_mul_(&like(mask, t)?)?;
            }
        }
        if verbose {
            self.log_sparsity(&targets, &before, &self.stats(&targets)?);
        }
        Ok(())
    }

    /// New masks for `targets`: `amount` more entries pruned in each
    /// parameter, or over all of them (torch's `global_unstructured`:
    /// one vector of the parameters in order).
    pub(crate) fn prune(&mut self, targets: &[(String, Tensor)], amount: PruningAmount) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let method = self.opts.method;
        if !self.opts.use_global_unstructured {
            for (name, t) in targets {
                let mask = self.mask_or_ones(name, t)?;
                let pruned = prune_flat(method, amount, t, &mask, name)?;
                self.masks.insert(name.clone(), pruned.f_reshape(t.size())?);
            }
            return Ok(());
        }
        let flat = |ts: Vec<Tensor>| -> Result<Tensor> {
            let flat = ts.iter().map(|t| t.f_reshape([-1i64])).collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(Tensor::f_cat(&flat, 0)?)
        };
        let scores = flat(targets.iter().map(|(_, t)| t.shallow_clone()).collect())?;
        let masks = flat(targets.iter().map(|(n, t)| self.mask_or_ones(n, t)).collect::<Result<Vec<_>>>()?)?;
        let pruned = prune_flat(method, amount, &scores, &masks, "over all the parameters pruned")?;
        let mut offset = 0;
        for (name, t) in targets {
            let n = t.numel() as i64;
            let part = pruned.f_narrow(0, offset, n)?.f_reshape(t.size())?;
            self.masks.insert(name.clone(), crate::optim::deep_copy(&part)?);
            offset += n;
        }
        Ok(())
    }

    /// The mask of `name` as `t`'s, or all ones before its first pruning.
    fn mask_or_ones(&self, name: &str, t: &Tensor) -> Result<Tensor> {
        match self.masks.get(name) {
            Some(m) => like(m, t),
            None => Ok(t.f_ones_like()?),
        }
    }

    /// Pruned entries and size of each target (Lightning's
    /// `_get_pruned_stats`: (0, 1) before any mask).
    fn stats(&self, targets: &[(String, Tensor)]) -> Result<Vec<(i64, i64)>> {
        targets
            .iter()
            .map(|(n, _)| match self.masks.get(n) {
                Some(m) => Ok((m.f_eq(0.0)?.f_sum(Kind::Int64)?.f_int64_value(&[])?, m.numel() as i64)),
                None => Ok((0, 1)),
            })
            .collect()
    }

    /// Lightning's `_log_sparsity_stats`, on stderr.
    fn log_sparsity(&self, targets: &[(String, Tensor)], prev: &[(i64, i64)], curr: &[(i64, i64)]) {
        let pct = |zeros: i64, total: i64| 100.0 * zeros as f64 / total.max(1) as f64;
        let total: i64 = curr.iter().map(|(_, n)| n).sum();
        let (was, now): (i64, i64) = (prev.iter().map(|(z, _)| z).sum(), curr.iter().map(|(z, _)| z).sum());
        let method = self.opts.method.log_name(self.opts.use_global_unstructured);
        eprintln!(
            "Applied `{method}`. Pruned: {was}/{total} ({:.2}%) -> {now}/{total} ({:.2}%)",
            pct(was, total),
            pct(now, total)
        );
        if self.opts.verbose < 2 {
            return;
        }
        for (((name, _), (pz, pn)), (cz, cn)) in targets.iter().zip(prev).zip(curr) {
            eprintln!(
                "Applied `{method}` to `{name}` with amount={}. Pruned: {pz} ({:.2}%) -> {cz} ({:.2}%)",
                self.opts.amount.text(),
                pct(*pz, *pn),
                pct(*cz, *cn)
            );
        }
    }

    fn on_train_end(&mut self, model: &SharedModel) -> Result<()> {
        if self.opts.make_pruning_permanent {
            // The model holds the pruned weights; nothing masks them from now on.
            self.apply_masks(model)?;
            self.masks.clear();
        }
        Ok(())
    }
}

/// torch's unstructured mask update (`PruningContainer` over
/// `L1Unstructured` / `RandomUnstructured`): among the entries `mask`
/// keeps (1), `amount` more become 0, those of smallest |`scores`| or
/// those of the largest of as many uniform draws (torch's generator);
/// returns a flat copy of the new mask. `what` names it in errors.
pub(crate) fn prune_flat(
    method: PruningMethod,
    amount: PruningAmount,
    scores: &Tensor,
    mask: &Tensor,
    what: &str,
) -> Result<Tensor> {
    let mut out = crate::optim::deep_copy(&mask.f_reshape([-1i64])?)?;
    let alive = out.f_eq(1.0)?.f_nonzero()?.f_reshape([-1i64])?;
    let k = amount.entries(alive.size()[0], what)?;
    if k == 0 {
        return Ok(out);
    }
    let kept = scores.f_reshape([-1i64])?.f_index_select(0, &alive)?;
    let (order, largest) = match method {
        PruningMethod::L1Unstructured => (kept.f_abs()?, false),
        PruningMethod::RandomUnstructured => (kept.f_rand_like()?, true),
    };
    let (_, chosen) = order.f_topk(k, 0, largest, true)?;
    let _ = out.f_index_fill_(0, &alive.f_index_select(0, &chosen)?, 0.0)?;
    Ok(out)
}

/// `mask` on `t`'s device and in its dtype.
fn like(mask: &Tensor, t: &Tensor) -> Result<Tensor> {
    let m = to_device_of(mask, t)?;
    if m.kind() == t.kind() {
        Ok(m)
    } else {
        Ok(m.f_to_kind(t.kind())?)
    }
}

fn named_parameters(model: &SharedModel) -> Vec<(String, Tensor)> {
    model.lock().unwrap_or_else(|p| p.into_inner()).named_parameters()
}

/// Lightning's `sanitize_parameters_to_prune`: the parameters listed, or
/// every parameter whose own name (after the last dot) is one of
/// `parameter_names`: the first name's all before the second's, each in
/// the model's order.
fn select(params: &[(String, Tensor)], opts: &ModelPruningOptions) -> Result<Vec<String>> {
    if !opts.parameters_to_prune.is_empty() {
        let missing: Vec<&str> = opts
            .parameters_to_prune
            .iter()
            .map(String::as_str)
            .filter(|n| !params.iter().any(|(k, _)| k.as_str() == *n))
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid(format!(
                "ModelPruning: parameters_to_prune {missing:?} are not parameters of the model (it has {} parameters, \
                 named as its state_dict names them)",
                params.len()
            )));
        }
        return Ok(opts.parameters_to_prune.clone());
    }
    let wanted: Vec<&str> = if opts.parameter_names.is_empty() {
        PARAMETER_NAMES.to_vec()
    } else {
        opts.parameter_names.iter().map(String::as_str).collect()
    };
    let mut out = Vec::new();
    for want in &wanted {
        out.extend(params.iter().filter(|(k, _)| k.rsplit('.').next() == Some(*want)).map(|(k, _)| k.clone()));
    }
    if out.is_empty() {
        return Err(Error::invalid(format!("ModelPruning: the model has no parameter named {wanted:?} to prune")));
    }
    Ok(out)
}

impl Callback for ModelPruning {
    fn name(&self) -> String {
        "ModelPruning".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        if ctx.stage != "fit" {
            return Ok(());
        }
        let Some(model) = ctx.model.clone() else {
            if ctx.hook == Hook::Setup {
                return Err(Error::state("ModelPruning needs the module's model; this module has none"));
            }
            return Ok(());
        };
        match ctx.hook {
            Hook::Setup => self.on_setup(&model),
            Hook::BeforeOptimizerStep => self.mask_grads(&model),
            Hook::TrainBatchEnd => self.apply_masks(&model),
            Hook::TrainEpochEnd if self.opts.prune_on_train_epoch_end => {
                self.run_pruning(&model, ctx.state.global_rank)
            }
            Hook::ValidationEpochEnd if !self.opts.prune_on_train_epoch_end && !ctx.state.sanity_checking => {
                self.run_pruning(&model, ctx.state.global_rank)
            }
            Hook::TrainEnd => self.on_train_end(&model),
            _ => Ok(()),
        }
    }
}
