//! LBFGS's state between fulmen's flat form and torch's
//! `LBFGS.state_dict()`: one group with int counts and `line_search_fn`
//! (None or "strong_wolfe"), and a global state on parameter 0 whose
//! history is lists of tensors and whose step length and Hessian scale are
//! Python numbers or 0-dim tensors, as torch left them.
use super::value::{entries, field, items, number, string, tensor_number, text, whole};
use crate::checkpoint::numbers::check_len;
use crate::checkpoint::torch_save::Value;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

/// Group entries torch keeps as ints.
const COUNTS: &[&str] = &["max_iter", "max_eval", "history_size"];

/// The order of torch's group entries (a scheduler's `initial_lr` and
/// `params` follow).
const GROUP_ORDER: &[&str] =
    &["lr", "max_iter", "max_eval", "tolerance_grad", "tolerance_change", "history_size", "line_search_fn"];

/// The order torch's step fills the state in (`al` appears during the
/// first step that iterates twice).
const STATE_ORDER: &[&str] =
    &["func_evals", "n_iter", "al", "d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss"];

/// Whether torch's optimizer state `v` is an LBFGS one (its group has a
/// `history_size`).
pub fn is_lbfgs(v: &Value) -> bool {
    let Some(Value::List(groups)) = v.get("param_groups") else { return false };
    groups.first().is_some_and(|g| g.get("history_size").is_some())
}

/// A state entry as torch keeps it: 0-dim f64 tensors are Python numbers
/// (ints where torch has ints), others tensors.
fn py_value(t: &Tensor, key: &str, int: bool) -> Result<Value> {
    if t.dim() == 0 && t.kind() == Kind::Double {
        let v = tensor_number(t, key)?;
        if int && v.fract() == 0.0 && v.abs() < 9.0e15 {
            return Ok(Value::Int(v as i64));
        }
        return Ok(Value::Float(v));
    }
    Ok(Value::Tensor(t.shallow_clone()))
}

/// torch's `state_dict()` of LBFGS from fulmen's flat state.
pub fn to_torch(flat: &[(String, Tensor)]) -> Result<Value> {
    let mut group: Vec<(Value, Value)> = Vec::new();
    let mut params = None;
    let mut history_size = 0usize;
    let mut state: BTreeMap<&str, Value> = BTreeMap::new();
    let mut lists: BTreeMap<&str, BTreeMap<usize, Value>> = BTreeMap::new();
    for (name, t) in flat {
        let bad = || Error::format(format!("lbfgs state: unexpected entry {name:?}"));
        if let Some(k) = name.strip_prefix("param_groups.0.") {
            let v = match k {
                "params" => {
                    let ids = Vec::<i64>::try_from(t.f_flatten(0, -1)?)?;
                    params = Some(Value::List(ids.into_iter().map(Value::Int).collect()));
                    continue;
                }
                "line_search_fn" if tensor_number(t, name)? != 0.0 => text("strong_wolfe"),
                "line_search_fn" => Value::None,
                k if COUNTS.contains(&k) => {
                    let n = tensor_number(t, name)?;
                    if k == "history_size" {
                        history_size = n.clamp(0.0, crate::optim::MAX_HISTORY as f64) as usize;
                    }
                    Value::Int(n as i64)
                }
                _ => Value::Float(tensor_number(t, name)?),
            };
            group.push((text(k), v));
        } else if let Some(k) = name.strip_prefix("state.0.") {
            match k.rsplit_once('.') {
                Some((list, i)) if matches!(list, "old_dirs" | "old_stps" | "ro" | "al") => {
                    let i: usize = i.parse().map_err(|_| bad())?;
                    let key = STATE_ORDER.iter().find(|o| **o == list).ok_or_else(bad)?;
                    lists.entry(key).or_default().insert(i, py_value(t, name, false)?);
                }
                Some(_) => return Err(bad()),
                None => {
                    let key = STATE_ORDER.iter().find(|o| **o == k).ok_or_else(bad)?;
                    let int = matches!(k, "func_evals" | "n_iter" | "H_diag");
                    state.insert(key, py_value(t, name, int)?);
                }
            }
        } else {
            return Err(bad());
        }
    }
    let order = |k: &Value| match k {
        Value::Str(s) => GROUP_ORDER.iter().position(|o| o == s).unwrap_or(GROUP_ORDER.len()),
        _ => GROUP_ORDER.len(),
    };
    group.sort_by_key(|(k, _)| order(k));
    group.push((text("params"), params.ok_or_else(|| Error::format("lbfgs state: group 0 has no params"))?));
    if !state.is_empty() {
        for (name, entries) in std::mem::take(&mut lists) {
            let value = if name == "al" {
                // torch's `[None] * history_size`, filled as pairs are used.
                let len = history_size.max(entries.keys().last().map_or(0, |i| i + 1));
                let mut al: Vec<Value> = (0..len).map(|_| Value::None).collect();
                for (i, v) in entries {
                    al[i] = v;
                }
                Value::List(al)
            } else {
                Value::List(entries.into_values().collect())
            };
            state.insert(name, value);
        }
        for name in ["old_dirs", "old_stps", "ro"] {
            if state.contains_key("d") {
                state.entry(name).or_insert_with(|| Value::List(Vec::new()));
            }
        }
    }
    let state_dict = if state.is_empty() {
        Value::Dict(Vec::new())
    } else {
        let mut ordered: Vec<(&str, Value)> = state.into_iter().collect();
        ordered.sort_by_key(|(k, _)| STATE_ORDER.iter().position(|o| o == k));
        let entries = ordered.into_iter().map(|(k, v)| (text(k), v)).collect();
        Value::Dict(vec![(Value::Int(0), Value::Dict(entries))])
    };
    Ok(Value::Dict(vec![(text("state"), state_dict), (text("param_groups"), Value::List(vec![Value::Dict(group)]))]))
}

/// A 0-dim f64 tensor: a Python number in the flat form.
fn number_tensor(x: f64) -> Result<Tensor> {
    Ok(Tensor::f_from_slice(&[x])?.f_reshape([0i64; 0])?)
}

/// A state entry in the flat form: numbers as 0-dim f64, tensors kept
/// (a one-number tensor, such as torch's `t`, `H_diag` or an `ro` entry,
/// must hold a finite number).
fn flat_value(v: &Value, what: &str) -> Result<Tensor> {
    match v {
        Value::Tensor(t) => {
            if t.dim() == 0 {
                number(v, what)?;
            }
            Ok(t.shallow_clone())
        }
        v => number_tensor(number(v, what)?),
    }
}

/// fulmen's flat state from torch's LBFGS `state_dict()` (`what` names it
/// in errors). A scheduler's group entries are left to
/// `scheduler_group_entries`.
pub fn from_torch(v: &Value, what: &str) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::new();
    let groups = items(field(v, "param_groups", what)?, &format!("{what}.param_groups"))?;
    if groups.len() != 1 {
        return Err(Error::format(format!("{what}: LBFGS state with {} param groups (it has one)", groups.len())));
    }
    let gwhat = format!("{what}.param_groups[0]");
    // The history holds at most `history_size` update pairs.
    let history = match groups[0].get("history_size") {
        Some(h) => whole(h, &format!("{gwhat}.history_size"), crate::optim::MAX_HISTORY)? as usize,
        None => crate::optim::MAX_HISTORY as usize,
    };
    for (k, x) in entries(&groups[0], &gwhat)? {
        let k = string(k, &format!("{gwhat} key"))?;
        let key = format!("param_groups.0.{k}");
        if super::scheduler::GROUP_ENTRIES.contains(&k) {
            continue;
        }
        match (k, x) {
            ("params", ids) => out.push((key, Tensor::f_from_slice(&super::value::param_ids(ids, &gwhat)?)?)),
            ("line_search_fn", Value::None) => out.push((key, number_tensor(0.0)?)),
            ("line_search_fn", Value::Str(s)) if s == "strong_wolfe" => out.push((key, number_tensor(1.0)?)),
            ("line_search_fn", _) => {
                return Err(Error::format(format!("{gwhat}.line_search_fn is neither None nor \"strong_wolfe\"")))
            }
            (_, x) => out.push((key, number_tensor(number(x, &format!("{gwhat}.{k}"))?)?)),
        }
    }
    for (i, st) in entries(field(v, "state", what)?, &format!("{what}.state"))? {
        if !matches!(i, Value::Int(0)) {
            return Err(Error::format(format!("{what}.state: LBFGS keeps its state on parameter 0 only")));
        }
        for (k, x) in entries(st, &format!("{what}.state[0]"))? {
            let k = string(k, &format!("{what}.state[0] key"))?;
            let kwhat = format!("{what}.state[0].{k}");
            match (k, x) {
                ("old_dirs" | "old_stps" | "ro" | "al", Value::List(list)) => {
                    check_len(list.len(), history, &kwhat)?;
                    for (j, item) in list.iter().enumerate() {
                        if !matches!(item, Value::None) {
                            out.push((format!("state.0.{k}.{j}"), flat_value(item, &format!("{kwhat}[{j}]"))?));
                        }
                    }
                }
                (_, Value::None) => {}
                (_, x) => out.push((format!("state.0.{k}"), flat_value(x, &kwhat)?)),
            }
        }
    }
    Ok(out)
}
