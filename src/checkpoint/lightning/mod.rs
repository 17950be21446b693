//! Lightning's checkpoint format: the dict `Trainer.save_checkpoint` writes
//! with `torch.save` (`epoch`, `global_step`, `state_dict`, `loops`,
//! `callbacks`, `optimizer_states`, `lr_schedulers`, the precision
//! plugin's state, `hyper_parameters`), mapped to and from fulmen's
//! [`Checkpoint`]. What Lightning has no place for (the generators'
//! states, `on_save_checkpoint` entries, callbacks Lightning lacks) goes
//! under a `fulmen` entry, which Lightning ignores.
mod callbacks;
mod lbfgs;
mod loops;
mod optimizer;
mod scheduler;
mod value;

use super::file::{Checkpoint, MAX_OPTIMIZERS};
use super::numbers::check_len;
use super::torch_save::Value;
use crate::error::{Error, Result};
use crate::precision::GradScaler;
use std::collections::BTreeMap;
use tch::Tensor;
#[cfg(test)]
use value::floats;
use value::{dict, entries, items, text};

/// Python's `repr` of an optional str (`None` or `'text'`), as Lightning's
/// callback state keys print their options.
pub fn py_repr_opt(s: Option<&str>) -> String {
    s.map_or_else(|| "None".to_string(), value::py_repr)
}

/// The Lightning release whose checkpoint layout fulmen writes.
pub const LIGHTNING_VERSION: &str = "2.6.6";

/// Key of the precision plugin's state (16-mixed's loss scaler).
const PRECISION_KEY: &str = "MixedPrecision";

/// Key of what only fulmen reads.
const FULMEN_KEY: &str = "fulmen";

/// The most schedulers a checkpoint may list (as many as optimizers).
const MAX_SCHEDULERS: usize = MAX_OPTIMIZERS as usize;

pub use loops::from_counters as progress_from_counters;
pub use scheduler::complete_from_groups;

#[cfg(test)]
pub(crate) use optimizer::{from_torch as optimizer_from_torch, to_torch as optimizer_to_torch};

/// Whether Lightning's format can carry the state of a scheduler (an
/// `Unsupported` error naming what it cannot).
pub fn check_scheduler(state: &[(String, f64)]) -> Result<()> {
    scheduler::to_torch(state, false).map(|_| ())
}

/// Whether a `torch.save` value is a Lightning checkpoint (has
/// `pytorch-lightning_version` and `state_dict`).
pub fn is_lightning(v: &Value) -> bool {
    v.get("pytorch-lightning_version").is_some() && v.get("state_dict").is_some()
}

fn text_map(map: &BTreeMap<String, String>) -> Value {
    Value::Dict(map.iter().map(|(k, v)| (text(k), text(v))).collect())
}

fn nested_text_map(map: &BTreeMap<String, BTreeMap<String, String>>) -> Value {
    Value::Dict(map.iter().map(|(k, v)| (text(k), text_map(v))).collect())
}

fn read_text_map(v: &Value, what: &str) -> Result<BTreeMap<String, String>> {
    entries(v, what)?
        .iter()
        .map(|(k, x)| {
            let k = value::string(k, &format!("{what} key"))?;
            let x = value::string(x, &format!("{what}.{k}"))?;
            Ok((k.to_string(), x.to_string()))
        })
        .collect()
}

fn read_nested_text_map(v: &Value, what: &str) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    entries(v, what)?
        .iter()
        .map(|(k, x)| {
            let k = value::string(k, &format!("{what} key"))?;
            Ok((k.to_string(), read_text_map(x, &format!("{what}.{k}"))?))
        })
        .collect()
}

/// The Lightning checkpoint of `ck`, its state_dict's names prefixed with
/// `prefix` (the LightningModule attribute holding the network, such as
/// `"model."`; empty when the module's parameters are its own).
pub fn to_lightning(ck: &Checkpoint, prefix: &str) -> Result<Value> {
    if let Some(key) = ck.callback_tensors.keys().find(|k| *k != callbacks::SWA) {
        return Err(Error::unsupported(format!(
            "checkpoint_format \"lightning\" cannot hold callback {key}'s tensors"
        )));
    }
    let weights = Value::Dict(
        ck.state_dict.iter().map(|(k, t)| (text(&format!("{prefix}{k}")), Value::Tensor(t.shallow_clone()))).collect(),
    );
    let mut top = vec![
        ("epoch", Value::Int(ck.epoch)),
        ("global_step", Value::Int(ck.global_step)),
        ("pytorch-lightning_version", text(LIGHTNING_VERSION)),
        ("state_dict", weights),
        ("loops", loops::to_lightning(ck)),
    ];
    if let Some(current) = &ck.current_model_state {
        // Weight averaging: the trained weights beside the averaged ones.
        let current = current.iter().map(|(k, t)| (text(&format!("{prefix}{k}")), Value::Tensor(t.shallow_clone())));
        top.push(("current_model_state", Value::Dict(current.collect())));
        let averaging = ck.averaging_state.iter().map(|(k, t)| (text(k), Value::Tensor(t.shallow_clone())));
        top.push(("averaging_state", Value::Dict(averaging.collect())));
    }
    if !ck.weights_only {
        let mut optimizers = Vec::new();
        let owner = |j: usize| ck.scheduler_owners.get(j).copied().unwrap_or(usize::MAX);
        for (i, state) in ck.optimizer_states.iter().enumerate() {
            let kind = ck.optimizer_kinds.get(i).map(String::as_str).unwrap_or("");
            let mut opt = optimizer::to_torch(kind, state).map_err(|e| e.context(format!("optimizer {i}")))?;
            // What its schedulers keep in its param groups; a later one's win.
            let mut extra: Vec<(&str, Vec<f64>)> = Vec::new();
            for (_, s) in ck.scheduler_states.iter().enumerate().filter(|(j, _)| owner(*j) == i) {
                for (k, v) in scheduler::group_entries(s) {
                    match extra.iter_mut().find(|(name, _)| *name == k) {
                        Some(entry) => entry.1 = v,
                        None => extra.push((k, v)),
                    }
                }
            }
            optimizer::add_group_entries(&mut opt, &extra);
            optimizers.push(opt);
        }
        // Lightning's order: the callbacks before the optimizer states.
        top.push(("callbacks", callbacks::to_lightning(ck, prefix, &optimizers)?));
        top.push(("optimizer_states", Value::List(optimizers)));
        let schedulers = ck
            .scheduler_states
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let i = owner(j);
                let betas = ck.optimizer_kinds.get(i).is_some_and(|k| optimizer::has_betas(k));
                scheduler::to_torch(s, betas).map_err(|e| e.context(format!("scheduler {j} (of optimizer {i})")))
            })
            .collect::<Result<Vec<_>>>()?;
        top.push(("lr_schedulers", Value::List(schedulers)));
        if !ck.precision_state.is_empty() {
            let scaler = ck
                .precision_state
                .iter()
                .map(|(k, v)| {
                    let v = if k == "growth_interval" || k == "_growth_tracker" {
                        Value::Int(*v as i64)
                    } else {
                        Value::Float(*v)
                    };
                    (text(k), v)
                })
                .collect();
            top.push((PRECISION_KEY, Value::Dict(scaler)));
        }
    }
    if !ck.hparams.is_empty() {
        top.push(("hparams_name", text("kwargs")));
        top.push((
            "hyper_parameters",
            Value::Dict(ck.hparams.iter().map(|(k, v)| (text(k), value::from_text(v))).collect()),
        ));
    }
    // Lightning's `checkpoint[datamodule.__class__.__qualname__]`.
    for (name, state) in &ck.datamodule_states {
        top.push((name.as_str(), Value::Bytes(state.clone())));
    }
    let mut own = vec![("format", text(super::FORMAT_VERSION))];
    if !ck.weights_only {
        // Which optimizer each listed scheduler steps (Lightning's list
        // does not say; a resume checks it).
        let owners = ck.scheduler_owners.iter().map(|o| Value::Int(*o as i64)).collect();
        own.push(("scheduler_owners", Value::List(owners)));
        own.push(("callbacks", nested_text_map(&ck.callbacks)));
        own.push(("extra", nested_text_map(&ck.extra)));
        let mut rng = Vec::new();
        if let Some(t) = &ck.rng_state {
            rng.push(("cpu", Value::Tensor(t.shallow_clone())));
        }
        if let Some(t) = &ck.cuda_rng_state {
            rng.push(("cuda", Value::Tensor(t.shallow_clone())));
        }
        if let Some(t) = &ck.device_rng_state {
            rng.push(("device", Value::Tensor(t.shallow_clone())));
        }
        own.push(("rng_states", dict(rng)));
    }
    top.push((FULMEN_KEY, dict(own)));
    Ok(dict(top))
}

/// The checkpoint a Lightning `.ckpt` holds (`what` names it in errors).
/// Its state_dict keeps the LightningModule's attribute prefix (the run
/// maps the names to its model), and its schedulers are listed in
/// Lightning's order (`schedulers_listed`).
pub fn from_lightning(top: &Value, what: &str) -> Result<Checkpoint> {
    let mut ck = loops::from_lightning(top, what)?;
    ck.state_dict = super::torch_save::state_dict_of(top, what)?;
    ck.schedulers_listed = true;
    ck.datamodule_states = datamodule_states(top, what)?;
    if let (Some(current), Some(averaging)) = (top.get("current_model_state"), top.get("averaging_state")) {
        ck.current_model_state = Some(tensor_dict(current, &format!("{what}.current_model_state"))?);
        ck.averaging_state = tensor_dict(averaging, &format!("{what}.averaging_state"))?;
    }
    if let Some(h) = top.get("hyper_parameters") {
        for (k, v) in entries(h, &format!("{what}.hyper_parameters"))? {
            let (Value::Str(k), Some(v)) = (k, value::as_text(v)) else { continue };
            ck.hparams.insert(k.clone(), v);
        }
    }
    let Some(optimizers) = top.get("optimizer_states") else {
        ck.weights_only = true;
        return Ok(ck);
    };
    let optimizers = items(optimizers, &format!("{what}.optimizer_states"))?;
    check_len(optimizers.len(), MAX_OPTIMIZERS as usize, &format!("{what}.optimizer_states"))?;
    // Each optimizer's param groups: what a scheduler's per-group lists
    // are measured against before they are read.
    let mut groups = Vec::with_capacity(optimizers.len());
    for (i, o) in optimizers.iter().enumerate() {
        let owhat = format!("{what}.optimizer_states[{i}]");
        ck.optimizer_states.push(optimizer::from_torch(o, &owhat)?);
        ck.scheduler_group_entries.push(optimizer::scheduler_group_entries(o, &owhat)?);
        groups.push(items(value::field(o, "param_groups", &owhat)?, &format!("{owhat}.param_groups"))?.len());
    }
    let own = top.get(FULMEN_KEY);
    let schedulers: &[Value] = match top.get("lr_schedulers") {
        Some(s) => items(s, &format!("{what}.lr_schedulers"))?,
        None => &[],
    };
    check_len(schedulers.len(), MAX_SCHEDULERS, &format!("{what}.lr_schedulers"))?;
    // Which optimizer each scheduler steps (fulmen's entry says), and so
    // how many param groups its per-group lists may cover: the largest
    // optimizer's when the file does not say (or says it wrongly, which
    // is refused once the schedulers are read).
    let owners = own
        .and_then(|o| o.get("scheduler_owners"))
        .map(|o| scheduler_owners(o, schedulers.len(), groups.len(), &format!("{what}.{FULMEN_KEY}.scheduler_owners")));
    let most_groups = groups.iter().copied().max().unwrap_or(0);
    for (i, s) in schedulers.iter().enumerate() {
        let owner = owners.as_ref().and_then(|o| o.as_ref().ok()).and_then(|o| o.get(i));
        let limit = owner.map_or(most_groups, |o| groups[*o]);
        ck.scheduler_states.push(scheduler::from_torch(s, &format!("{what}.lr_schedulers[{i}]"), limit)?);
    }
    if let Some(owners) = owners {
        ck.scheduler_owners = owners?;
    }
    if let Some(p) = top.get(PRECISION_KEY) {
        let pwhat = format!("{what}.{PRECISION_KEY}");
        let scaler = entries(p, &pwhat)?;
        check_len(scaler.len(), GradScaler::STATE_KEYS.len(), &pwhat)?;
        for (k, v) in scaler {
            let k = value::string(k, &format!("{pwhat} key"))?;
            ck.precision_state.push((k.to_string(), value::number(v, &format!("{pwhat}.{k}"))?));
        }
    }
    if let Some(c) = top.get("callbacks") {
        let cwhat = format!("{what}.callbacks");
        ck.callback_tensors = callbacks::tensors_from_lightning(c, &cwhat)?;
        // Read (and so checked) even when fulmen's own entry below holds
        // the states fulmen restores.
        ck.callbacks = callbacks::from_lightning(c, &cwhat, &groups)?;
    }
    if let Some(c) = own.and_then(|o| o.get("callbacks")) {
        ck.callbacks = read_nested_text_map(c, &format!("{what}.{FULMEN_KEY}.callbacks"))?;
    }
    if let Some(own) = own {
        if let Some(e) = own.get("extra") {
            ck.extra = read_nested_text_map(e, &format!("{what}.{FULMEN_KEY}.extra"))?;
        }
        if let Some(r) = own.get("rng_states") {
            let tensor = |key: &str| -> Result<Option<Tensor>> {
                match r.get(key) {
                    Some(Value::Tensor(t)) => Ok(Some(t.shallow_clone())),
                    Some(_) => Err(Error::format(format!("{what}.{FULMEN_KEY}.rng_states.{key} is not a tensor"))),
                    None => Ok(None),
                }
            };
            ck.rng_state = tensor("cpu")?;
            ck.cuda_rng_state = tensor("cuda")?;
            ck.device_rng_state = tensor("device")?;
        }
    }
    Ok(ck)
}

/// The keys of a Lightning checkpoint's own entries, which no datamodule
/// name may take.
const RESERVED_KEYS: [&str; 14] = [
    "epoch",
    "global_step",
    "pytorch-lightning_version",
    "state_dict",
    "loops",
    "callbacks",
    "optimizer_states",
    "lr_schedulers",
    PRECISION_KEY,
    "hparams_name",
    "hyper_parameters",
    "current_model_state",
    "averaging_state",
    FULMEN_KEY,
];

/// Whether `name` is one of the entries a Lightning checkpoint has of its
/// own (so it cannot key a datamodule's state).
pub fn is_reserved_key(name: &str) -> bool {
    RESERVED_KEYS.contains(&name)
}

/// The datamodule states of a Lightning checkpoint: its top-level `bytes`
/// entries under names that are not Lightning's own, each at most
/// [`super::MAX_DATAMODULE_STATE`] bytes. A datamodule state of another
/// kind (a dict a Python datamodule returned) is not fulmen's and is left.
pub(crate) fn datamodule_states(top: &Value, what: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for (k, v) in entries(top, what)? {
        let (Value::Str(name), Value::Bytes(state)) = (k, v) else { continue };
        if is_reserved_key(name) {
            continue;
        }
        check_len(state.len(), super::MAX_DATAMODULE_STATE, &format!("{what}.{name}"))?;
        check_len(out.len() + 1, super::MAX_DATAMODULE_STATES, &format!("{what}: datamodule states"))?;
        out.insert(name.clone(), state.clone());
    }
    Ok(out)
}

/// fulmen's list of the optimizer each of the `schedulers` listed steps,
/// each one of the file's `optimizers` (`what` names it in errors).
fn scheduler_owners(v: &Value, schedulers: usize, optimizers: usize, what: &str) -> Result<Vec<usize>> {
    let owners = items(v, what)?;
    if owners.len() != schedulers {
        return Err(Error::format(format!("{what}: {} entries for {schedulers} schedulers", owners.len())));
    }
    let last = optimizers as i64 - 1;
    owners.iter().map(|o| Ok(value::whole(o, what, last)? as usize)).collect()
}

/// A dict of named tensors (`what` names it in errors).
fn tensor_dict(v: &Value, what: &str) -> Result<Vec<(String, Tensor)>> {
    entries(v, what)?
        .iter()
        .map(|(k, x)| match (k, x) {
            (Value::Str(name), Value::Tensor(t)) => Ok((name.clone(), t.shallow_clone())),
            _ => Err(Error::format(format!("{what} holds an entry that is not a named tensor"))),
        })
        .collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod numbers_tests;
#[cfg(test)]
pub(crate) use numbers_tests::{float_leaves, with_leaf};
