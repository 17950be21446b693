//! Learning-rate scheduler states between fulmen's named numbers and
//! torch's `LRScheduler.state_dict()` (the scheduler's `__dict__`). Neither
//! form names the scheduler's class; each kind is told apart by the
//! entries only it has.
use super::value::{count, dict, entries, field, floats, items, number, number_or, numbers, string, text, whole};
use crate::checkpoint::numbers::{check_len, finite, Infinity};
use crate::checkpoint::torch_save::Value;
use crate::error::{Error, Result};
use std::collections::HashMap;

/// The largest list a scheduler state may hold (milestones).
const MAX_LIST: i64 = 1 << 20;

/// The most schedulers a SequentialLR or ChainedScheduler may hold.
const MAX_PARTS: usize = 1 << 12;

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

/// Whether a state is a SequentialLR's or a ChainedScheduler's (it holds
/// its parts' states).
fn is_composite(flat: &[(String, f64)]) -> bool {
    flat.iter().any(|(k, _)| k.starts_with("schedulers."))
}

/// The sub-states `schedulers.I.*` of a SequentialLR or ChainedScheduler,
/// in order.
fn parts(flat: &[(String, f64)]) -> Vec<Vec<(String, f64)>> {
    let mut out: Vec<Vec<(String, f64)>> = Vec::new();
    for (k, v) in flat {
        if let Some((i, key)) = k.strip_prefix("schedulers.").and_then(|r| r.split_once('.')) {
            if let Ok(i) = i.parse::<usize>() {
                if i < MAX_PARTS {
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

/// torch's state_dict of the scheduler whose fulmen state is `flat`;
/// `betas`: whether its optimizer keeps its momentum in `betas` (Adam's
/// kind), which CyclicLR records.
pub fn to_torch(flat: &[(String, f64)], betas: bool) -> Result<Value> {
    let f = Flat::new(flat);
    if f.has("mode_max") {
        return plateau_to_torch(&f);
    }
    if f.has("step_size_up") {
        return cyclic_to_torch(&f, betas);
    }
    if f.has("final_div_factor") {
        return one_cycle_to_torch(&f, betas);
    }
    if f.has("t_0") {
        return warm_restarts_to_torch(&f);
    }
    if f.has("anneal_cos") {
        return swa_to_torch(&f);
    }
    if flat.iter().all(|(k, _)| known_closed(k, &[])) {
        // LambdaLR and MultiplicativeLR: torch keeps no function either.
        let groups = f.list("base_lrs").len();
        let mut out = base_entries(&f)?;
        out.push(("lr_lambdas", Value::List((0..groups).map(|_| Value::None).collect())));
        return Ok(dict(out));
    }
    if f.has("chain.len") {
        // ChainedScheduler: its __dict__ is `_last_lr` (and the parts).
        let schedulers = parts(flat).iter().map(|p| to_torch(p, betas)).collect::<Result<Vec<_>>>()?;
        return Ok(dict(vec![("_last_lr", floats(&f.list("last_lr"))), ("_schedulers", Value::List(schedulers))]));
    }
    if f.has("schedulers.0.last_epoch") {
        let schedulers = parts(flat).iter().map(|p| to_torch(p, betas)).collect::<Result<Vec<_>>>()?;
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

/// SWALR's `__dict__` but its `anneal_func` (its SWA lrs are the groups'
/// `swa_lr`, [`group_entries`]).
fn swa_to_torch(f: &Flat) -> Result<Value> {
    let strategy = if f.get("anneal_cos")? == 1.0 { "cos" } else { "linear" };
    Ok(dict(vec![
        ("_anneal_strategy", text(strategy)),
        ("anneal_epochs", count(f.get("anneal_epochs")? as i64)),
        ("base_lrs", floats(&f.list("base_lrs"))),
        ("last_epoch", count(f.get("last_epoch")? as i64)),
        ("_step_count", count(f.get("step_count")? as i64)),
        ("_is_initial", Value::Bool(false)),
        ("_get_lr_called_within_step", Value::Bool(false)),
        ("_last_lr", floats(&f.list("last_lr"))),
    ]))
}

fn known_closed(k: &str, hypers: &[Hyper]) -> bool {
    k == "last_epoch"
        || k.starts_with("base_lrs.")
        || k.starts_with("last_lr.")
        || hypers.iter().any(|(ours, _, _)| *ours == k)
}

/// torch's `(T_cur, T_i)` of CosineAnnealingWarmRestarts after `epoch`
/// steps.
fn restart_period(t_0: i64, t_mult: i64, epoch: i64) -> (i64, i64) {
    let (mut t_cur, mut t_i) = (epoch.max(0), t_0.max(1));
    if t_mult <= 1 {
        return (t_cur % t_i, t_i);
    }
    while t_cur >= t_i {
        t_cur -= t_i;
        match t_i.checked_mul(t_mult) {
            Some(next) => t_i = next,
            None => break,
        }
    }
    (t_cur, t_i)
}

fn warm_restarts_to_torch(f: &Flat) -> Result<Value> {
    let (t_0, t_mult) = (f.get("t_0")? as i64, f.get("t_mult")? as i64);
    let (t_cur, t_i) = restart_period(t_0, t_mult, f.get("last_epoch")? as i64);
    let mut out = vec![
        ("T_0", count(t_0)),
        ("T_i", count(t_i)),
        ("T_mult", count(t_mult)),
        ("eta_min", Value::Float(f.get("eta_min")?)),
        ("T_cur", count(t_cur)),
    ];
    out.extend(base_entries(f)?);
    // Its own `step` never counts steps.
    for (k, v) in out.iter_mut() {
        if *k == "_step_count" {
            *v = count(0);
        }
    }
    Ok(dict(out))
}

/// The entries torch's scheduler of this fulmen state adds to its
/// optimizer's param groups (CyclicLR's momentum range, OneCycleLR's
/// ranges): each with one value per group, or one value for every group.
pub fn group_entries(flat: &[(String, f64)]) -> Vec<(&'static str, Vec<f64>)> {
    let f = Flat::new(flat);
    if is_composite(flat) {
        // A SequentialLR or ChainedScheduler: each part wrote its entries;
        // a later one's win.
        let mut out: Vec<(&'static str, Vec<f64>)> = Vec::new();
        for part in parts(flat) {
            for (k, v) in group_entries(&part) {
                match out.iter_mut().find(|(name, _)| *name == k) {
                    Some(entry) => entry.1 = v,
                    None => out.push((k, v)),
                }
            }
        }
        return out;
    }
    if f.has("anneal_cos") {
        return vec![("swa_lr", f.list("swa_lrs"))];
    }
    if let (Ok(max_lr), Ok(min_lr), Ok(cycle)) = (f.get("max_lr"), f.get("min_lr"), f.get("cycle_momentum")) {
        if f.has("final_div_factor") {
            // Per-group ranges, or (older states) one for all.
            let per_group = |key: &str, one: f64| listed_or(&f, key, one);
            let mut out = vec![("max_lr", per_group("max_lrs", max_lr)), ("min_lr", per_group("min_lrs", min_lr))];
            if cycle == 1.0 {
                out.push(("max_momentum", per_group("max_momentums", f.get("max_momentum").unwrap_or(0.95))));
                out.push(("base_momentum", per_group("base_momentums", f.get("base_momentum").unwrap_or(0.85))));
            }
            return out;
        }
    }
    match (f.get("step_size_up"), f.get("cycle_momentum"), f.get("base_momentum"), f.get("max_momentum")) {
        (Ok(_), Ok(1.0), Ok(base), Ok(max)) => vec![
            ("base_momentum", listed_or(&f, "base_momentums", base)),
            ("max_momentum", listed_or(&f, "max_momentums", max)),
        ],
        _ => Vec::new(),
    }
}

/// The per-group list `key` of a state, or `[one]` (for every group) when
/// the state has none (states written before fulmen kept them per group).
fn listed_or(f: &Flat, key: &str, one: f64) -> Vec<f64> {
    let values = f.list(key);
    if values.is_empty() {
        vec![one]
    } else {
        values
    }
}

/// Param-group entries that belong to a scheduler (CyclicLR's and
/// OneCycleLR's ranges), which an optimizer's state leaves out when read.
pub const GROUP_ENTRIES: &[&str] = &["base_momentum", "max_momentum", "max_lr", "min_lr", "swa_lr"];

/// OneCycleLR's phases as torch names them: the group entries each
/// interpolates between (start lr, end lr, start momentum, end momentum).
const ONE_CYCLE_PHASES: [&[(&str, &str, &str, &str)]; 2] = [
    &[("initial_lr", "max_lr", "max_momentum", "base_momentum"), ("max_lr", "min_lr", "base_momentum", "max_momentum")],
    &[
        ("initial_lr", "max_lr", "max_momentum", "base_momentum"),
        ("max_lr", "initial_lr", "base_momentum", "max_momentum"),
        ("initial_lr", "min_lr", "max_momentum", "max_momentum"),
    ],
];

fn one_cycle_to_torch(f: &Flat, betas: bool) -> Result<Value> {
    let names = ONE_CYCLE_PHASES[usize::from(f.get("three_phase")? == 1.0)];
    let ends = f.list("phase_end");
    if ends.len() != names.len() {
        return Err(Error::format(format!("one_cycle_lr state: {} phase ends for {} phases", ends.len(), names.len())));
    }
    let total = f.get("total_steps")? as i64;
    let phases = names
        .iter()
        .zip(&ends)
        .enumerate()
        .map(|(i, ((start_lr, end_lr, start_m, end_m), end))| {
            // torch keeps the last end as an int (`total_steps - 1`).
            let end = if i + 1 == names.len() { count(total - 1) } else { Value::Float(*end) };
            dict(vec![
                ("end_step", end),
                ("start_lr", text(start_lr)),
                ("end_lr", text(end_lr)),
                ("start_momentum", text(start_m)),
                ("end_momentum", text(end_m)),
            ])
        })
        .collect();
    let cycle = f.get("cycle_momentum")? == 1.0;
    let mut out = vec![
        ("total_steps", count(total)),
        ("_schedule_phases", Value::List(phases)),
        ("_anneal_func_type", text(if f.get("anneal_linear")? == 1.0 { "linear" } else { "cos" })),
        ("cycle_momentum", Value::Bool(cycle)),
    ];
    if cycle {
        out.push(("use_beta1", Value::Bool(betas)));
    }
    out.extend(base_entries(f)?);
    Ok(dict(out))
}

/// fulmen's OneCycleLR state from torch's, but for the ranges torch keeps
/// in the optimizer's param groups ([`complete_from_groups`] adds them);
/// `groups`: the most param groups its optimizer may have.
fn one_cycle_from_torch(v: &Value, what: &str, groups: usize) -> Result<Vec<(String, f64)>> {
    let num = |key: &str| -> Result<f64> { number(field(v, key, what)?, &format!("{what}.{key}")) };
    let list = |key: &str| -> Result<Vec<f64>> { numbers(field(v, key, what)?, &format!("{what}.{key}"), groups) };
    let phases = items(field(v, "_schedule_phases", what)?, &format!("{what}._schedule_phases"))?;
    let Some(names) = ONE_CYCLE_PHASES.iter().find(|n| n.len() == phases.len()) else {
        return Err(Error::format(format!("{what}: OneCycleLR with {} phases", phases.len())));
    };
    let mut ends = Vec::with_capacity(phases.len());
    for (i, (p, (start_lr, end_lr, _, _))) in phases.iter().zip(names.iter()).enumerate() {
        let pwhat = format!("{what}._schedule_phases[{i}]");
        let (s, e) = (string(field(p, "start_lr", &pwhat)?, &pwhat)?, string(field(p, "end_lr", &pwhat)?, &pwhat)?);
        if (s, e) != (*start_lr, *end_lr) {
            return Err(Error::unsupported(format!("{pwhat}: a phase from {s} to {e} (torch's own phases only)")));
        }
        ends.push(number(field(p, "end_step", &pwhat)?, &format!("{pwhat}.end_step"))?);
    }
    let anneal = string(field(v, "_anneal_func_type", what)?, &format!("{what}._anneal_func_type"))?;
    if anneal != "cos" && anneal != "linear" {
        return Err(Error::unsupported(format!("{what}: OneCycleLR anneal strategy {anneal:?}")));
    }
    let total = num("total_steps")?;
    let base_lrs = list("base_lrs")?;
    let last_lr = list("_last_lr")?;
    if last_lr.len() != base_lrs.len() {
        return Err(Error::format(format!("{what}: base_lrs and _last_lr do not list the same groups")));
    }
    let cycle = matches!(v.get("cycle_momentum"), Some(Value::Bool(true)));
    let mut out = vec![("last_epoch".to_string(), num("last_epoch")?)];
    out.extend(base_lrs.iter().enumerate().map(|(i, x)| (format!("base_lrs.{i}"), *x)));
    out.extend(last_lr.iter().enumerate().map(|(i, x)| (format!("last_lr.{i}"), *x)));
    for (k, x) in [
        ("total_steps", total),
        ("pct_start", finite((ends[0] + 1.0) / total, &format!("{what}: the first phase's share of total_steps"))?),
        ("anneal_linear", f64::from(u8::from(anneal == "linear"))),
        ("cycle_momentum", f64::from(u8::from(cycle))),
        ("three_phase", f64::from(u8::from(ends.len() == 3))),
    ] {
        out.push((k.to_string(), x));
    }
    out.extend(ends.iter().enumerate().map(|(i, e)| (format!("phase_end.{i}"), *e)));
    Ok(out)
}

/// Completes a scheduler state read from a Lightning checkpoint with what
/// torch keeps in its optimizer's param groups (`groups`: each entry's
/// per-group values): OneCycleLR's `max_lr`, `min_lr` and momentum range.
/// Other states are left as they are.
pub fn complete_from_groups(state: &mut Vec<(String, f64)>, groups: &[(String, Vec<f64>)], what: &str) -> Result<()> {
    if is_composite(state) {
        // A SequentialLR or ChainedScheduler: its parts, completed one by one.
        let mut completed: Vec<(String, f64)> =
            state.iter().filter(|(k, _)| !k.starts_with("schedulers.")).cloned().collect();
        for (i, mut part) in parts(state).into_iter().enumerate() {
            complete_from_groups(&mut part, groups, &format!("{what}._schedulers[{i}]"))?;
            completed.extend(part.into_iter().map(|(k, v)| (format!("schedulers.{i}.{k}"), v)));
        }
        *state = completed;
        return Ok(());
    }
    let added = {
        let f = Flat::new(state);
        if f.has("anneal_cos") && !f.has("swa_lrs.0") {
            // SWALR: each group's `swa_lr`.
            let n = f.list("base_lrs").len();
            let swa = match groups.iter().find(|(k, _)| k == "swa_lr") {
                Some((_, values)) if values.len() == n => values.clone(),
                _ => return Err(Error::format(format!("{what}: SWALR's {n} param groups lack their `swa_lr`"))),
            };
            drop(f);
            state.extend(swa.iter().enumerate().map(|(i, x)| (format!("swa_lrs.{i}"), *x)));
            return Ok(());
        }
        if !f.has("phase_end.0") || f.has("max_lr") {
            return Ok(());
        }
        let base_lrs = f.list("base_lrs");
        let entry = |name: &str| -> Result<Vec<f64>> {
            match groups.iter().find(|(k, _)| k == name) {
                Some((_, values)) if values.len() == base_lrs.len() => Ok(values.clone()),
                Some((_, values)) => Err(Error::format(format!(
                    "{what}: the param groups hold {} values of `{name}` for {} groups",
                    values.len(),
                    base_lrs.len()
                ))),
                None => {
                    Err(Error::format(format!("{what}: OneCycleLR's optimizer has no `{name}` in its param groups")))
                }
            }
        };
        let (max_lrs, min_lrs) = (entry("max_lr")?, entry("min_lr")?);
        let (max_momentums, base_momentums) = if f.get("cycle_momentum")? == 1.0 {
            (entry("max_momentum")?, entry("base_momentum")?)
        } else {
            (vec![0.95; base_lrs.len()], vec![0.85; base_lrs.len()])
        };
        let (Some(&initial_lr), Some(&max_lr), Some(&min_lr)) = (base_lrs.first(), max_lrs.first(), min_lrs.first())
        else {
            return Err(Error::format(format!("{what}: OneCycleLR over no param group")));
        };
        // The options as group 0 resolves them (each group's own range is
        // kept below; the options serve only new groups and checks).
        let mut added: Vec<(String, f64)> = [
            ("max_lr", max_lr),
            ("min_lr", min_lr),
            ("div_factor", max_lr / initial_lr),
            ("final_div_factor", initial_lr / min_lr),
            ("max_momentum", max_momentums[0]),
            ("base_momentum", base_momentums[0]),
            ("ranges.len", base_lrs.len() as f64),
        ]
        .iter()
        .map(|(k, x)| (k.to_string(), *x))
        .collect();
        for (key, values) in [
            ("max_lrs", &max_lrs),
            ("min_lrs", &min_lrs),
            ("max_momentums", &max_momentums),
            ("base_momentums", &base_momentums),
        ] {
            added.extend(values.iter().enumerate().map(|(i, x)| (format!("{key}.{i}"), *x)));
        }
        added
    };
    state.extend(added);
    Ok(())
}

/// CyclicLR's modes, in fulmen's numbering.
const CYCLIC_MODES: [&str; 3] = ["triangular", "triangular2", "exp_range"];

fn cyclic_to_torch(f: &Flat, betas: bool) -> Result<Value> {
    let groups = f.list("base_lrs").len();
    let (up, down) = (f.get("step_size_up")?, f.get("step_size_down")?);
    let mode = CYCLIC_MODES
        .get(f.get("mode")? as usize)
        .ok_or_else(|| Error::format(format!("cyclic_lr state: mode {}", f.get("mode").unwrap_or_default())))?;
    // Each group's range, or (older states) one for all.
    let per_group = |key: &str, one: f64| {
        let values = f.list(key);
        if values.len() == groups {
            values
        } else {
            vec![one; groups]
        }
    };
    let mut out = vec![
        ("max_lrs", floats(&per_group("max_lrs", f.get("max_lr")?))),
        ("total_size", Value::Float(up + down)),
        ("step_ratio", Value::Float(up / (up + down))),
        ("mode", text(mode)),
        ("gamma", Value::Float(f.get("gamma")?)),
        ("scale_mode", text(if *mode == "exp_range" { "iterations" } else { "cycle" })),
        ("cycle_momentum", Value::Bool(f.get("cycle_momentum")? == 1.0)),
    ];
    if f.get("cycle_momentum")? == 1.0 {
        out.push(("use_beta1", Value::Bool(betas)));
        out.push(("base_momentums", floats(&per_group("base_momentums", f.get("base_momentum")?))));
        out.push(("max_momentums", floats(&per_group("max_momentums", f.get("max_momentum")?))));
    }
    out.extend(base_entries(f)?);
    out.push(("_scale_fn_custom", Value::None));
    Ok(dict(out))
}

fn plateau_to_torch(f: &Flat) -> Result<Value> {
    let last_lr = f.list("last_lr");
    let max = f.get("mode_max")? == 1.0;
    let min_lr = f.get("min_lr")?;
    // One bound per group; states written before fulmen kept them per group
    // hold one for all.
    let mut min_lrs = f.list("min_lrs");
    if min_lrs.is_empty() {
        min_lrs = vec![min_lr; last_lr.len()];
    }
    // torch's `default_min_lr` is None when min_lr was given as a list.
    let per_group = f.get("min_lr_per_group").is_ok_and(|v| v == 1.0);
    Ok(dict(vec![
        ("factor", Value::Float(f.get("factor")?)),
        ("default_min_lr", if per_group { Value::None } else { Value::Float(min_lr) }),
        ("min_lrs", floats(&min_lrs)),
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
/// names it in errors). `groups` is the most param groups its optimizer
/// may have: a per-group list (`base_lrs`, `_last_lr`, `min_lrs`, ...)
/// longer than that is refused before any entry is read. Every number
/// must be finite but ReduceLROnPlateau's `best` and `mode_worse`, which
/// may be infinite (torch starts them at the mode's worst), never NaN.
pub fn from_torch(v: &Value, what: &str, groups: usize) -> Result<Vec<(String, f64)>> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let num = |key: &str| -> Result<f64> { number(field(v, key, what)?, &format!("{what}.{key}")) };
    let list = |key: &str| -> Result<Vec<f64>> { numbers(field(v, key, what)?, &format!("{what}.{key}"), groups) };
    let push_list = |out: &mut Vec<(String, f64)>, name: &str, values: &[f64]| {
        out.extend(values.iter().enumerate().map(|(i, x)| (format!("{name}.{i}"), *x)));
    };
    if v.get("mode_worse").is_some() || v.get("num_bad_epochs").is_some() {
        let min_lrs = list("min_lrs")?;
        // torch keeps `default_min_lr` (None when min_lr was a list) and
        // one bound per group.
        let (min_lr, per_group) = match v.get("default_min_lr") {
            Some(Value::None) | None => (min_lrs.first().copied().unwrap_or(0.0), 1.0),
            Some(d) => (number(d, &format!("{what}.default_min_lr"))?, 0.0),
        };
        let mode = string(field(v, "mode", what)?, &format!("{what}.mode"))?;
        let threshold_mode = string(field(v, "threshold_mode", what)?, &format!("{what}.threshold_mode"))?;
        let last_lr = list("_last_lr")?;
        let best = plateau_best(v, mode == "max", what)?;
        for (k, x) in [
            ("last_epoch", num("last_epoch")?),
            ("best", best),
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
            ("min_lrs.len", min_lrs.len() as f64),
            ("min_lr_per_group", per_group),
        ] {
            out.push((k.to_string(), x));
        }
        push_list(&mut out, "last_lr", &last_lr);
        push_list(&mut out, "min_lrs", &min_lrs);
        return Ok(out);
    }
    if v.get("total_size").is_some() && v.get("step_ratio").is_some() {
        return cyclic_from_torch(v, what, groups);
    }
    if v.get("_schedule_phases").is_some() {
        return one_cycle_from_torch(v, what, groups);
    }
    if let Some(strategy) = v.get("_anneal_strategy") {
        // SWALR; its SWA lrs come from the groups (complete_from_groups).
        let strategy = string(strategy, &format!("{what}._anneal_strategy"))?;
        if strategy != "cos" && strategy != "linear" {
            return Err(Error::format(format!("{what}._anneal_strategy {strategy:?} is not cos or linear")));
        }
        out.push(("last_epoch".into(), num("last_epoch")?));
        push_list(&mut out, "base_lrs", &list("base_lrs")?);
        push_list(&mut out, "last_lr", &list("_last_lr")?);
        out.push(("step_count".into(), num("_step_count")?));
        out.push(("anneal_epochs".into(), num("anneal_epochs")?));
        out.push(("anneal_cos".into(), f64::from(u8::from(strategy == "cos"))));
        return Ok(out);
    }
    if v.get("T_0").is_some() {
        out.push(("last_epoch".into(), num("last_epoch")?));
        push_list(&mut out, "base_lrs", &list("base_lrs")?);
        push_list(&mut out, "last_lr", &list("_last_lr")?);
        out.push(("t_0".into(), num("T_0")?));
        out.push(("t_mult".into(), num("T_mult")?));
        out.push(("eta_min".into(), num("eta_min")?));
        return Ok(out);
    }
    if let Some(lambdas) = v.get("lr_lambdas") {
        // A function torch could save (a callable object) is state fulmen
        // cannot take: the host's callback computes the factor.
        let lambdas = items(lambdas, &format!("{what}.lr_lambdas"))?;
        check_len(lambdas.len(), groups, &format!("{what}.lr_lambdas"))?;
        if lambdas.iter().any(|l| !matches!(l, Value::None)) {
            return Err(Error::unsupported(format!(
                "{what}: a LambdaLR / MultiplicativeLR whose lr_lambda kept state (a callable object)"
            )));
        }
        out.push(("last_epoch".into(), num("last_epoch")?));
        push_list(&mut out, "base_lrs", &list("base_lrs")?);
        push_list(&mut out, "last_lr", &list("_last_lr")?);
        return Ok(out);
    }
    if let Some(parts) = v.get("_schedulers") {
        let parts = items(parts, &format!("{what}._schedulers"))?;
        check_len(parts.len(), MAX_PARTS, &format!("{what}._schedulers"))?;
        if v.get("_milestones").is_none() {
            // ChainedScheduler.
            if parts.is_empty() {
                return Err(Error::format(format!("{what}: a ChainedScheduler of no scheduler")));
            }
            out.push(("chain.len".into(), parts.len() as f64));
            push_list(&mut out, "last_lr", &list("_last_lr")?);
            for (i, p) in parts.iter().enumerate() {
                let sub = from_torch(p, &format!("{what}._schedulers[{i}]"), groups)?;
                out.extend(sub.into_iter().map(|(k, x)| (format!("schedulers.{i}.{k}"), x)));
            }
            return Ok(out);
        }
        // One milestone between each two of its schedulers.
        let milestones =
            numbers(field(v, "_milestones", what)?, &format!("{what}._milestones"), parts.len().saturating_sub(1))?;
        out.push(("last_epoch".into(), num("last_epoch")?));
        out.push(("milestones.len".into(), milestones.len() as f64));
        push_list(&mut out, "milestones", &milestones);
        push_list(&mut out, "last_lr", &list("_last_lr")?);
        for (i, p) in parts.iter().enumerate() {
            let sub = from_torch(p, &format!("{what}._schedulers[{i}]"), groups)?;
            out.extend(sub.into_iter().map(|(k, x)| (format!("schedulers.{i}.{k}"), x)));
        }
        return Ok(out);
    }
    out.push(("last_epoch".into(), num("last_epoch")?));
    push_list(&mut out, "base_lrs", &list("base_lrs")?);
    push_list(&mut out, "last_lr", &list("_last_lr")?);
    if let Some(m) = v.get("milestones") {
        let mut milestones = Vec::new();
        let counted = entries(m, &format!("{what}.milestones"))?;
        check_len(counted.len(), MAX_LIST as usize, &format!("{what}.milestones"))?;
        for (k, n) in counted {
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
         StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR, ConstantLR, PolynomialLR, \
         CosineAnnealingWarmRestarts, CyclicLR, LambdaLR, MultiplicativeLR, SequentialLR, ChainedScheduler, \
         ReduceLROnPlateau)"
    )))
}

/// ReduceLROnPlateau's `best`: a number, infinite where torch starts it
/// (its mode's worst) or after an infinite metric, never NaN; its
/// `mode_worse`, when present, must be its mode's worst (`max`: -inf).
fn plateau_best(v: &Value, max: bool, what: &str) -> Result<f64> {
    if let Some(w) = v.get("mode_worse") {
        let worst = if max { f64::NEG_INFINITY } else { f64::INFINITY };
        let w = number_or(w, Infinity::Allowed, &format!("{what}.mode_worse"))?;
        if w != worst {
            return Err(Error::format(format!("{what}.mode_worse is {w}, where its mode keeps {worst}")));
        }
    }
    number_or(field(v, "best", what)?, Infinity::Allowed, &format!("{what}.best"))
}

/// fulmen's CyclicLR state from torch's (`groups`: the most param groups
/// its optimizer may have).
fn cyclic_from_torch(v: &Value, what: &str, groups: usize) -> Result<Vec<(String, f64)>> {
    let num = |key: &str| -> Result<f64> { number(field(v, key, what)?, &format!("{what}.{key}")) };
    let list =
        |key: &str, max: usize| -> Result<Vec<f64>> { numbers(field(v, key, what)?, &format!("{what}.{key}"), max) };
    let mode = string(field(v, "mode", what)?, &format!("{what}.mode"))?;
    let mode = CYCLIC_MODES
        .iter()
        .position(|m| *m == mode)
        .ok_or_else(|| Error::unsupported(format!("{what}: CyclicLR mode {mode:?} (a custom scale_fn)")))?;
    let (total, ratio) = (num("total_size")?, num("step_ratio")?);
    let up = finite((total * ratio).round(), &format!("{what}: total_size * step_ratio"))?;
    let cycle_momentum = matches!(v.get("cycle_momentum"), Some(Value::Bool(true)));
    let base_lrs = list("base_lrs", groups)?;
    let last_lr = list("_last_lr", groups)?;
    if last_lr.len() != base_lrs.len() {
        return Err(Error::format(format!("{what}: base_lrs and _last_lr do not list the same groups")));
    }
    let mut out = vec![("last_epoch".to_string(), num("last_epoch")?)];
    out.extend(base_lrs.iter().enumerate().map(|(i, x)| (format!("base_lrs.{i}"), *x)));
    out.extend(last_lr.iter().enumerate().map(|(i, x)| (format!("last_lr.{i}"), *x)));
    // Each group's range (torch keeps lists); the options as group 0 has them.
    let per_group = |key: &str, default: f64| -> Result<Vec<f64>> {
        let values =
            if cycle_momentum || key == "max_lrs" { list(key, base_lrs.len())? } else { vec![default; base_lrs.len()] };
        if values.len() != base_lrs.len() {
            return Err(Error::format(format!("{what}.{key} does not list the {} groups", base_lrs.len())));
        }
        Ok(values)
    };
    let (max_lrs, base_momentums, max_momentums) =
        (per_group("max_lrs", 0.0)?, per_group("base_momentums", 0.8)?, per_group("max_momentums", 0.9)?);
    let first = |v: &[f64]| v.first().copied().ok_or_else(|| Error::format(format!("{what}: no param group")));
    for (k, values) in [("max_lrs", &max_lrs), ("base_momentums", &base_momentums), ("max_momentums", &max_momentums)] {
        out.extend(values.iter().enumerate().map(|(i, x)| (format!("{k}.{i}"), *x)));
    }
    out.push(("ranges.len".to_string(), base_lrs.len() as f64));
    for (k, x) in [
        ("base_lr", first(&base_lrs)?),
        ("max_lr", first(&max_lrs)?),
        ("step_size_up", up),
        ("step_size_down", total - up),
        ("mode", mode as f64),
        ("gamma", num("gamma")?),
        ("cycle_momentum", f64::from(u8::from(cycle_momentum))),
        ("base_momentum", first(&base_momentums)?),
        ("max_momentum", first(&max_momentums)?),
    ] {
        out.push((k.to_string(), x));
    }
    Ok(out)
}
