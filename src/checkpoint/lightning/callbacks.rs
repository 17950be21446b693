//! ModelCheckpoint and EarlyStopping states between fulmen's text form and
//! the entries Lightning keeps under each callback's `state_key`
//! (`"ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', ...}"`).
use super::value::{copy_value, dict, entries, number, number_or, scalar_f32, string, text};
use crate::callbacks::backbone_finetuning::{state_from_text, state_to_text, GroupRecord, Records};
use crate::callbacks::model_checkpoint::{best_k_text, read_best_k};
use crate::callbacks::Mode;
use crate::checkpoint::numbers::{check_len, Infinity};
use crate::checkpoint::torch_save::Value;
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The weight averaging callbacks' keys (their class names, as fulmen's).
const AVERAGING: &[&str] = &["EMAWeightAveraging", "WeightAveraging"];

/// BackboneFinetuning's key (its class name, as fulmen's).
const FINETUNING: &str = "BackboneFinetuning";

/// StochasticWeightAveraging's key (its class name, as fulmen's).
pub(super) const SWA: &str = "StochasticWeightAveraging";

/// The most checkpoints a ModelCheckpoint state may rank.
const MAX_BEST_K: usize = 1 << 20;

/// StochasticWeightAveraging's state as Lightning keeps it: the count, the
/// last epoch averaged, SWALR's state once it took over (the first
/// optimizer's first scheduler) and the averaged module's state_dict.
fn swa_to_lightning(ck: &Checkpoint, state: &BTreeMap<String, String>, prefix: &str) -> Result<Value> {
    let int = |k: &str| -> Result<i64> {
        state
            .get(k)
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| Error::format(format!("{SWA} state lacks `{k}`")))
    };
    let scheduler = if state.get("swalr").map(String::as_str) == Some("true") {
        let j = ck.scheduler_owners.iter().position(|o| *o == 0).unwrap_or(0);
        let flat = ck.scheduler_states.get(j).ok_or_else(|| Error::format(format!("{SWA}: no SWALR state")))?;
        super::scheduler::to_torch(flat, false)?
    } else {
        Value::None
    };
    let average = match ck.callback_tensors.get(SWA) {
        Some(t) => Value::Dict(
            t.iter().map(|(k, t)| (text(&format!("{prefix}{k}")), Value::Tensor(t.shallow_clone()))).collect(),
        ),
        None => Value::None,
    };
    Ok(dict(vec![
        ("n_averaged", Value::Int(int("n_averaged")?)),
        ("latest_update_epoch", Value::Int(int("latest_update_epoch")?)),
        ("scheduler_state", scheduler),
        ("average_model_state", average),
    ]))
}

/// fulmen's StochasticWeightAveraging state from Lightning's (its average
/// comes through [`tensors_from_lightning`]; `groups`: the param groups of
/// each optimizer of the checkpoint).
fn swa_from_lightning(state: &Value, what: &str, groups: &[usize]) -> Result<BTreeMap<String, String>> {
    let int = |k: &str, min: i64| -> Result<String> {
        let v = super::value::field(state, k, what)?;
        let n = match v {
            Value::Int(n) if *n >= min && *n <= crate::checkpoint::file::MAX_COUNTER => *n,
            _ => return Err(Error::format(format!("{what}.{k} is not a count >= {min}"))),
        };
        Ok(n.to_string())
    };
    let swalr = match state.get("scheduler_state") {
        None | Some(Value::None) => false,
        Some(s) => {
            // Lightning's copy of SWALR's state (fulmen restores the one
            // among the schedulers), checked as that one is.
            let most = groups.iter().copied().max().unwrap_or(0);
            super::scheduler::from_torch(s, &format!("{what}.scheduler_state"), most)?;
            true
        }
    };
    Ok(BTreeMap::from([
        ("n_averaged".to_string(), int("n_averaged", 0)?),
        ("latest_update_epoch".to_string(), int("latest_update_epoch", -1)?),
        ("swalr".to_string(), swalr.to_string()),
    ]))
}

/// The tensors of Lightning's callback states fulmen keeps apart
/// (StochasticWeightAveraging's `average_model_state`), by callback.
pub fn tensors_from_lightning(v: &Value, what: &str) -> Result<BTreeMap<String, Vec<(String, tch::Tensor)>>> {
    let mut out = BTreeMap::new();
    let Some(state) = v.get(SWA) else { return Ok(out) };
    match state.get("average_model_state") {
        None | Some(Value::None) => {}
        Some(average) => {
            let swhat = format!("{what}[{SWA:?}].average_model_state");
            out.insert(SWA.to_string(), super::tensor_dict(average, &swhat)?);
        }
    }
    Ok(out)
}

/// Checks the numbers a recorded param group copies from its optimizer
/// (Lightning restores the group's hyperparameters from them; fulmen from
/// the optimizer's state): each one finite.
fn check_group_numbers(g: &Value, what: &str) -> Result<()> {
    let numeric = |x: &Value| matches!(x, Value::Float(_) | Value::Int(_) | Value::Tensor(_));
    for (k, x) in entries(g, what)? {
        let Value::Str(k) = k else { continue };
        match x {
            x if numeric(x) => {
                number(x, &format!("{what}.{k}"))?;
            }
            Value::Tuple(items) | Value::List(items) if k != "params" => {
                for (m, item) in items.iter().enumerate().filter(|(_, item)| numeric(item)) {
                    number(item, &format!("{what}.{k}[{m}]"))?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// BackboneFinetuning's state as Lightning keeps it:
/// `internal_optimizer_metadata` ({optimizer index: its param groups, each
/// the optimizer's own entries with the lr it had when recorded and its
/// parameters' names}) and `previous_backbone_lr`.
fn finetuning_to_lightning(state: &BTreeMap<String, String>, prefix: &str, optimizers: &[Value]) -> Result<Value> {
    let (previous, records) = state_from_text(state)?;
    let mut meta: Vec<(Value, Value)> = Vec::new();
    for (i, groups) in records {
        let listed = groups.iter().enumerate().map(|(j, g)| finetuning_group(g, prefix, optimizers.get(i), j));
        meta.push((Value::Int(i as i64), Value::List(listed.collect())));
    }
    let previous = previous.map_or(Value::None, Value::Float);
    Ok(dict(vec![("internal_optimizer_metadata", Value::Dict(meta)), ("previous_backbone_lr", previous)]))
}

/// Group `j` of a BackboneFinetuning record as Lightning keeps it: the
/// optimizer's own entries for the group (when `optimizer`, its state as
/// torch keeps it, has the group), with the recorded lr and the
/// parameters' names.
fn finetuning_group(g: &GroupRecord, prefix: &str, optimizer: Option<&Value>, j: usize) -> Value {
    let params =
        || Value::List(g.params.iter().filter(|n| !n.is_empty()).map(|n| text(&format!("{prefix}{n}"))).collect());
    let own = optimizer.and_then(|o| o.get("param_groups")).and_then(|groups| match groups {
        Value::List(groups) => groups.get(j),
        _ => None,
    });
    match own {
        Some(Value::Dict(entries)) => Value::Dict(
            entries
                .iter()
                .map(|(k, v)| match k {
                    Value::Str(s) if s == "lr" => (text(s), Value::Float(g.lr)),
                    Value::Str(s) if s == "params" => (text(s), params()),
                    _ => (copy_value(k), copy_value(v)),
                })
                .collect(),
        ),
        _ => dict(vec![("lr", Value::Float(g.lr)), ("params", params())]),
    }
}

/// fulmen's BackboneFinetuning state from Lightning's (`groups`: the param
/// groups of each optimizer of the checkpoint, at most as many as it
/// recorded).
fn finetuning_from_lightning(state: &Value, what: &str, groups: &[usize]) -> Result<BTreeMap<String, String>> {
    let previous = match state.get("previous_backbone_lr") {
        None | Some(Value::None) => None,
        Some(v) => Some(number(v, &format!("{what}.previous_backbone_lr"))?),
    };
    let mut records = Records::new();
    let meta = state
        .get("internal_optimizer_metadata")
        .ok_or_else(|| Error::format(format!("{what} has no `internal_optimizer_metadata`")))?;
    let meta = entries(meta, &format!("{what}.internal_optimizer_metadata"))?;
    check_len(meta.len(), groups.len(), &format!("{what}.internal_optimizer_metadata"))?;
    for (i, listed) in meta {
        let gwhat = format!("{what}.internal_optimizer_metadata[{i:?}]");
        let i = match i {
            Value::Int(i) if *i >= 0 && (*i as u64) < groups.len() as u64 => *i as usize,
            _ => {
                return Err(Error::format(format!(
                    "{gwhat}: the key is not one of the {} optimizers' index",
                    groups.len()
                )))
            }
        };
        let listed = super::value::items(listed, &gwhat)?;
        check_len(listed.len(), groups[i], &gwhat)?;
        let recorded = records.entry(i).or_default();
        for (j, g) in listed.iter().enumerate() {
            check_group_numbers(g, &format!("{gwhat}[{j}]"))?;
            let lr = number(super::value::field(g, "lr", &gwhat)?, &format!("{gwhat}[{j}].lr"))?;
            let names =
                super::value::items(super::value::field(g, "params", &gwhat)?, &format!("{gwhat}[{j}].params"))?
                    .iter()
                    .map(|n| string(n, &format!("{gwhat}[{j}].params")).map(str::to_string))
                    .collect::<Result<Vec<_>>>()?;
            recorded.push(GroupRecord { params: names, lr });
        }
    }
    Ok(state_to_text(previous, &records))
}

/// Lightning's `callbacks` entry: each callback with a Lightning
/// counterpart under its Lightning key. `prefix` is the one of the
/// state_dict's names, `optimizers` the optimizer states as torch keeps
/// them (BackboneFinetuning's groups copy their entries).
pub fn to_lightning(ck: &Checkpoint, prefix: &str, optimizers: &[Value]) -> Result<Value> {
    let mut out = Vec::new();
    for (key, lightning_key) in &ck.lightning_keys {
        let Some(state) = ck.callbacks.get(key) else { continue };
        let v = if lightning_key.starts_with("ModelCheckpoint{") {
            model_checkpoint(state)?
        } else if lightning_key.starts_with("EarlyStopping{") {
            early_stopping(state)?
        } else if AVERAGING.contains(&lightning_key.as_str()) {
            let step = state.get("latest_update_step").and_then(|v| v.parse::<i64>().ok()).unwrap_or_default();
            dict(vec![("latest_update_step", Value::Int(step))])
        } else if lightning_key == FINETUNING {
            finetuning_to_lightning(state, prefix, optimizers)?
        } else if lightning_key == SWA {
            swa_to_lightning(ck, state, prefix)?
        } else {
            continue;
        };
        out.push((text(lightning_key), v));
    }
    Ok(Value::Dict(out))
}

fn opt_str(s: Option<&String>) -> Value {
    match s {
        Some(s) if !s.is_empty() => text(s),
        _ => Value::None,
    }
}

fn score(s: Option<&String>) -> Result<Value> {
    match s.and_then(|s| s.parse::<f64>().ok()) {
        Some(v) => scalar_f32(v),
        None => Ok(Value::None),
    }
}

fn model_checkpoint(state: &BTreeMap<String, String>) -> Result<Value> {
    let get = |k: &str| state.get(k).cloned().unwrap_or_default();
    let max = get("mode") == "max";
    // Lightning ranks checkpoints only by a monitored metric.
    let best_k: BTreeMap<String, f64> = if get("monitor").is_empty() {
        BTreeMap::new()
    } else {
        read_best_k(&get("best_k_models"), if max { Mode::Max } else { Mode::Min }).unwrap_or_default()
    };
    // The worst kept checkpoint, which the next one must beat.
    let kth = best_k
        .iter()
        .max_by(|a, b| if max { b.1.total_cmp(a.1) } else { a.1.total_cmp(b.1) })
        .map(|(p, v)| (p.clone(), *v));
    let (kth_path, kth_value) = match kth {
        Some((p, v)) => (p, v),
        _ => (String::new(), if max { f64::NEG_INFINITY } else { f64::INFINITY }),
    };
    let best_k = best_k.iter().map(|(p, v)| Ok((text(p), scalar_f32(*v)?))).collect::<Result<Vec<_>>>()?;
    Ok(dict(vec![
        ("monitor", opt_str(state.get("monitor"))),
        ("best_model_score", score(state.get("best_model_score"))?),
        ("best_model_path", text(&get("best_model_path"))),
        ("current_score", Value::None),
        ("dirpath", opt_str(state.get("dirpath"))),
        ("best_k_models", Value::Dict(best_k)),
        ("kth_best_model_path", text(&kth_path)),
        ("kth_value", scalar_f32(kth_value)?),
        ("last_model_path", text(&get("last_model_path"))),
    ]))
}

fn early_stopping(state: &BTreeMap<String, String>) -> Result<Value> {
    let int = |k: &str| -> Result<Value> {
        state
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| Value::Int(v as i64))
            .ok_or_else(|| Error::format(format!("EarlyStopping state lacks `{k}`")))
    };
    let best = state.get("best_score").and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::INFINITY);
    Ok(dict(vec![
        ("wait_count", int("wait_count")?),
        ("stopped_epoch", int("stopped_epoch")?),
        ("best_score", scalar_f32(best)?),
        ("patience", int("patience")?),
    ]))
}

/// The value of `'name': '...'` in a Lightning state key (a Python dict's
/// repr), when it is a string.
fn key_field(key: &str, name: &str) -> Option<String> {
    let start = key.find(&format!("'{name}': "))? + name.len() + 4;
    let rest = &key[start..];
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut out = String::new();
    let mut chars = rest[1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            c if c == quote => return Some(out),
            c => out.push(c),
        }
    }
    None
}

fn text_of(v: Option<&Value>) -> String {
    v.and_then(super::value::as_text).unwrap_or_default()
}

/// A ModelCheckpoint score as fulmen's state keeps it: empty for None,
/// else a number, which may be infinite (Lightning's start, an infinite
/// metric, a NaN one ranked as the worst), never NaN.
fn score_text(v: Option<&Value>, swhat: &str, key: &str) -> Result<String> {
    match v {
        None | Some(Value::None) => Ok(String::new()),
        Some(x) => Ok(number_or(x, Infinity::Allowed, &format!("{swhat}.{key}"))?.to_string()),
    }
}

/// fulmen's callback states from Lightning's `callbacks` entry: its
/// ModelCheckpoint, EarlyStopping, weight averaging and BackboneFinetuning
/// states, under the names fulmen's callbacks of the same monitor (and
/// mode) have. Others are left out. `groups`: the param groups of each
/// optimizer of the checkpoint. Scores may be infinite (Lightning starts
/// them at their mode's worst, and keeps an infinite metric), never NaN;
/// every other number is finite.
pub fn from_lightning(v: &Value, what: &str, groups: &[usize]) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (k, state) in entries(v, what)? {
        let k = string(k, &format!("{what} key"))?;
        let swhat = format!("{what}[{k:?}]");
        let (name, map) = if k.starts_with("ModelCheckpoint{") {
            let monitor = key_field(k, "monitor").unwrap_or_default();
            let mode = key_field(k, "mode").unwrap_or_else(|| "min".into());
            let mut m = BTreeMap::new();
            m.insert("monitor".to_string(), monitor.clone());
            m.insert("mode".to_string(), mode);
            for f in ["best_model_path", "last_model_path", "dirpath"] {
                m.insert(f.to_string(), text_of(state.get(f)));
            }
            m.insert("best_model_score".into(), score_text(state.get("best_model_score"), &swhat, "best_model_score")?);
            // Not kept (fulmen computes them), but checked as the scores are.
            for f in ["kth_value", "current_score"] {
                score_text(state.get(f), &swhat, f)?;
            }
            let mut best_k = BTreeMap::new();
            if let Some(b) = state.get("best_k_models") {
                let bwhat = format!("{swhat}.best_k_models");
                let ranked = entries(b, &bwhat)?;
                check_len(ranked.len(), MAX_BEST_K, &bwhat)?;
                for (p, s) in ranked {
                    let p = string(p, &bwhat)?;
                    best_k.insert(p.to_string(), number_or(s, Infinity::Allowed, &format!("{bwhat}[{p:?}]"))?);
                }
            }
            m.insert("best_k_models".into(), best_k_text(&best_k));
            (format!("ModelCheckpoint{{monitor={monitor:?}}}"), m)
        } else if k.starts_with("EarlyStopping{") {
            let monitor = key_field(k, "monitor").unwrap_or_default();
            let mode = key_field(k, "mode").unwrap_or_else(|| "min".into());
            let mut m = BTreeMap::new();
            for f in ["wait_count", "stopped_epoch", "best_score", "patience"] {
                let x = state.get(f).ok_or_else(|| Error::format(format!("{swhat} has no `{f}`")))?;
                // Lightning starts the best score at its mode's worst (an
                // infinity), and takes an infinite metric as it is.
                let allowed = if f == "best_score" { Infinity::Allowed } else { Infinity::Refused };
                m.insert(f.to_string(), number_or(x, allowed, &format!("{swhat}.{f}"))?.to_string());
            }
            (format!("EarlyStopping{{monitor={monitor:?}, mode={mode:?}}}"), m)
        } else if k == FINETUNING {
            (k.to_string(), finetuning_from_lightning(state, &swhat, groups)?)
        } else if k == SWA {
            (k.to_string(), swa_from_lightning(state, &swhat, groups)?)
        } else if AVERAGING.contains(&k) {
            let step = state
                .get("latest_update_step")
                .ok_or_else(|| Error::format(format!("{swhat} has no `latest_update_step`")))?;
            let step = super::value::whole(
                step,
                &format!("{swhat}.latest_update_step"),
                crate::checkpoint::file::MAX_COUNTER,
            )?;
            (k.to_string(), BTreeMap::from([("latest_update_step".to_string(), step.to_string())]))
        } else {
            continue;
        };
        let n = seen.entry(name.clone()).or_insert(0);
        *n += 1;
        let name = if *n == 1 { name } else { format!("{name}#{n}") };
        out.insert(name, map);
    }
    Ok(out)
}
