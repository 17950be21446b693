//! Learning-rate scheduler states between fulmen's named numbers and
//! torch's `LRScheduler.state_dict()` (the scheduler's `__dict__`). Neither
//! form names the scheduler's class; each kind is told apart by the
//! entries only it has.
use super::value::{count, dict, entries, field, floats, items, number, string, text, whole};
use crate::checkpoint::torch_save::Value;
use crate::error::{Error, Result};
use std::collections::HashMap;

/// The largest list a scheduler state may hold (groups, milestones).
const MAX_LIST: i64 = 1 << 20;

/// A hyperparameter: fulmen's name, torch's, and whether torch keeps it as
/// an int.
type Hyper = (&'static str, &'static str, bool);

/// The closed-form kinds and their hyperparameters.
const CLOSED: &[(&str, &[Hyper])] = &[
    ("step_lr", &[("step_size", "step_size", true), ("gamma", "gamma", false)]),
    ("cosine_annealing_lr", &[("t_max", "T_max", true), ("eta_min", "eta_min", false)]),
    (
        "linear_lr",
        &[
            ("start_factor", "start_factor", false),
            ("end_factor", "end_factor", false),
            ("total_iters", "total_iters", true),
        ],
    ),
    ("polynomial_lr", &[("total_iters", "total_iters", true), ("power", "power", false)]),
    ("constant_lr", &[("factor", "factor", false), ("total_iters", "total_iters", true)]),
    ("exponential_lr", &[("gamma", "gamma", false)]),
];

/// fulmen's flat state, looked up by name.
struct Flat<'a> {
    map: HashMap<&'a str, f64>,
}

impl<'a> Flat<'a> {
    fn new(flat: &'a [(String, f64)]) -> Self {
        Flat { map: flat.iter().map(|(k, v)| (k.as_str(), *v)).collect() }
    }

    fn has(&self, k: &str) -> bool {
        self.map.contains_key(k)
    }

    fn get(&self, k: &str) -> Result<f64> {
        self.map.get(k).copied().ok_or_else(|| Error::format(format!("scheduler state lacks '{k}'")))
    }

    /// The list `name.0`, `name.1`, ... (as long as the entries go).
    fn list(&self, name: &str) -> Vec<f64> {
        (0..).map_while(|i| self.map.get(format!("{name}.{i}").as_str()).copied()).collect()
    }
}

/// The sub-states `schedulers.I.*` of a SequentialLR, in order.
fn parts(flat: &[(String, f64)]) -> Vec<Vec<(String, f64)>> {
    let mut out: Vec<Vec<(String, f64)>> = Vec::new();
    for (k, v) in flat {
        if let Some((i, key)) = k.strip_prefix("schedulers.").and_then(|r| r.split_once('.')) {
            if let Ok(i) = i.parse::<usize>() {
                if i < MAX_LIST as usize {
                    if out.len() <= i {
                        out.resize_with(i + 1, Vec::new);
                    }
                    out[i].push((key.to_string(), *v));
                }
            }
        }
    }
    out
}

/// The entries every closed-form torch scheduler has besides its
/// hyperparameters.
fn base_entries(f: &Flat) -> Result<Vec<(&'static str, Value)>> {
    let last_epoch = f.get("last_epoch")? as i64;
    Ok(vec![
        ("base_lrs", floats(&f.list("base_lrs"))),
        ("last_epoch", count(last_epoch)),
        ("_step_count", count(last_epoch + 1)),
        ("_is_initial", Value::Bool(false)),
        ("_get_lr_called_within_step", Value::Bool(false)),
        ("_last_lr", floats(&f.list("last_lr"))),
    ])
}

/// torch's state_dict of the scheduler whose fulmen state is `flat`.
pub fn to_torch(flat: &[(String, f64)]) -> Result<Value> {
    let f = Flat::new(flat);
    if f.has("mode_max") {
        return plateau_to_torch(&f);
    }
    if f.has("schedulers.0.last_epoch") {
        let schedulers = parts(flat).iter().map(|p| to_torch(p)).collect::<Result<Vec<_>>>()?;
        let milestones = f.list("milestones").into_iter().map(|m| Value::Int(m as i64)).collect();
        return Ok(dict(vec![
            ("_milestones", Value::List(milestones)),
            ("last_epoch", count(f.get("last_epoch")? as i64)),
            ("_last_lr", floats(&f.list("last_lr"))),
            ("_schedulers", Value::List(schedulers)),
        ]));
    }
    if f.has("milestones.len") {
        // MultiStepLR: torch keeps its milestones as a Counter.
        let mut counts: Vec<(Value, Value)> = Vec::new();
        for m in f.list("milestones") {
            let m = m as i64;
            match counts.iter_mut().find(|(k, _)| matches!(k, Value::Int(x) if *x == m)) {
                Some((_, Value::Int(n))) => *n += 1,
                _ => counts.push((Value::Int(m), Value::Int(1))),
            }
        }
        let mut out = vec![("milestones", Value::Dict(counts)), ("gamma", Value::Float(f.get("gamma")?))];
        out.extend(base_entries(&f)?);
        return Ok(dict(out));
    }
    for (_, hypers) in CLOSED {
        if hypers.iter().all(|(ours, _, _)| f.has(ours)) && flat.iter().all(|(k, _)| known_closed(k, hypers)) {
            let mut out: Vec<(&str, Value)> = hypers
                .iter()
                .map(|(ours, theirs, int)| {
                    let v = f.get(ours)?;
                    Ok((*theirs, if *int { Value::Int(v as i64) } else { Value::Float(v) }))
                })
                .collect::<Result<_>>()?;
            out.extend(base_entries(&f)?);
            return Ok(dict(out));
        }
    }
    Err(Error::unsupported(format!(
        "this scheduler's state cannot be written in Lightning's format yet (entries: {:?})",
        flat.iter().map(|(k, _)| k.as_str()).take(8).collect::<Vec<_>>()
    )))
}

fn known_closed(k: &str, hypers: &[Hyper]) -> bool {
    k == "last_epoch"
        || k.starts_with("base_lrs.")
        || k.starts_with("last_lr.")
        || hypers.iter().any(|(ours, _, _)| *ours == k)
}

fn plateau_to_torch(f: &Flat) -> Result<Value> {
    let last_lr = f.list("last_lr");
    let max = f.get("mode_max")? == 1.0;
    let min_lr = f.get("min_lr")?;
    Ok(dict(vec![
        ("factor", Value::Float(f.get("factor")?)),
        ("default_min_lr", Value::Float(min_lr)),
        ("min_lrs", floats(&vec![min_lr; last_lr.len()])),
        ("patience", count(f.get("patience")? as i64)),
        ("cooldown", count(f.get("cooldown")? as i64)),
        ("eps", Value::Float(f.get("eps")?)),
        ("last_epoch", count(f.get("last_epoch")? as i64)),
        ("_last_lr", floats(&last_lr)),
        ("mode_worse", Value::Float(if max { f64::NEG_INFINITY } else { f64::INFINITY })),
        ("mode", text(if max { "max" } else { "min" })),
        ("threshold", Value::Float(f.get("threshold")?)),
        ("threshold_mode", text(if f.get("threshold_abs")? == 1.0 { "abs" } else { "rel" })),
        ("best", Value::Float(f.get("best")?)),
        ("cooldown_counter", count(f.get("cooldown_counter")? as i64)),
        ("num_bad_epochs", count(f.get("num_bad_epochs")? as i64)),
    ]))
}

/// fulmen's flat state from torch's state_dict of a scheduler (`what`
/// names it in errors).
pub fn from_torch(v: &Value, what: &str) -> Result<Vec<(String, f64)>> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let num = |key: &str| -> Result<f64> { number(field(v, key, what)?, &format!("{what}.{key}")) };
    let list = |key: &str| -> Result<Vec<f64>> {
        let values = super::value::numbers(field(v, key, what)?, &format!("{what}.{key}"))?;
        if values.len() as i64 > MAX_LIST {
            return Err(Error::format(format!("{what}.{key} is too long")));
        }
        Ok(values)
    };
    let push_list = |out: &mut Vec<(String, f64)>, name: &str, values: &[f64]| {
        out.extend(values.iter().enumerate().map(|(i, x)| (format!("{name}.{i}"), *x)));
    };
    if v.get("mode_worse").is_some() || v.get("num_bad_epochs").is_some() {
        let min_lrs = list("min_lrs")?;
        let min_lr = min_lrs.first().copied().unwrap_or(0.0);
        if min_lrs.iter().any(|m| m.to_bits() != min_lr.to_bits()) {
            return Err(Error::unsupported(format!(
                "{what}: ReduceLROnPlateau with a different min_lr per group ({min_lrs:?}); fulmen keeps one"
            )));
        }
        let mode = string(field(v, "mode", what)?, &format!("{what}.mode"))?;
        let threshold_mode = string(field(v, "threshold_mode", what)?, &format!("{what}.threshold_mode"))?;
        let last_lr = list("_last_lr")?;
        for (k, x) in [
            ("last_epoch", num("last_epoch")?),
            ("best", num("best")?),
            ("num_bad_epochs", num("num_bad_epochs")?),
            ("cooldown_counter", num("cooldown_counter")?),
            ("mode_max", f64::from(u8::from(mode == "max"))),
            ("factor", num("factor")?),
            ("patience", num("patience")?),
            ("threshold", num("threshold")?),
            ("threshold_abs", f64::from(u8::from(threshold_mode == "abs"))),
            ("cooldown", num("cooldown")?),
            ("min_lr", min_lr),
            ("eps", num("eps")?),
            ("last_lr.len", last_lr.len() as f64),
        ] {
            out.push((k.to_string(), x));
        }
        push_list(&mut out, "last_lr", &last_lr);
        return Ok(out);
    }
    if let Some(parts) = v.get("_schedulers") {
        if v.get("_milestones").is_none() {
            return Err(Error::unsupported(format!("{what}: ChainedScheduler is not supported")));
        }
        let milestones = list("_milestones")?;
        out.push(("last_epoch".into(), num("last_epoch")?));
        out.push(("milestones.len".into(), milestones.len() as f64));
        push_list(&mut out, "milestones", &milestones);
        push_list(&mut out, "last_lr", &list("_last_lr")?);
        for (i, p) in items(parts, &format!("{what}._schedulers"))?.iter().enumerate() {
            let sub = from_torch(p, &format!("{what}._schedulers[{i}]"))?;
            out.extend(sub.into_iter().map(|(k, x)| (format!("schedulers.{i}.{k}"), x)));
        }
        return Ok(out);
    }
    out.push(("last_epoch".into(), num("last_epoch")?));
    push_list(&mut out, "base_lrs", &list("base_lrs")?);
    push_list(&mut out, "last_lr", &list("_last_lr")?);
    if let Some(m) = v.get("milestones") {
        let mut milestones = Vec::new();
        for (k, n) in entries(m, &format!("{what}.milestones"))? {
            let k = whole(k, &format!("{what}.milestones key"), super::super::file::MAX_COUNTER)?;
            let n = whole(n, &format!("{what}.milestones[{k}]"), MAX_LIST)?;
            if milestones.len() as i64 + n > MAX_LIST {
                return Err(Error::format(format!("{what}.milestones is too long")));
            }
            milestones.extend(std::iter::repeat_n(k as f64, n as usize));
        }
        milestones.sort_by(f64::total_cmp);
        out.push(("gamma".into(), num("gamma")?));
        out.push(("milestones.len".into(), milestones.len() as f64));
        push_list(&mut out, "milestones", &milestones);
        return Ok(out);
    }
    let ignored =
        ["base_lrs", "last_epoch", "_step_count", "_is_initial", "_get_lr_called_within_step", "_last_lr", "verbose"];
    let theirs: Vec<&str> = entries(v, what)?
        .iter()
        .filter_map(|(k, _)| match k {
            Value::Str(s) if !ignored.contains(&s.as_str()) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    for (_, hypers) in CLOSED {
        if hypers.len() == theirs.len() && hypers.iter().all(|(_, t, _)| theirs.contains(t)) {
            for (ours, t, _) in hypers.iter() {
                out.push((ours.to_string(), num(t)?));
            }
            return Ok(out);
        }
    }
    Err(Error::unsupported(format!(
        "{what}: a scheduler with entries {theirs:?} cannot be read from a Lightning checkpoint yet (supported: \
         StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR, ConstantLR, PolynomialLR, SequentialLR, \
         ReduceLROnPlateau)"
    )))
}
