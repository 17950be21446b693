//! LBFGS's state dict as named tensors: its one group
//! (`param_groups.0.lr`, `.max_iter`, ...) and torch's global state on
//! parameter 0 (`state.0.func_evals`, `state.0.d`, the history as
//! `state.0.old_dirs.K`, ...). Python numbers are 0-dim f64 tensors; the
//! values torch keeps as tensors (`t`, `H_diag`, `ro`, `al` after an
//! update) keep their dtype. (With float64 parameters the two read alike
//! and both compute the same.)
use super::lbfgs::{check_group_values, copy_num, HistoryView, LbfgsOptions};
use super::py_num::Num;
use super::state::{deep_copy, scalar, GroupOptions};
use super::ParamGroup;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

/// The lists of the history, by their key in `state.0`.
const LISTS: &[&str] = &["old_dirs", "old_stps", "ro", "al"];

/// The named tensors of `group` and `history`.
pub(crate) fn save(group: &ParamGroup, history: Option<HistoryView>) -> Result<Vec<(String, Tensor)>> {
    let n = group.params.len() as i64;
    let mut out = vec![("param_groups.0.params".to_string(), Tensor::f_from_slice(&(0..n).collect::<Vec<_>>())?)];
    out.push(("param_groups.0.lr".into(), scalar(group.lr)?));
    for (k, v) in LbfgsOptions::EXTRAS.iter().zip(&group.extras) {
        out.push((format!("param_groups.0.{k}"), scalar(*v)?));
    }
    if let Some(v) = group.initial_lr {
        out.push(("param_groups.0.initial_lr".into(), scalar(v)?));
    }
    let Some(h) = history else { return Ok(out) };
    let mut put = |k: &str, t: Tensor| out.push((format!("state.0.{k}"), t));
    put("func_evals", scalar(h.func_evals as f64)?);
    put("n_iter", scalar(h.n_iter as f64)?);
    if let Some(d) = &h.d {
        put("d", deep_copy(d)?);
    }
    if let Some(t) = &h.t {
        put("t", copy_num(t)?);
    }
    for (i, t) in h.old_dirs.iter().enumerate() {
        put(&format!("old_dirs.{i}"), deep_copy(t)?);
    }
    for (i, t) in h.old_stps.iter().enumerate() {
        put(&format!("old_stps.{i}"), deep_copy(t)?);
    }
    for (i, v) in h.ro.iter().enumerate() {
        put(&format!("ro.{i}"), copy_num(v)?);
    }
    if let Some(v) = &h.h_diag {
        put("H_diag", copy_num(v)?);
    }
    if let Some(t) = &h.prev_flat_grad {
        put("prev_flat_grad", deep_copy(t)?);
    }
    if let Some(v) = h.prev_loss {
        put("prev_loss", scalar(v)?);
    }
    for (i, v) in h.al.iter().enumerate() {
        if let Some(v) = v {
            put(&format!("al.{i}"), copy_num(v)?);
        }
    }
    Ok(out)
}

/// What [`load`] read.
pub(crate) struct Loaded {
    /// The group's hyperparameters (without parameters).
    pub group: ParamGroup,
    /// The history; `None` before the first step.
    pub history: Option<HistoryView>,
}

/// Reads a state dict written by [`save`] (or converted from torch's) for
/// an optimizer whose one group is `current`, without changing anything.
/// Tensors are copied to the parameters' device and dtype, as torch's
/// `load_state_dict` casts them.
pub(crate) fn load(dict: &[(String, Tensor)], current: &ParamGroup, defaults: &LbfgsOptions) -> Result<Loaded> {
    let bad = |m: String| Error::format(format!("lbfgs state dict: {m}"));
    let mut groups: BTreeMap<&str, &Tensor> = BTreeMap::new();
    let mut state: BTreeMap<&str, &Tensor> = BTreeMap::new();
    for (k, t) in dict {
        if !t.defined() {
            return Err(bad(format!("'{k}' is undefined")));
        }
        let slot = if let Some(rest) = k.strip_prefix("param_groups.0.") {
            groups.insert(rest, t)
        } else if let Some(rest) = k.strip_prefix("state.0.") {
            state.insert(rest, t)
        } else {
            return Err(bad(format!(
                "unexpected key '{k}' (LBFGS has one parameter group and keeps its state on parameter 0)"
            )));
        };
        if slot.is_some() {
            return Err(bad(format!("duplicate key '{k}'")));
        }
    }
    // Every number of the state is finite (a hyperparameter, a count, a
    // step length, a loss).
    let finite = |v: f64, key: &str| crate::checkpoint::numbers::finite(v, &format!("lbfgs state dict: '{key}'"));
    let number = |map: &BTreeMap<&str, &Tensor>, k: &str, prefix: &str| -> Result<Option<f64>> {
        match map.get(k) {
            None => Ok(None),
            Some(t) if t.numel() == 1 => {
                let v = crate::checkpoint::numbers::one_value(t)?;
                Ok(Some(finite(v, &format!("{prefix}{k}"))?))
            }
            Some(t) => Err(bad(format!("'{prefix}{k}' should hold one number, it has shape {:?}", t.size()))),
        }
    };
    let required = |k: &str| -> Result<f64> {
        number(&groups, k, "param_groups.0.")?.ok_or_else(|| bad(format!("missing key 'param_groups.0.{k}'")))
    };
    let n = current.params.len() as i64;
    let ids = groups.get("params").ok_or_else(|| bad("missing key 'param_groups.0.params'".into()))?;
    if ids.dim() != 1 || Vec::<i64>::try_from(*ids)? != (0..n).collect::<Vec<_>>() {
        return Err(bad(format!("'param_groups.0.params' does not list the {n} parameters")));
    }
    let mut group = ParamGroup::new(&[], required("lr")?, 0.0, 0.0);
    group.initial_lr = number(&groups, "initial_lr", "param_groups.0.")?;
    group.extras = LbfgsOptions::EXTRAS.iter().map(|k| required(k)).collect::<Result<_>>()?;
    for k in groups.keys() {
        if !matches!(*k, "params" | "lr" | "initial_lr") && !LbfgsOptions::EXTRAS.contains(k) {
            return Err(bad(format!("unexpected key 'param_groups.0.{k}'")));
        }
    }
    check_group_values(defaults, &group).map_err(|e| bad(e.message))?;
    if state.is_empty() {
        return Ok(Loaded { group, history: None });
    }
    let like = current.params.first().ok_or_else(|| bad("the optimizer has no parameters".into()))?;
    let numel: i64 = current.params.iter().map(|p| p.numel() as i64).sum();
    let flat = |k: &str| -> Result<Option<Tensor>> {
        match state.get(k) {
            None => Ok(None),
            Some(t) if t.size() == [numel] => Ok(Some(cast_like(t, like)?)),
            Some(t) => Err(bad(format!("'state.0.{k}' has shape {:?}, expected [{numel}]", t.size()))),
        }
    };
    let num = |k: &str| -> Result<Option<Num>> {
        match state.get(k) {
            None => Ok(None),
            Some(t) if t.numel() != 1 => {
                Err(bad(format!("'state.0.{k}' should hold one number, it has shape {:?}", t.size())))
            }
            Some(t) => {
                let v = finite(crate::checkpoint::numbers::one_value(t)?, &format!("state.0.{k}"))?;
                if t.kind() == Kind::Double && t.dim() == 0 {
                    Ok(Some(Num::F(v)))
                } else {
                    Ok(Some(Num::T(cast_like(&t.f_reshape([0i64; 0])?, like)?)))
                }
            }
        }
    };
    let count = |k: &str| -> Result<i64> {
        let v = number(&state, k, "state.0.")?.ok_or_else(|| bad(format!("missing key 'state.0.{k}'")))?;
        if v.fract() != 0.0 || !(0.0..=i64::MAX as f64).contains(&v) {
            return Err(bad(format!("'state.0.{k}' = {v} is not a count")));
        }
        Ok(v as i64)
    };
    // The lists: entries numbered from 0 without gaps (`al` may have gaps).
    let mut lists: BTreeMap<&str, BTreeMap<usize, &str>> = BTreeMap::new();
    for k in state.keys() {
        let Some((name, i)) = k.rsplit_once('.') else { continue };
        if !LISTS.contains(&name) {
            return Err(bad(format!("unexpected key 'state.0.{k}'")));
        }
        let i: usize = i.parse().map_err(|_| bad(format!("unexpected key 'state.0.{k}'")))?;
        lists.entry(name).or_default().insert(i, k);
    }
    for k in state.keys() {
        if !k.contains('.')
            && !matches!(*k, "func_evals" | "n_iter" | "d" | "t" | "H_diag" | "prev_flat_grad" | "prev_loss")
        {
            return Err(bad(format!("unexpected key 'state.0.{k}'")));
        }
    }
    let len = |name: &str| lists.get(name).map_or(0, BTreeMap::len);
    let pairs = len("old_dirs");
    for name in ["old_dirs", "old_stps", "ro"] {
        let entries = lists.get(name);
        if len(name) != pairs || entries.is_some_and(|m| m.keys().copied().ne(0..pairs)) {
            return Err(bad(format!("'old_dirs', 'old_stps' and 'ro' must hold the same entries 0..n ({name})")));
        }
    }
    let listed = |name: &str| lists.get(name).map(|m| m.values().copied().collect::<Vec<_>>()).unwrap_or_default();
    let vectors = |name: &str| -> Result<Vec<Tensor>> {
        listed(name).iter().map(|k| flat(k).map(|t| t.unwrap_or_else(Tensor::new))).collect()
    };
    let ro = listed("ro").iter().map(|k| Ok(num(k)?.unwrap_or(Num::F(0.0)))).collect::<Result<Vec<_>>>()?;
    let mut al = Vec::new();
    if let Some(entries) = lists.get("al") {
        if let Some((&last, _)) = entries.last_key_value() {
            if last >= pairs.max(1) {
                return Err(bad(format!("'state.0.al.{last}' is past the {pairs} update pairs")));
            }
            al.resize(last + 1, None);
        }
        for (i, k) in entries {
            al[*i] = num(k)?;
        }
    }
    let history = HistoryView {
        func_evals: count("func_evals")?,
        n_iter: count("n_iter")?,
        d: flat("d")?,
        t: num("t")?,
        old_dirs: vectors("old_dirs")?,
        old_stps: vectors("old_stps")?,
        ro,
        h_diag: num("H_diag")?,
        prev_flat_grad: flat("prev_flat_grad")?,
        prev_loss: number(&state, "prev_loss", "state.0.")?,
        al,
    };
    let complete = history.d.is_some()
        && history.t.is_some()
        && history.h_diag.is_some()
        && history.prev_flat_grad.is_some()
        && history.prev_loss.is_some();
    if history.n_iter > 0 && !complete {
        return Err(bad(
            "the state has iterations but lacks 'd', 't', 'H_diag', 'prev_flat_grad' or 'prev_loss'".into()
        ));
    }
    Ok(Loaded { group, history: Some(history) })
}

/// A copy of `t` on `like`'s device with its dtype, when `like` is
/// floating point (torch's cast of optimizer state on load).
fn cast_like(t: &Tensor, like: &Tensor) -> Result<Tensor> {
    let t = t.f_detach()?;
    let t = if like.is_floating_point() && t.kind() != like.kind() { t.f_to_kind(like.kind())? } else { t };
    crate::tensor::device::to_device_of(&deep_copy(&t)?, like)
}
