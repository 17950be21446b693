//! Parameter groups plus per-parameter state shared by all optimizers, the
//! tensor helpers of the update rules, and the (de)serialisation of both as
//! named tensors.
use super::{check_params, ParamGroup};
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use std::collections::{BTreeMap, HashMap, HashSet};
use tch::Tensor;

/// State of one parameter: a step counter and named buffers.
#[derive(Debug, Default)]
pub struct ParamState {
    /// Steps taken for this parameter (Adam, RMSprop); unused by SGD.
    pub step: f64,
    /// Named buffers such as `exp_avg` or `momentum_buffer`.
    pub buffers: BTreeMap<&'static str, Tensor>,
    /// Named numbers besides the step, such as NAdam's `mu_product`.
    pub scalars: BTreeMap<&'static str, f64>,
    /// The fused updates' copy of `step` on the parameter's device (never
    /// saved; see `fused::take_device_step`).
    pub(crate) device_step: Option<DeviceStep>,
}

/// A step count as a float32 tensor on a parameter's device, as torch's
/// fused updates keep it, with the count it holds.
#[derive(Debug)]
pub(crate) struct DeviceStep {
    pub tensor: Tensor,
    pub count: f64,
    /// `false` after a step a loss scaler's device finding may have skipped
    /// (`fused::adam_step` with `found_inf`): the tensor holds the true
    /// count, `count` and the state's `step` the count had it stepped, until
    /// [`Core::settle_steps`] reads it.
    pub exact: bool,
}

impl ParamState {
    /// The steps taken: the state's count, or where a step a loss scaler
    /// may have skipped left it on the device only, the device's (a read
    /// that waits for the device).
    pub(crate) fn step_count(&self) -> Result<f64> {
        match &self.device_step {
            Some(d) if !d.exact => crate::checkpoint::numbers::one_value(&d.tensor),
            _ => Ok(self.step),
        }
    }
}

impl ParamState {
    /// The buffer `name`, created as zeros like `param` when missing.
    pub(crate) fn buffer_or_zeros(&mut self, name: &'static str, param: &Tensor) -> Result<&mut Tensor> {
        if !self.buffers.contains_key(name) {
            self.buffers.insert(name, param.f_zeros_like()?);
        }
        self.buffers.get_mut(name).ok_or_else(|| Error::state(format!("optimizer buffer {name} is missing")))
    }
}

/// torch's group entries that are booleans (kept as 0 or 1).
pub(crate) const FLAG_KEYS: &[&str] = &["amsgrad", "maximize", "nesterov", "centered", "decoupled_weight_decay"];

/// An optimizer kind's options, which torch keeps in every param group:
/// `lr`, `weight_decay` and the momentum in [`ParamGroup`]'s fields, the
/// kind's other constants in [`ParamGroup::extras`] in the order of
/// [`GroupOptions::EXTRAS`] (flags as 0 or 1). The optimizer's own options
/// are the defaults of new groups.
pub(crate) trait GroupOptions: Copy {
    /// torch's keys of the other constants, in the order of `extras`.
    const EXTRAS: &'static [&'static str];
    /// Learning rate, weight decay and the momentum (`betas[0]` for the
    /// Adam family; 0 for none): the values of [`ParamGroup`]'s fields.
    fn basics(&self) -> (f64, f64, f64);
    /// The other constants, in the order of `EXTRAS`.
    fn extras(&self) -> Vec<f64>;
    /// These options with `group`'s values.
    fn of_group(&self, group: &ParamGroup) -> Self;
    /// Whether the objective is maximized (the gradient negated).
    fn maximize(&self) -> bool;
    /// Checks the options as torch's constructor does.
    fn validate(&self) -> Result<()>;
}

/// Checks a group's own constants as torch's constructor would, with the
/// momentum left out: a cycling scheduler (CyclicLR, OneCycleLR) may write
/// any finite momentum, beta1 >= 1 included, as torch's may, and a state
/// holding one must read back. `parse` checks it is finite and >= 0.
pub(crate) fn check_extras<O: GroupOptions>(defaults: &O, group: &ParamGroup) -> Result<()> {
    let mut probe = group.hypers();
    probe.momentum = defaults.basics().2;
    defaults.of_group(&probe).validate()
}

/// Extra number `i` of a group, or `default` when it has none.
pub(crate) fn extra(group: &ParamGroup, i: usize, default: f64) -> f64 {
    group.extras.get(i).copied().unwrap_or(default)
}

/// The key names of `O`'s extra constants.
pub(crate) fn extra_names<O: GroupOptions>(_: &O) -> &'static [&'static str] {
    O::EXTRAS
}

/// What the serialised form of an optimizer holds besides groups' lr,
/// weight_decay and params.
pub(crate) struct Spec {
    /// Optimizer name (as `Optimizer::name`): messages, the momentum key.
    pub kind: &'static str,
    /// Whether states carry a step counter.
    pub has_step: bool,
    /// Buffers every state has.
    pub required: &'static [&'static str],
    /// Buffers a state may have.
    pub optional: &'static [&'static str],
    /// Numbers every state has besides the step (0-dim entries).
    pub scalars: &'static [&'static str],
    /// Group entries the optimizer kind fixes (AdamW's
    /// `decoupled_weight_decay`): written into every group, and a state
    /// with another value is refused.
    pub fixed: &'static [(&'static str, f64)],
}

/// Groups and state of an optimizer.
#[derive(Debug)]
pub(crate) struct Core {
    /// Parameter groups.
    pub groups: Vec<ParamGroup>,
    /// State by flat parameter index; `None` until the first step with a grad.
    pub state: Vec<Option<ParamState>>,
    /// Resets gradients for `zero_grad`.
    pub grad_reset: super::GradReset,
    /// torch's `fused=True`: the kinds that have fused updates
    /// ([`fusable`]) use them (saved as every group's `fused` entry).
    pub fused: bool,
    /// torch's `foreach` of the kinds that have foreach updates
    /// (`src/optim/foreach.rs`): `None` is torch's default (saved as
    /// nothing), a choice is saved as every group's `foreach` entry.
    pub foreach: Option<bool>,
    /// Each group's learning rate on its parameters' device while the
    /// optimizer steps inside device graphs (`src/optim/graphed.rs`); the
    /// fused updates then read it there. Never saved.
    pub(crate) device_lrs: Option<Vec<Option<super::graphed::DeviceLr>>>,
    /// Set when a fused step took a loss scaler's device finding: some
    /// step counts are known on the device only ([`Core::settle_steps`]).
    pub(crate) unsettled_steps: bool,
}

/// Whether optimizer `kind` has fused updates (`src/optim/fused.rs`).
pub(crate) fn fusable(kind: &str) -> bool {
    matches!(kind, "sgd" | "adam" | "adamw" | "adagrad")
}

/// What `Core::parse` read from a state dict, applied by `Core::commit`.
pub(crate) struct Parsed {
    /// Each group's hyperparameters (without parameters).
    groups: Vec<ParamGroup>,
    state: Vec<Option<ParamState>>,
    fused: bool,
    foreach: Option<bool>,
}

impl Core {
    /// One group of `params` with the options `opts` (checked first);
    /// fails on an empty list like torch.
    pub fn new<O: GroupOptions>(params: Vec<Tensor>, opts: &O) -> Result<Self> {
        opts.validate()?;
        if params.is_empty() {
            return Err(Error::invalid("optimizer got an empty parameter list"));
        }
        let mut core = Core {
            groups: Vec::new(),
            state: Vec::new(),
            grad_reset: Default::default(),
            fused: false,
            foreach: None,
            device_lrs: None,
            unsettled_steps: false,
        };
        core.add_group(params, None, opts)?;
        Ok(core)
    }

    /// Appends a group with the options `defaults` (and `lr` when given)
    /// after checking its parameters.
    pub fn add_group<O: GroupOptions>(&mut self, params: Vec<Tensor>, lr: Option<f64>, defaults: &O) -> Result<()> {
        if self.fused {
            super::fused::check_fusable("a fused optimizer", &params)?;
        }
        let (default_lr, weight_decay, momentum) = defaults.basics();
        let lr = lr.unwrap_or(default_lr);
        super::check_non_negative("learning rate", lr)?;
        check_params(&self.groups, &params)?;
        let mut group = ParamGroup::new(&params, lr, weight_decay, momentum);
        group.extras = defaults.extras();
        self.groups.push(group);
        Ok(())
    }

    /// Serialises groups and state with `O`'s constants.
    pub fn save<O: GroupOptions>(&self, spec: &Spec, _defaults: &O) -> Result<Vec<(String, Tensor)>> {
        self.state_dict(spec, O::EXTRAS)
    }

    /// Restores a state dict written by `save`: each group's options are
    /// checked as `defaults.of_group(group).validate()`; on error nothing
    /// changes.
    pub fn load<O: GroupOptions>(&mut self, spec: &Spec, dict: &[(String, Tensor)], defaults: &O) -> Result<()> {
        let parsed = self.parse_checked(spec, dict, defaults)?;
        self.commit(parsed);
        Ok(())
    }

    /// What `load` would apply, read and checked without changing anything
    /// (apply it with `commit`).
    pub(crate) fn parse_checked<O: GroupOptions>(
        &self,
        spec: &Spec,
        dict: &[(String, Tensor)],
        defaults: &O,
    ) -> Result<Parsed> {
        let parsed = self.parse(spec, dict, O::EXTRAS)?;
        for (g, group) in parsed.groups.iter().enumerate() {
            check_extras(defaults, group)
                .map_err(|e| Error::format(format!("{} state dict: group {g}: {}", spec.kind, e.message)))?;
        }
        Ok(parsed)
    }

    /// Resets every parameter's gradient to undefined.
    pub fn zero_grad(&mut self) {
        self.grad_reset.run(&self.groups);
    }

    /// Number of parameters over all groups.
    pub fn num_params(&self) -> usize {
        self.groups.iter().map(|g| g.params.len()).sum()
    }

    /// One step's walk over the parameters, under no_grad: `update` runs for
    /// every parameter that has a gradient, with its group, the group's
    /// options (`defaults.of_group`, resolved once per group), the gradient
    /// (negated when they say `maximize`) and its state (created empty on
    /// first use).
    pub fn for_each_grad<O: GroupOptions>(
        &mut self,
        defaults: &O,
        mut update: impl FnMut(&ParamGroup, &O, &Tensor, Tensor, &mut ParamState) -> Result<()>,
    ) -> Result<()> {
        let _guard = tch::no_grad_guard();
        self.sync_state_len();
        let mut index = 0;
        for g in &self.groups {
            let opts = defaults.of_group(g);
            for p in &g.params {
                let i = index;
                index += 1;
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                let grad = if opts.maximize() { grad.f_neg()? } else { grad };
                update(g, &opts, p, grad, self.state[i].get_or_insert_with(ParamState::default))?;
            }
        }
        Ok(())
    }

    /// Makes `state` as long as the parameter list (before a step).
    pub fn sync_state_len(&mut self) {
        let n = self.num_params();
        if self.state.len() < n {
            self.state.resize_with(n, || None);
        }
    }

    /// Serialises groups (with their `extras` under the names `extra_names`
    /// and the spec's fixed entries) and state.
    fn state_dict(&self, spec: &Spec, extra_names: &[&str]) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        let mut start = 0i64;
        for (g, group) in self.groups.iter().enumerate() {
            if group.extras.len() != extra_names.len() {
                return Err(Error::state(format!(
                    "{} param group {g} holds {} constants where {} are expected",
                    spec.kind,
                    group.extras.len(),
                    extra_names.len()
                )));
            }
            let n = group.params.len() as i64;
            let ids: Vec<i64> = (start..start + n).collect();
            start += n;
            out.push((format!("param_groups.{g}.params"), Tensor::f_from_slice(&ids)?));
            let mut put = |k: &str, v: f64| -> Result<()> {
                out.push((format!("param_groups.{g}.{k}"), scalar(v)?));
                Ok(())
            };
            put("lr", group.lr)?;
            put("weight_decay", group.weight_decay)?;
            if let Some(key) = super::momentum_key(spec.kind) {
                put(key, group.momentum)?;
            }
            if let Some(v) = group.initial_lr {
                put("initial_lr", v)?;
            }
            for (k, v) in extra_names.iter().zip(&group.extras) {
                put(k, *v)?;
            }
            for (k, v) in spec.fixed {
                put(k, *v)?;
            }
            if self.fused {
                put("fused", 1.0)?;
            }
            if let Some(on) = self.foreach {
                put("foreach", flag(on))?;
            }
        }
        for (i, st) in self.state.iter().enumerate() {
            let Some(st) = st else { continue };
            if spec.has_step {
                out.push((format!("state.{i}.step"), scalar(st.step_count()?)?));
            }
            for (name, t) in &st.buffers {
                out.push((format!("state.{i}.{name}"), deep_copy(t)?));
            }
            for (name, v) in &st.scalars {
                out.push((format!("state.{i}.{name}"), scalar(*v)?));
            }
        }
        Ok(out)
    }

    /// Reads a state dict without changing anything; `extra_names` are the
    /// kind's other constants stored in every group.
    fn parse(&self, spec: &Spec, dict: &[(String, Tensor)], extra_names: &[&str]) -> Result<Parsed> {
        let kind = spec.kind;
        let mut map: HashMap<&str, &Tensor> = HashMap::new();
        for (k, t) in dict {
            if map.insert(k.as_str(), t).is_some() {
                return Err(Error::format(format!("{kind} state dict: duplicate key '{k}'")));
            }
        }
        let mut used: HashSet<&str> = HashSet::new();
        let mut get = |k: &str| -> Result<Option<&Tensor>> {
            match map.get_key_value(k) {
                Some((key, t)) => {
                    used.insert(*key);
                    if !t.defined() {
                        return Err(Error::format(format!("{kind} state dict: '{k}' is undefined")));
                    }
                    Ok(Some(*t))
                }
                None => Ok(None),
            }
        };
        let missing = |k: &str| {
            Error::format(format!(
                "{kind} state dict: missing key '{k}' (is it the state of a {kind} optimizer with the same parameter groups?)"
            ))
        };
        let mut groups = Vec::new();
        let mut fused_groups = Vec::new();
        let mut foreach_groups = Vec::new();
        let mut start = 0i64;
        for (g, group) in self.groups.iter().enumerate() {
            let key = format!("param_groups.{g}.params");
            let t = get(&key)?.ok_or_else(|| missing(&key))?;
            let ids: Vec<i64> = if t.dim() == 1 { Vec::<i64>::try_from(t)? } else { Vec::new() };
            let n = group.params.len() as i64;
            if t.dim() != 1 || ids != (start..start + n).collect::<Vec<_>>() {
                return Err(Error::format(format!(
                    "{kind} state dict: '{key}' does not list the {n} parameters of group {g} (got shape {:?})",
                    t.size()
                )));
            }
            start += n;
            let mut num = |k: &str, required: bool| -> Result<Option<f64>> {
                let key = format!("param_groups.{g}.{k}");
                match get(&key)? {
                    Some(t) => Ok(Some(read_scalar(t, &key)?)),
                    None if required => Err(missing(&key)),
                    None => Ok(None),
                }
            };
            let lr = num("lr", true)?.unwrap_or_default();
            let wd = num("weight_decay", true)?.unwrap_or_default();
            let momentum = match super::momentum_key(spec.kind) {
                Some(key) => num(key, true)?.unwrap_or_default(),
                None => 0.0,
            };
            let initial_lr = num("initial_lr", false)?;
            for (k, v) in
                [("lr", lr), ("weight_decay", wd), (super::momentum_key(spec.kind).unwrap_or("momentum"), momentum)]
            {
                if !v.is_finite() || v < 0.0 {
                    return Err(Error::format(format!("{kind} state dict: group {g} has invalid {k} {v}")));
                }
            }
            let mut extras = Vec::with_capacity(extra_names.len());
            for name in extra_names {
                let v = num(name, true)?.unwrap_or_default();
                if FLAG_KEYS.contains(name) && v != 0.0 && v != 1.0 {
                    return Err(Error::format(format!(
                        "{kind} state dict: group {g}: '{name}' should be 0 or 1, got {v}"
                    )));
                }
                extras.push(v);
            }
            for (name, want) in spec.fixed {
                let v = num(name, true)?.unwrap_or_default();
                if v.to_bits() != want.to_bits() {
                    return Err(Error::format(format!(
                        "{kind} state dict: group {g} has '{name}' {v} where a {kind} optimizer has {want} (the state of another kind of optimizer?)"
                    )));
                }
            }
            match num("fused", false)? {
                None => fused_groups.push(false),
                Some(v) if v == 1.0 && fusable(kind) => fused_groups.push(true),
                Some(v) => {
                    return Err(Error::format(format!(
                        "{kind} state dict: group {g} has 'fused' {v} (only SGD, Adam, AdamW and Adagrad have fused updates, \
                         written as 1)"
                    )))
                }
            }
            match num("foreach", false)? {
                None => foreach_groups.push(None),
                Some(v) if (v == 0.0 || v == 1.0) && super::foreach::has_foreach(kind) => {
                    foreach_groups.push(Some(v == 1.0))
                }
                Some(v) => {
                    return Err(Error::format(format!(
                        "{kind} state dict: group {g} has 'foreach' {v} (every kind but LBFGS has foreach \
                         updates, written as 0 or 1)"
                    )))
                }
            }
            let mut group = ParamGroup::new(&[], lr, wd, momentum);
            group.initial_lr = initial_lr;
            group.extras = extras;
            groups.push(group);
        }
        let params: Vec<&Tensor> = self.groups.iter().flat_map(|g| g.params.iter()).collect();
        let mut state = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate() {
            let names = spec.required.iter().chain(spec.optional.iter());
            let step_key = format!("state.{i}.step");
            let mut found = Vec::new();
            for name in names {
                let key = format!("state.{i}.{name}");
                if let Some(t) = get(&key)? {
                    found.push((*name, key, t));
                }
            }
            let step = if spec.has_step { get(&step_key)? } else { None };
            if found.is_empty() && step.is_none() {
                state.push(None);
                continue;
            }
            let mut st = ParamState::default();
            if spec.has_step {
                let t = step.ok_or_else(|| missing(&step_key))?;
                st.step = read_scalar(t, &step_key)?;
                if !(st.step >= 0.0 && st.step.fract() == 0.0) {
                    return Err(Error::format(format!("{kind} state dict: bad '{step_key}' {}", st.step)));
                }
            }
            for name in spec.required {
                if !found.iter().any(|(n, _, _)| n == name) {
                    return Err(missing(&format!("state.{i}.{name}")));
                }
            }
            for name in spec.scalars {
                let key = format!("state.{i}.{name}");
                let t = get(&key)?.ok_or_else(|| missing(&key))?;
                let v = read_scalar(t, &key)?;
                if !v.is_finite() {
                    return Err(Error::format(format!("{kind} state dict: bad '{key}' {v}")));
                }
                st.scalars.insert(name, v);
            }
            for (name, key, t) in found {
                if t.size() != p.size() {
                    return Err(Error::shape(format!(
                        "{kind} state dict: '{key}' has shape {:?} but parameter {i} has shape {:?}",
                        t.size(),
                        p.size()
                    )));
                }
                // A copy of its own on the parameter's device and dtype (copied once).
                let t = t.f_detach()?;
                let copy = if t.f_kind()? == p.f_kind()? && Device::of(&t)? == Device::of(p)? {
                    deep_copy(&t)?
                } else {
                    crate::tensor::device::to_device_of(&t.f_to_kind(p.f_kind()?)?, p)?
                };
                st.buffers.insert(name, copy);
            }
            state.push(Some(st));
        }
        if let Some((k, _)) = dict.iter().find(|(k, _)| !used.contains(k.as_str())) {
            return Err(Error::format(format!(
                "{kind} state dict: unexpected key '{k}' (state of another optimizer or other parameter groups?)"
            )));
        }
        let fused = fused_groups.first().copied().unwrap_or(false);
        if fused_groups.iter().any(|f| *f != fused) {
            return Err(Error::format(format!(
                "{kind} state dict: some param groups are fused and others not; fulmen fuses all or none"
            )));
        }
        let foreach = foreach_groups.first().copied().flatten();
        if foreach_groups.iter().any(|f| *f != foreach) {
            return Err(Error::format(format!(
                "{kind} state dict: the param groups choose foreach updates differently; fulmen chooses for all at once"
            )));
        }
        if fused && foreach == Some(true) {
            return Err(Error::format(format!("{kind} state dict: both 'fused' and 'foreach' are on")));
        }
        Ok(Parsed { groups, state, fused, foreach })
    }

    /// Applies what `parse` read.
    pub(crate) fn commit(&mut self, parsed: Parsed) {
        for (group, read) in self.groups.iter_mut().zip(parsed.groups) {
            group.lr = read.lr;
            group.weight_decay = read.weight_decay;
            group.momentum = read.momentum;
            group.initial_lr = read.initial_lr;
            group.extras = read.extras;
        }
        self.state = parsed.state;
        self.fused = parsed.fused;
        self.foreach = parsed.foreach;
        self.unsettled_steps = false;
    }

    /// Reads back the step counts that fused steps under a loss scaler's
    /// device finding left on the device (one wait for the device, only
    /// when there are such counts), so that the host's counts are true
    /// again: before an update that counts on the host (the first eager
    /// warm-up step of a graphed fit is one).
    pub(crate) fn settle_steps(&mut self) -> Result<()> {
        if !self.unsettled_steps {
            return Ok(());
        }
        let mut pending = Vec::new();
        for (i, st) in self.state.iter().enumerate() {
            if let Some(d) = st.as_ref().and_then(|st| st.device_step.as_ref()).filter(|d| !d.exact) {
                // To the CPU one by one: the counts may sit on several
                // devices, some without float64.
                let on_cpu = crate::tensor::device::to_device(&d.tensor.f_reshape([1])?, Device::Cpu, false)?;
                pending.push((i, on_cpu.f_to_kind(tch::Kind::Double)?));
            }
        }
        if !pending.is_empty() {
            let rows: Vec<&Tensor> = pending.iter().map(|(_, t)| t).collect();
            let counts = Vec::<f64>::try_from(&Tensor::f_cat(&rows, 0)?)?;
            for ((i, _), count) in pending.iter().zip(counts) {
                if let Some(st) = self.state[*i].as_mut() {
                    st.step = count;
                    if let Some(d) = st.device_step.as_mut() {
                        d.count = count;
                        d.exact = true;
                    }
                }
            }
        }
        self.unsettled_steps = false;
        Ok(())
    }
}

/// A 0-dim f64 tensor.
pub(crate) fn scalar(v: f64) -> Result<Tensor> {
    Ok(Tensor::f_from_slice(&[v])?.f_reshape([0i64; 0])?)
}

/// The value of a one-element tensor.
fn read_scalar(t: &Tensor, key: &str) -> Result<f64> {
    if t.numel() != 1 {
        return Err(Error::format(format!("'{key}' should hold one number, it has shape {:?}", t.size())));
    }
    let v = crate::checkpoint::numbers::one_value(t)?;
    // A hyperparameter, a flag or a step: never NaN or infinite.
    crate::checkpoint::numbers::finite(v, &format!("optimizer state '{key}'"))
}

/// A detached copy with its own storage.
pub(crate) fn deep_copy(t: &Tensor) -> Result<Tensor> {
    // empty_like + copy_ rather than `to(device, copy=True)`: tch cannot
    // name every device a tensor may be on.
    let mut out = t.f_empty_like()?;
    out.f_copy_(&t.f_detach()?)?;
    Ok(out)
}

/// `a + s * b` as torch's `a.add(b, alpha=s)` (computed as `a + (b * s)`).
pub(crate) fn add_scaled(a: &Tensor, b: &Tensor, s: f64) -> Result<Tensor> {
    crate::tensor::scaled::add(a, b, s)
}

/// In place `a += s * b`, torch's `a.add_(b, alpha=s)`.
pub(crate) fn add_scaled_(a: &mut Tensor, b: &Tensor, s: f64) -> Result<()> {
    crate::tensor::scaled::add_(a, b, s)
}

/// In place `a += (s * t1) * t2`, torch's `a.addcmul_(t1, t2, value=s)`.
pub(crate) fn addcmul_(a: &mut Tensor, t1: &Tensor, t2: &Tensor, s: f64) -> Result<()> {
    crate::tensor::scaled::addcmul_(a, t1, t2, s)
}

/// In place `a += (s * t1) / t2`, torch's `a.addcdiv_(t1, t2, value=s)`.
pub(crate) fn addcdiv_(a: &mut Tensor, t1: &Tensor, t2: &Tensor, s: f64) -> Result<()> {
    crate::tensor::scaled::addcdiv_(a, t1, t2, s)
}

/// Maps a flag to the number stored in state dicts and groups' extras.
pub(crate) fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}
