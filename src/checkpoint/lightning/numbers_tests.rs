//! Every number a Lightning checkpoint holds is finite, but best scores,
//! which may be infinite (torch starts them at their mode's worst): each
//! float of a written checkpoint set in turn to NaN, inf and -inf is
//! refused with a `Format` error naming it (or, for a best score, read as
//! that infinity); lists are measured before they are read.
use super::tests::{flat_numbers, numbers_of, sample, scalar, through_bytes, writable_states};
use super::*;
use crate::checkpoint::LoopInfo;
use crate::error::ErrorCode;
use std::collections::BTreeMap;
use tch::Kind;

/// A float of a value tree: where it is (entry and item indices), its
/// printed path, and the last dict key on the way (what an error names).
pub(crate) struct Leaf {
    /// Indices of the dict entries and list items down to it.
    pub path: Vec<usize>,
    /// Its path as `a.b[0].c`.
    pub name: String,
    /// The last dict key on the way.
    pub key: String,
}

fn key_text(k: &Value) -> String {
    match k {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// The floats of `v`: its float values and one-number floating tensors
/// (torch's steps and scores).
pub(crate) fn float_leaves(v: &Value) -> Vec<Leaf> {
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), "", "", &mut out);
    out
}

fn walk(v: &Value, path: &mut Vec<usize>, name: &str, key: &str, out: &mut Vec<Leaf>) {
    let floating = |t: &Tensor| matches!(t.kind(), Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16);
    match v {
        Value::Float(_) => {
            out.push(Leaf { path: path.clone(), name: name.trim_start_matches('.').to_string(), key: key.into() })
        }
        Value::Tensor(t) if t.numel() == 1 && floating(t) => {
            out.push(Leaf { path: path.clone(), name: name.trim_start_matches('.').to_string(), key: key.into() })
        }
        Value::Dict(entries) => {
            for (i, (k, x)) in entries.iter().enumerate() {
                let k = key_text(k);
                path.push(i);
                walk(x, path, &format!("{name}.{k}"), &k, out);
                path.pop();
            }
        }
        Value::List(items) | Value::Tuple(items) => {
            for (i, x) in items.iter().enumerate() {
                path.push(i);
                walk(x, path, &format!("{name}[{i}]"), key, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// A copy of `v` with the node at `path` replaced by `new(node)`.
fn replace_at(v: &Value, path: &[usize], new: &dyn Fn(&Value) -> Value) -> Value {
    let Some((&at, rest)) = path.split_first() else { return new(v) };
    let item = |i: usize, x: &Value| if i == at { replace_at(x, rest, new) } else { value::copy_value(x) };
    match v {
        Value::Dict(e) => {
            Value::Dict(e.iter().enumerate().map(|(i, (k, x))| (value::copy_value(k), item(i, x))).collect())
        }
        Value::List(items) => Value::List(items.iter().enumerate().map(|(i, x)| item(i, x)).collect()),
        Value::Tuple(items) => Value::Tuple(items.iter().enumerate().map(|(i, x)| item(i, x)).collect()),
        _ => panic!("no node at {path:?}"),
    }
}

/// `v` with the float at `path` set to `x` (a tensor keeps its dtype and
/// shape).
pub(crate) fn with_leaf(v: &Value, path: &[usize], x: f64) -> Value {
    replace_at(v, path, &|leaf| match leaf {
        Value::Tensor(t) => Value::Tensor(Tensor::from_slice(&[x]).to_kind(t.kind()).reshape(t.size())),
        _ => Value::Float(x),
    })
}

/// The indices down to the node named by `keys` (dict keys, or list
/// indices written as numbers).
fn path_of(v: &Value, keys: &[&str]) -> Vec<usize> {
    let mut path = Vec::new();
    let mut node = v;
    for k in keys {
        let (i, next) = match node {
            Value::Dict(e) => {
                e.iter().enumerate().find(|(_, (name, _))| key_text(name) == *k).map(|(i, (_, x))| (i, x))
            }
            Value::List(items) | Value::Tuple(items) => k.parse::<usize>().ok().and_then(|i| Some((i, items.get(i)?))),
            _ => None,
        }
        .unwrap_or_else(|| panic!("no {k} in {keys:?}"));
        path.push(i);
        node = next;
    }
    path
}

/// Checks that every number `ck` would hand a run is finite, but the best
/// scores, which may be infinite.
fn assert_finite(ck: &Checkpoint, what: &str) {
    for state in &ck.scheduler_states {
        for (k, v) in state {
            assert!(v.is_finite() || (k.ends_with("best") && v.is_infinite()), "{what}: scheduler {k} = {v}");
        }
    }
    for state in &ck.optimizer_states {
        for (k, t) in state {
            assert!(numbers_of(t).iter().all(|v| v.is_finite()), "{what}: optimizer {k} = {t:?}");
        }
    }
    for (k, v) in &ck.precision_state {
        assert!(v.is_finite(), "{what}: precision {k} = {v}");
    }
    for (name, state) in &ck.callbacks {
        for (k, v) in state {
            if k == "best_k_models" {
                let ranked: BTreeMap<String, Option<f64>> = serde_json::from_str(v).unwrap();
                assert!(ranked.values().flatten().all(|s| s.is_finite()), "{what}: {name} {k} = {v}");
            } else if let Ok(x) = v.parse::<f64>() {
                let score = k == "best_score" || k == "best_model_score";
                assert!(x.is_finite() || (score && x.is_infinite()), "{what}: {name} {k} = {v}");
            }
        }
    }
}

/// An SGD run (momentum) with a CyclicLR and a OneCycleLR (their ranges in
/// the param groups) and a BackboneFinetuning that recorded its group.
fn sample_more() -> Checkpoint {
    use crate::callbacks::backbone_finetuning::{state_to_text, GroupRecord, Records};
    use crate::optim::scheduler::{LrScheduler, OneCycleLr, OneCycleOptions};
    use crate::optim::{Optimizer, Sgd, SgdOptions};
    let p = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let mut sgd = Sgd::new(vec![p], SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap();
    let mut cycle = OneCycleLr::new(&mut sgd, OneCycleOptions::new(0.7, 23)).unwrap();
    for _ in 0..3 {
        cycle.step(&mut sgd, None).unwrap();
    }
    let cyclic = writable_states().0.remove(9);
    let mut ck = Checkpoint {
        epoch: 1,
        global_step: 12,
        batches_stepped: 12,
        batches_in_epoch: 11,
        epoch_finished: true,
        state_dict: vec![("0.weight".to_string(), Tensor::from_slice(&[1.0f32, 2.0]))],
        optimizer_states: vec![sgd.state_dict().unwrap()],
        optimizer_kinds: vec!["sgd".into()],
        scheduler_states: vec![cyclic, cycle.state_dict()],
        scheduler_owners: vec![0, 0],
        rng_state: Some(Tensor::from_slice(&[1u8, 2, 3])),
        loop_info: LoopInfo { num_train_batches: 11, accumulate_grad_batches: 2, manual_optimization: false },
        ..Default::default()
    };
    let records: Records = BTreeMap::from([(0, vec![GroupRecord { params: vec!["0.weight".into()], lr: 0.1 }])]);
    ck.callbacks.insert("BackboneFinetuning".into(), state_to_text(Some(0.01), &records));
    ck.lightning_keys.insert("BackboneFinetuning".into(), "BackboneFinetuning".into());
    ck
}

/// Whether a float of `sample()`'s file may be `x`: its plateau's `best`
/// and its callbacks' scores any infinity, its plateau's `mode_worse` the
/// worst of its mode (max: -inf).
fn sample_allows(leaf: &Leaf, x: f64) -> bool {
    let plateau = leaf.name.starts_with("lr_schedulers[1].");
    let checkpoint_score = leaf.name.contains("ModelCheckpoint{")
        && (["best_model_score", "kth_value", "current_score"].contains(&leaf.key.as_str())
            || leaf.name.contains(".best_k_models."));
    let early_stopping = leaf.name.contains("EarlyStopping{") && leaf.key == "best_score";
    let score = (plateau && leaf.key == "best") || checkpoint_score || early_stopping;
    (score && x.is_infinite()) || (plateau && leaf.key == "mode_worse" && x == f64::NEG_INFINITY)
}

/// Each float of the written files of `sample()` and `sample_more()`, set
/// in turn to NaN, inf and -inf: the file is refused with a `Format` error
/// naming the entry and the file, except a best score set to an infinity
/// (read as it), a plateau's `mode_worse` set to its own worst, and the
/// module's own hyperparameters (the user's values, kept as text). What is
/// read is finite but those scores.
#[test]
fn every_float_of_a_checkpoint_is_finite_or_a_legit_infinity() {
    for (ck, allows) in [
        (sample(), sample_allows as fn(&Leaf, f64) -> bool),
        (sample_more(), (|_: &Leaf, _: f64| false) as fn(&Leaf, f64) -> bool),
    ] {
        let top = through_bytes(&ck, "model.");
        assert_finite(&from_lightning(&top, "good.ckpt").unwrap(), "unedited");
        let leaves = float_leaves(&top);
        assert!(leaves.len() > 20, "{} floats", leaves.len());
        for leaf in &leaves {
            for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let edited = with_leaf(&top, &leaf.path, x);
                let what = format!("{} = {x}", leaf.name);
                match from_lightning(&edited, "edited.ckpt") {
                    Err(e) => {
                        assert_eq!(e.code, ErrorCode::Format, "{what}: {}", e.message);
                        assert!(e.message.contains(&leaf.key), "{what}: {}", e.message);
                        assert!(e.message.contains("edited.ckpt"), "{what}: {}", e.message);
                        assert!(!allows(leaf, x), "{what}: a legit infinity refused: {}", e.message);
                    }
                    Ok(back) => {
                        let user = leaf.name.starts_with("hyper_parameters.");
                        assert!(user || allows(leaf, x), "{what} was accepted");
                        assert_finite(&back, &what);
                        if user {
                            assert_eq!(back.hparams.get(&leaf.key).map(String::as_str), Some(x.to_string().as_str()));
                        }
                        if leaf.name.starts_with("lr_schedulers[1].") && leaf.key == "best" {
                            assert!(back.scheduler_states[1].iter().any(|(k, v)| k == "best" && *v == x), "{what}");
                        }
                    }
                }
            }
        }
    }
}

/// The reported case: a `.ckpt` whose scheduler's `base_lrs` is `[nan]`
/// (or `_last_lr`, or a hyperparameter) is refused naming the entry.
#[test]
fn a_nan_base_lr_is_refused_naming_it() {
    let top = through_bytes(&sample(), "");
    for (keys, says) in [
        (
            &["lr_schedulers", "0", "_schedulers", "0", "base_lrs", "0"][..],
            "lr_schedulers[0]._schedulers[0].base_lrs[0]",
        ),
        (&["lr_schedulers", "0", "_schedulers", "1", "eta_min"][..], "lr_schedulers[0]._schedulers[1].eta_min"),
        (&["lr_schedulers", "1", "_last_lr", "0"][..], "lr_schedulers[1]._last_lr[0]"),
        (
            &["optimizer_states", "0", "param_groups", "0", "betas", "1"][..],
            "optimizer_states[0].param_groups[0].betas[1]",
        ),
        (&["MixedPrecision", "backoff_factor"][..], "MixedPrecision.backoff_factor"),
    ] {
        let edited = with_leaf(&top, &path_of(&top, keys), f64::NAN);
        let e = from_lightning(&edited, "nan.ckpt").err().unwrap_or_else(|| panic!("{says} = NaN accepted"));
        assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
        assert!(e.message.contains(&format!("nan.ckpt.{says} is NaN")), "{}", e.message);
    }
}

/// A scheduler state of 10^6 `base_lrs` for an optimizer of one param
/// group is refused by its length, before any entry is read; so are a
/// CyclicLR range and a SequentialLR's milestones longer than they can be.
#[test]
fn a_million_base_lrs_are_refused_before_they_are_read() {
    let n = 1_000_000;
    let million = Value::List((0..n).map(|_| Value::Float(0.1)).collect());
    let step = dict(vec![
        ("step_size", Value::Int(1)),
        ("gamma", Value::Float(0.5)),
        ("base_lrs", million),
        ("last_epoch", Value::Int(0)),
        ("_step_count", Value::Int(1)),
        ("_last_lr", floats(&[0.1])),
    ]);
    let e = scheduler::from_torch(&step, "big.ckpt.lr_schedulers[0]", 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(
        e.message.contains("big.ckpt.lr_schedulers[0].base_lrs holds 1000000 entries where at most 1"),
        "{}",
        e.message
    );
    // In a whole file (the list moved in, not copied): the scheduler's
    // optimizer, which fulmen's entry names, has one group.
    let top = through_bytes(&sample(), "");
    let slot = std::cell::RefCell::new(Some(step));
    let at = path_of(&top, &["lr_schedulers", "0"]);
    let edited = replace_at(&top, &at, &|_| slot.borrow_mut().take().expect("one scheduler replaced"));
    let e = from_lightning(&edited, "big.ckpt").err().expect("10^6 base_lrs accepted");
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("lr_schedulers[0].base_lrs holds 1000000 entries"), "{}", e.message);
    drop(edited);
    // CyclicLR's ranges list one entry per base lr; SequentialLR one
    // milestone between each two schedulers.
    let (states, composite) = writable_states();
    let cyclic = scheduler::to_torch(&states[9], false).unwrap();
    let long = replace_at(&cyclic, &path_of(&cyclic, &["max_momentums"]), &|_| floats(&[0.9, 0.9]));
    let e = scheduler::from_torch(&long, "s", 4).unwrap_err();
    assert!(e.message.contains("s.max_momentums holds 2 entries where at most 1"), "{}", e.message);
    let sequential = scheduler::to_torch(&composite[1], false).unwrap();
    let many = replace_at(&sequential, &path_of(&sequential, &["_milestones"]), &|_| {
        Value::List((0..3).map(Value::Int).collect())
    });
    let e = scheduler::from_torch(&many, "s", 1).unwrap_err();
    assert!(e.message.contains("s._milestones holds 3 entries where at most 1"), "{}", e.message);
}

/// Every float of each kind of scheduler state torch's form holds (the
/// closed forms, MultiStepLR, warm restarts, CyclicLR, LambdaLR, OneCycleLR,
/// SWALR, ReduceLROnPlateau in both modes, a ChainedScheduler and a
/// SequentialLR), set to NaN, inf or -inf, is refused naming it; only
/// ReduceLROnPlateau's `best` may be infinite, and its `mode_worse` its
/// mode's worst.
#[test]
fn every_float_of_every_scheduler_kind_is_checked() {
    use crate::optim::scheduler::{LrScheduler, OneCycleLr, OneCycleOptions};
    use crate::optim::{Sgd, SgdOptions};
    let (mut states, composite) = writable_states();
    states.extend(composite);
    let p = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let mut sgd = Sgd::new(vec![p], SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap();
    let mut cycle = OneCycleLr::new(&mut sgd, OneCycleOptions::new(0.7, 23)).unwrap();
    cycle.step(&mut sgd, None).unwrap();
    states.push(cycle.state_dict());
    states.push(flat_numbers(&[
        ("last_epoch", 3.0),
        ("base_lrs.0", 0.1),
        ("last_lr.0", 0.06),
        ("step_count", 4.0),
        ("anneal_epochs", 5.0),
        ("anneal_cos", 1.0),
        ("swa_lrs.0", 0.05),
    ]));
    let plateau = |max: f64| {
        flat_numbers(&[
            ("last_epoch", 3.0),
            ("best", 0.25),
            ("num_bad_epochs", 1.0),
            ("cooldown_counter", 0.0),
            ("mode_max", max),
            ("factor", 0.5),
            ("patience", 2.0),
            ("threshold", 1e-4),
            ("threshold_abs", 0.0),
            ("cooldown", 0.0),
            ("min_lr", 0.0),
            ("eps", 1e-8),
            ("last_lr.len", 1.0),
            ("min_lrs.len", 1.0),
            ("min_lr_per_group", 0.0),
            ("last_lr.0", 0.05),
            ("min_lrs.0", 0.0),
        ])
    };
    states.push(plateau(0.0));
    states.push(plateau(1.0));
    for state in &states {
        let torch = scheduler::to_torch(state, false).unwrap();
        scheduler::from_torch(&torch, "s", 1).unwrap();
        let worst = match state.iter().find(|(k, _)| k == "mode_max") {
            Some((_, max)) if *max == 1.0 => Some(f64::NEG_INFINITY),
            Some(_) => Some(f64::INFINITY),
            None => None,
        };
        let leaves = float_leaves(&torch);
        assert!(!leaves.is_empty(), "{torch:?}");
        for leaf in leaves {
            for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let legit = (leaf.key == "best" && x.is_infinite()) || (leaf.key == "mode_worse" && worst == Some(x));
                match scheduler::from_torch(&with_leaf(&torch, &leaf.path, x), "s", 1) {
                    Ok(back) => {
                        assert!(legit, "{} = {x} accepted in {torch:?}", leaf.name);
                        assert!(back.iter().all(|(k, v)| v.is_finite() || (k == "best" && *v == x)), "{back:?}");
                    }
                    Err(e) => {
                        assert!(!legit, "{} = {x} refused: {}", leaf.name, e.message);
                        assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
                        assert!(e.message.contains(&format!("s.{}", leaf.name)), "{}: {}", leaf.name, e.message);
                    }
                }
            }
        }
    }
}

/// A scheduler's own loading (fulmen's files, and Lightning's once read)
/// takes no NaN, and no infinite number but ReduceLROnPlateau's `best`;
/// a refused state changes nothing.
#[test]
fn a_scheduler_state_with_a_nan_is_refused_and_changes_nothing() {
    use crate::optim::scheduler::{LrScheduler, PlateauMode, PlateauOptions, ReduceLrOnPlateau, StepLr};
    use crate::optim::{Sgd, SgdOptions};
    let p = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let mut sgd = Sgd::new(vec![p], SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    let mut step = StepLr::new(&mut sgd, 2, 0.5).unwrap();
    step.step(&mut sgd, None).unwrap();
    let good = step.state_dict();
    for key in ["base_lrs.0", "last_lr.0", "gamma"] {
        for x in [f64::NAN, f64::INFINITY] {
            let mut bad = good.clone();
            bad.iter_mut().find(|(k, _)| k == key).unwrap().1 = x;
            let e = step.load_state_dict(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::Format, "{key}: {}", e.message);
            assert!(e.message.contains(&format!("'{key}'")), "{}", e.message);
            assert_eq!(step.state_dict(), good);
        }
    }
    let opts = PlateauOptions { mode: PlateauMode::Max, ..Default::default() };
    let mut plateau = ReduceLrOnPlateau::new(&mut sgd, opts).unwrap();
    let fresh = plateau.state_dict();
    assert!(fresh.iter().any(|(k, v)| k == "best" && *v == f64::NEG_INFINITY), "{fresh:?}");
    plateau.load_state_dict(&fresh).unwrap();
    for (key, x) in
        [("best", f64::NAN), ("factor", f64::NEG_INFINITY), ("threshold", f64::NAN), ("min_lrs.0", f64::INFINITY)]
    {
        let mut bad = fresh.clone();
        bad.iter_mut().find(|(k, _)| k == key).unwrap().1 = x;
        let e = plateau.load_state_dict(&bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::Format, "{key} = {x}: {}", e.message);
        assert!(e.message.contains(&format!("'{key}'")), "{}", e.message);
    }
    assert_eq!(plateau.state_dict(), fresh);
    // After an infinite metric (torch keeps it as the best).
    let mut best = fresh.clone();
    best.iter_mut().find(|(k, _)| k == "best").unwrap().1 = f64::INFINITY;
    plateau.load_state_dict(&best).unwrap();
    assert_eq!(plateau.state_dict(), best);
}

/// An optimizer's own loading (fulmen's safetensors files, and Lightning's
/// once read) refuses a NaN or infinite hyperparameter or step, naming it,
/// and keeps its state; a fulmen checkpoint file holding one is refused
/// when read, before any optimizer sees it.
#[test]
fn an_optimizer_state_with_a_nan_is_refused_and_changes_nothing() {
    use crate::optim::{Adam, AdamOptions, Optimizer};
    let w = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
    let mut adam = Adam::new(vec![w.shallow_clone()], AdamOptions::default()).unwrap();
    let good = adam.state_dict().unwrap();
    for key in ["param_groups.0.lr", "param_groups.0.eps", "param_groups.0.betas.0", "param_groups.0.weight_decay"] {
        for x in [f64::NAN, f64::NEG_INFINITY] {
            let bad: Vec<(String, Tensor)> =
                good.iter().map(|(k, t)| (k.clone(), if k == key { scalar(x) } else { t.shallow_clone() })).collect();
            let e = adam.load_state_dict(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::Format, "{key}: {}", e.message);
            assert!(e.message.contains(key), "{}", e.message);
            assert_eq!(adam.param_groups()[0].lr, 0.001);
        }
    }
    let dir = crate::test_dirs::TempDir::new("ckpt-nan");
    let path = dir.join("nan-lr.ckpt");
    let mut state = good;
    state.iter_mut().find(|(k, _)| k == "param_groups.0.lr").unwrap().1 = scalar(f64::NAN);
    let ck = Checkpoint { optimizer_states: vec![state], optimizer_kinds: vec!["adam".into()], ..Default::default() };
    ck.save(&path).unwrap();
    let e = Checkpoint::load(&path).err().expect("a NaN lr accepted");
    assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    assert!(e.message.contains("nan-lr.ckpt") && e.message.contains("param_groups.0.lr"), "{}", e.message);
}

/// The callbacks' states (text in both formats) and the loss scaler's take
/// no NaN, no infinity but in a best score, and keep their state when they
/// refuse one.
#[test]
fn callback_and_scaler_states_with_a_nan_are_refused() {
    use crate::callbacks::early_stopping::{EarlyStopping, EarlyStoppingOptions};
    use crate::callbacks::model_checkpoint::{ModelCheckpoint, ModelCheckpointOptions};
    use crate::callbacks::timer::Timer;
    use crate::precision::GradScaler;
    use crate::trainer::hooks::Callback;
    let text = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let code = |r: crate::error::Result<()>| r.err().map(|e| e.code);
    let format = Some(ErrorCode::Format);

    let mut es = EarlyStopping::new(EarlyStoppingOptions::new("val_loss")).unwrap();
    let es_state = |wait: &str, best: &str| {
        text(&[("wait_count", wait), ("stopped_epoch", "0"), ("best_score", best), ("patience", "3")])
    };
    es.load_state_dict(&es_state("1", "0.5")).unwrap();
    for (wait, best) in [("1", "NaN"), ("1", "nope"), ("NaN", "0.4"), ("inf", "0.4"), ("1.5", "0.4")] {
        assert_eq!(code(es.load_state_dict(&es_state(wait, best))), format, "{wait} {best}");
        assert_eq!((es.wait_count, es.best_score), (1, 0.5), "a refused state changed it");
    }
    es.load_state_dict(&es_state("2", "-inf")).unwrap();
    assert_eq!(es.best_score, f64::NEG_INFINITY);

    let mut mc = ModelCheckpoint::new(ModelCheckpointOptions {
        monitor: Some("val_loss".into()),
        dirpath: Some("/nonexistent-fulmen-dir".into()),
        ..Default::default()
    })
    .unwrap();
    let mc_state = |score: &str, ranked: &str| {
        text(&[
            ("monitor", "val_loss"),
            ("mode", "min"),
            ("best_model_path", "/nonexistent-fulmen-dir/a.ckpt"),
            ("best_model_score", score),
            ("last_model_path", ""),
            ("dirpath", "/nonexistent-fulmen-dir"),
            ("best_k_models", ranked),
        ])
    };
    mc.load_state_dict(&mc_state("0.5", "{}")).unwrap();
    for (score, ranked) in
        [("NaN", "{}"), ("nope", "{}"), ("0.5", "{\"/a.ckpt\":\"NaN\"}"), ("0.5", "{\"/a.ckpt\":[1]}")]
    {
        assert_eq!(code(mc.load_state_dict(&mc_state(score, ranked))), format, "{score} {ranked}");
        assert_eq!(mc.best_model_score, Some(0.5));
    }
    mc.load_state_dict(&mc_state("-inf", "{}")).unwrap();
    assert_eq!(mc.best_model_score, Some(f64::NEG_INFINITY));

    use crate::callbacks::backbone_finetuning::state_from_text;
    for (k, v) in [("previous_backbone_lr", "NaN"), ("lr.0.0", "inf")] {
        let mut state = text(&[("previous_backbone_lr", "0.01"), ("params.0.0", "0.weight"), ("lr.0.0", "0.1")]);
        state.insert(k.into(), v.into());
        let e = state_from_text(&state).unwrap_err();
        assert_eq!(e.code, ErrorCode::Format, "{k}: {}", e.message);
        assert!(e.message.contains(k), "{}", e.message);
    }

    let mut timer = Timer::new(None, "epoch").unwrap();
    timer.load_state_dict(&text(&[("time_elapsed_fit", "12.5")])).unwrap();
    for bad in ["NaN", "inf", "-1", "x"] {
        assert_eq!(code(timer.load_state_dict(&text(&[("time_elapsed_fit", bad)]))), format, "{bad}");
        assert_eq!(timer.elapsed(), 12.5);
    }

    let mut scaler = GradScaler::new();
    let good = scaler.state_dict().unwrap();
    for key in GradScaler::STATE_KEYS {
        for x in [f64::NAN, f64::INFINITY] {
            let bad: Vec<(String, f64)> =
                good.iter().map(|(k, v)| (k.clone(), if k == key { x } else { *v })).collect();
            let e = scaler.load_state_dict(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::Format, "{key} = {x}: {}", e.message);
            assert!(e.message.contains(key), "{}", e.message);
            assert_eq!(scaler.state_dict().unwrap(), good);
        }
    }
}

/// A ModelCheckpoint's scores may be infinite (Lightning keeps an
/// infinite metric, and ranks a NaN one as its mode's worst), never NaN;
/// an infinite score crosses fulmen's text form as "inf" / "-inf" (which a
/// JSON number cannot hold) and ranks as it did; older text's null reads
/// as the mode's worst.
#[test]
fn a_checkpoint_score_may_be_infinite_never_nan() {
    use crate::callbacks::model_checkpoint::{best_k_text, read_best_k};
    use crate::callbacks::Mode;
    let score = |mode: &str, x: f64| {
        let key = format!("ModelCheckpoint{{'monitor': 'acc', 'mode': '{mode}'}}");
        let state = dict(vec![
            ("monitor", text("acc")),
            ("best_model_score", value::scalar_f32(x).unwrap()),
            ("best_model_path", text("/ck/a.ckpt")),
            ("best_k_models", Value::Dict(vec![(text("/ck/a.ckpt"), value::scalar_f32(x).unwrap())])),
        ]);
        callbacks::from_lightning(&Value::Dict(vec![(text(&key), state)]), "cb.ckpt", &[1])
    };
    for (mode, x) in [("max", f64::NEG_INFINITY), ("min", f64::NEG_INFINITY), ("min", f64::INFINITY)] {
        let read = score(mode, x).unwrap();
        let state = read.values().next().unwrap();
        assert_eq!(state["best_model_score"], x.to_string());
        assert_eq!(state["best_k_models"], format!("{{\"/ck/a.ckpt\":\"{x}\"}}"));
        let max = if mode == "max" { Mode::Max } else { Mode::Min };
        assert_eq!(read_best_k(&state["best_k_models"], max).unwrap()["/ck/a.ckpt"], x);
    }
    let e = score("min", f64::NAN).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    assert!(e.message.contains("best_model_score"), "{}", e.message);
    let ranked = BTreeMap::from([("a".to_string(), 0.25), ("b".to_string(), f64::NEG_INFINITY)]);
    assert_eq!(best_k_text(&ranked), "{\"a\":0.25,\"b\":\"-inf\"}");
    assert_eq!(read_best_k(&best_k_text(&ranked), Mode::Min).unwrap(), ranked);
    assert_eq!(read_best_k("{\"a\":null}", Mode::Max).unwrap()["a"], f64::NEG_INFINITY);
}
