//! Optimizer states between fulmen's flat form (`param_groups.G.KEY`,
//! `state.I.NAME` named tensors) and torch's `Optimizer.state_dict()`
//! (`{"state": {I: {NAME: tensor}}, "param_groups": [{KEY: value,
//! "params": [ids]}]}`).
use super::value::{entries, field, items, number, scalar_f32, tensor_number, text};
use crate::checkpoint::numbers::check_len;
use crate::checkpoint::torch_save::Value;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

/// The most param groups an optimizer state may hold.
pub(crate) const MAX_GROUPS: usize = 1 << 16;

/// Group entries torch keeps as booleans.
const FLAGS: &[&str] = &["amsgrad", "maximize", "nesterov", "centered", "decoupled_weight_decay"];

/// Group entries of torch's implementation choices (foreach, fused,
/// capturable and differentiable kernels). fulmen runs its one
/// implementation whatever they say, except `fused` of SGD, Adam, AdamW
/// and Adagrad (the optimizer's fused updates) and `foreach` (its foreach
/// updates, which every kind but LBFGS has): the others are dropped when
/// read and written with torch's defaults.
const KERNEL_CHOICES: &[&str] = &["foreach", "capturable", "differentiable", "fused"];

/// The order of torch's group entries for each kind (`initial_lr`, which a
/// scheduler adds, and `params` come last).
fn torch_order(kind: &str) -> &'static [&'static str] {
    match kind {
        "sgd" => &[
            "lr",
            "momentum",
            "dampening",
            "weight_decay",
            "nesterov",
            "maximize",
            "foreach",
            "differentiable",
            "fused",
        ],
        "adam" | "adamw" => &[
            "lr",
            "betas",
            "eps",
            "weight_decay",
            "amsgrad",
            "maximize",
            "foreach",
            "capturable",
            "differentiable",
            "fused",
            "decoupled_weight_decay",
        ],
        "rmsprop" => &[
            "lr",
            "momentum",
            "alpha",
            "eps",
            "centered",
            "weight_decay",
            "capturable",
            "foreach",
            "maximize",
            "differentiable",
        ],
        "adagrad" => &[
            "lr",
            "lr_decay",
            "eps",
            "weight_decay",
            "initial_accumulator_value",
            "foreach",
            "maximize",
            "differentiable",
            "fused",
        ],
        "adamax" => &["lr", "betas", "eps", "weight_decay", "foreach", "maximize", "differentiable", "capturable"],
        "nadam" => &[
            "lr",
            "betas",
            "eps",
            "weight_decay",
            "momentum_decay",
            "decoupled_weight_decay",
            "maximize",
            "foreach",
            "capturable",
            "differentiable",
        ],
        "radam" => &[
            "lr",
            "betas",
            "eps",
            "weight_decay",
            "maximize",
            "foreach",
            "capturable",
            "decoupled_weight_decay",
            "differentiable",
        ],
        _ => &[],
    }
}

/// Whether torch's optimizer of this kind keeps its momentum in `betas`.
pub fn has_betas(kind: &str) -> bool {
    crate::optim::momentum_key(kind) == Some("betas.0")
}

/// torch's default of a kernel choice.
fn kernel_default(name: &str) -> Value {
    match name {
        "capturable" | "differentiable" => Value::Bool(false),
        _ => Value::None,
    }
}

/// torch's `state_dict()` of an optimizer of `kind` ("sgd", "adam", ...)
/// from fulmen's flat state.
pub fn to_torch(kind: &str, flat: &[(String, Tensor)]) -> Result<Value> {
    if kind == "lbfgs" {
        return super::lbfgs::to_torch(flat);
    }
    let mut groups: BTreeMap<usize, Vec<(Value, Value)>> = BTreeMap::new();
    let mut betas: BTreeMap<usize, [f64; 2]> = BTreeMap::new();
    let mut params: BTreeMap<usize, Value> = BTreeMap::new();
    let mut state: BTreeMap<i64, Vec<(Value, Value)>> = BTreeMap::new();
    let mut host_state = None;
    for (name, t) in flat {
        let bad = || Error::format(format!("optimizer state: unexpected entry {name:?}"));
        if name == crate::optim::HOST_STATE_KEY {
            // A host optimizer's own bytes: a `bytes` entry beside torch's two.
            host_state = Some(Value::Bytes(Vec::<u8>::try_from(t.f_flatten(0, -1)?.f_to_kind(Kind::Uint8)?)?));
        } else if let Some(rest) = name.strip_prefix("param_groups.") {
            let (g, key) = rest.split_once('.').ok_or_else(bad)?;
            let g: usize = g.parse().map_err(|_| bad())?;
            let group = groups.entry(g).or_default();
            match key {
                "params" => {
                    let ids = Vec::<i64>::try_from(t.f_flatten(0, -1)?)?;
                    params.insert(g, Value::List(ids.into_iter().map(Value::Int).collect()));
                }
                "betas.0" | "betas.1" => {
                    let slot = betas.entry(g).or_insert([0.9, 0.999]);
                    slot[usize::from(key == "betas.1")] = tensor_number(t, name)?;
                    if !group.iter().any(|(k, _)| matches!(k, Value::Str(s) if s == "betas")) {
                        group.push((text("betas"), Value::None));
                    }
                }
                k if FLAGS.contains(&k) => group.push((text(k), Value::Bool(tensor_number(t, name)? != 0.0))),
                "fused" | "foreach" => group.push((text(key), Value::Bool(tensor_number(t, name)? != 0.0))),
                k => group.push((text(k), Value::Float(tensor_number(t, name)?))),
            }
        } else if let Some(rest) = name.strip_prefix("state.") {
            let (i, key) = rest.split_once('.').ok_or_else(bad)?;
            let i: i64 = i.parse().map_err(|_| bad())?;
            // torch keeps steps and other per-parameter numbers as 0-dim
            // float32 tensors, and buffers as they are.
            let v = if t.dim() == 0 && t.kind() == Kind::Double {
                scalar_f32(tensor_number(t, name)?)?
            } else {
                Value::Tensor(t.shallow_clone())
            };
            state.entry(i).or_default().push((text(key), v));
        } else {
            return Err(bad());
        }
    }
    let mut out_groups = Vec::new();
    for (g, mut group) in groups {
        if let Some([b1, b2]) = betas.get(&g) {
            for (k, v) in group.iter_mut() {
                if matches!(k, Value::Str(s) if s == "betas") {
                    *v = Value::Tuple(vec![Value::Float(*b1), Value::Float(*b2)]);
                }
            }
        }
        // The kernel choices torch's optimizer of this kind has.
        for name in torch_order(kind).iter().filter(|k| KERNEL_CHOICES.contains(k)) {
            if !group.iter().any(|(k, _)| matches!(k, Value::Str(s) if s == name)) {
                group.push((text(name), kernel_default(name)));
            }
        }
        // torch's order; initial_lr (a scheduler's) and anything else after.
        let order = torch_order(kind);
        group.sort_by_key(|(k, _)| match k {
            Value::Str(s) => order.iter().position(|o| o == s).unwrap_or(order.len()),
            _ => order.len(),
        });
        let ids =
            params.remove(&g).ok_or_else(|| Error::format(format!("optimizer state: group {g} has no params")))?;
        group.push((text("params"), ids));
        out_groups.push(Value::Dict(group));
    }
    let state = state.into_iter().map(|(i, entries)| (Value::Int(i), Value::Dict(entries))).collect();
    let mut top = vec![(text("state"), Value::Dict(state)), (text("param_groups"), Value::List(out_groups))];
    if let Some(bytes) = host_state {
        top.push((text(crate::optim::HOST_STATE_KEY), bytes));
    }
    Ok(Value::Dict(top))
}

/// A host optimizer's bytes (`host_state`) from torch's form of its state,
/// as the flat entry: a `bytes` value of at most
/// `FULMEN_MAX_OPTIMIZER_STATE` bytes.
fn host_state_from_torch(v: &Value, what: &str) -> Result<Option<(String, Tensor)>> {
    let key = crate::optim::HOST_STATE_KEY;
    match v.get(key) {
        None => Ok(None),
        Some(Value::Bytes(b)) => {
            check_len(b.len(), crate::optim::MAX_OPTIMIZER_STATE, &format!("{what}.{key}"))?;
            Ok(Some((key.to_string(), Tensor::f_from_slice(b)?)))
        }
        Some(_) => Err(Error::format(format!("{what}.{key} is not a bytes object"))),
    }
}

/// Adds `extra` (entries a scheduler keeps in the param groups: one value
/// per group, or one for every group) to the groups of torch's optimizer
/// state `opt`, before `params`.
pub fn add_group_entries(opt: &mut Value, extra: &[(&str, Vec<f64>)]) {
    let Value::Dict(top) = opt else { return };
    for (k, groups) in top.iter_mut() {
        let (Value::Str(k), Value::List(groups)) = (k, groups) else { continue };
        if k != "param_groups" {
            continue;
        }
        for (g, group) in groups.iter_mut().enumerate() {
            if let Value::Dict(entries) = group {
                let at = entries.len().saturating_sub(1);
                for (i, (name, values)) in extra.iter().enumerate() {
                    let v = values.get(g).or(values.first()).copied().unwrap_or_default();
                    entries.insert(at + i, (text(name), Value::Float(v)));
                }
            }
        }
    }
}

/// The entries a scheduler keeps in the param groups of torch's optimizer
/// state `v` (`GROUP_ENTRIES`), each with its values in the groups that
/// have it.
pub fn scheduler_group_entries(v: &Value, what: &str) -> Result<Vec<(String, Vec<f64>)>> {
    let mut out: Vec<(String, Vec<f64>)> = Vec::new();
    let groups = items(field(v, "param_groups", what)?, &format!("{what}.param_groups"))?;
    for (g, group) in groups.iter().enumerate() {
        for (k, x) in entries(group, &format!("{what}.param_groups[{g}]"))? {
            let Value::Str(k) = k else { continue };
            if !super::scheduler::GROUP_ENTRIES.contains(&k.as_str()) {
                continue;
            }
            let x = number(x, &format!("{what}.param_groups[{g}].{k}"))?;
            match out.iter_mut().find(|(name, _)| name == k) {
                Some((_, values)) => values.push(x),
                None => out.push((k.clone(), vec![x])),
            }
        }
    }
    Ok(out)
}

/// fulmen's flat state from torch's `state_dict()` of an optimizer
/// (`what` names it in errors). Entries fulmen does not know are kept, so
/// the optimizer's own loading names them.
pub fn from_torch(v: &Value, what: &str) -> Result<Vec<(String, Tensor)>> {
    if super::lbfgs::is_lbfgs(v) {
        return super::lbfgs::from_torch(v, what);
    }
    let mut out = Vec::new();
    out.extend(host_state_from_torch(v, what)?);
    let f64_scalar = |x: f64| -> Result<Tensor> { Ok(Tensor::f_from_slice(&[x])?.f_reshape([0i64; 0])?) };
    let groups = items(field(v, "param_groups", what)?, &format!("{what}.param_groups"))?;
    check_len(groups.len(), MAX_GROUPS, &format!("{what}.param_groups"))?;
    // The parameters the groups list: at most that many have a state.
    let mut listed = 0usize;
    for (g, group) in groups.iter().enumerate() {
        let gwhat = format!("{what}.param_groups[{g}]");
        let group_entries = entries(group, &gwhat)?;
        // SGD's, Adam's / AdamW's and Adagrad's groups (whose fused updates
        // fulmen has), known by an entry only their kind has.
        let has = |names: &[&str]| {
            group_entries.iter().any(|(k, _)| matches!(k, Value::Str(s) if names.contains(&s.as_str())))
        };
        let fusable = has(&["amsgrad", "nesterov", "lr_decay"]);
        for (k, x) in group_entries {
            let Value::Str(k) = k else {
                return Err(Error::format(format!("{gwhat} has a key that is not a string")));
            };
            let key = format!("param_groups.{g}.{k}");
            if k == "fused" && fusable && matches!(x, Value::Bool(true)) {
                out.push((key, f64_scalar(1.0)?));
                continue;
            }
            if let ("foreach", Value::Bool(on)) = (k.as_str(), x) {
                out.push((key, f64_scalar(if *on { 1.0 } else { 0.0 })?));
                continue;
            }
            if KERNEL_CHOICES.contains(&k.as_str()) || super::scheduler::GROUP_ENTRIES.contains(&k.as_str()) {
                continue;
            }
            match (k.as_str(), x) {
                ("params", ids) => {
                    let ids = super::value::param_ids(ids, &gwhat)?;
                    listed = listed.saturating_add(ids.len());
                    out.push((key, Tensor::f_from_slice(&ids)?))
                }
                ("betas", b) => {
                    let b = items(b, &format!("{gwhat}.betas"))?;
                    if b.len() != 2 {
                        return Err(Error::format(format!("{gwhat}.betas does not hold two numbers")));
                    }
                    for (j, beta) in b.iter().enumerate() {
                        let beta = number(beta, &format!("{gwhat}.betas[{j}]"))?;
                        out.push((format!("param_groups.{g}.betas.{j}"), f64_scalar(beta)?));
                    }
                }
                (_, Value::None) => {}
                (_, x) => out.push((key.clone(), f64_scalar(number(x, &format!("{gwhat}.{k}"))?)?)),
            }
        }
    }
    let states = entries(field(v, "state", what)?, &format!("{what}.state"))?;
    check_len(states.len(), listed, &format!("{what}.state"))?;
    for (i, st) in states {
        let Value::Int(i) = i else {
            return Err(Error::format(format!("{what}.state has a key that is not a parameter index")));
        };
        for (k, x) in entries(st, &format!("{what}.state[{i}]"))? {
            let k = super::value::string(k, &format!("{what}.state[{i}] key"))?;
            let key = format!("state.{i}.{k}");
            let kwhat = || format!("{what}.state[{i}].{k}");
            match x {
                Value::None => {}
                Value::Tensor(t) if t.dim() == 0 => {
                    let v = f64_scalar(number(x, &kwhat())?)?;
                    out.push((key, v))
                }
                Value::Tensor(t) => out.push((key, t.shallow_clone())),
                x => out.push((key, f64_scalar(number(x, &kwhat())?)?)),
            }
        }
    }
    Ok(out)
}
