//! Lightning checkpoints written and read back, through the `torch.save`
//! bytes, and malformed ones refused.
use super::*;
use crate::checkpoint::torch_save::{read_bytes, to_bytes};
use crate::checkpoint::LoopInfo;
use crate::error::ErrorCode;
use crate::test_dirs::TempDir;

pub(super) fn scalar(v: f64) -> Tensor {
    Tensor::from_slice(&[v]).reshape([0i64; 0])
}

pub(super) fn flat_numbers(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A checkpoint of an Adam run with a SequentialLR and an SGD run with
/// ReduceLROnPlateau, an EarlyStopping and a ModelCheckpoint.
pub(super) fn sample() -> Checkpoint {
    let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([2, 2]);
    let adam = vec![
        ("param_groups.0.params".to_string(), Tensor::from_slice(&[0i64])),
        ("param_groups.0.lr".to_string(), scalar(0.01)),
        ("param_groups.0.weight_decay".to_string(), scalar(0.0)),
        ("param_groups.0.betas.0".to_string(), scalar(0.9)),
        ("param_groups.0.betas.1".to_string(), scalar(0.999)),
        ("param_groups.0.eps".to_string(), scalar(1e-8)),
        ("param_groups.0.amsgrad".to_string(), scalar(0.0)),
        ("param_groups.0.maximize".to_string(), scalar(0.0)),
        ("param_groups.0.decoupled_weight_decay".to_string(), scalar(1.0)),
        ("param_groups.0.initial_lr".to_string(), scalar(0.01)),
        ("state.0.step".to_string(), scalar(12.0)),
        ("state.0.exp_avg".to_string(), w.shallow_clone()),
        ("state.0.exp_avg_sq".to_string(), w.shallow_clone()),
    ];
    let sgd = vec![
        ("param_groups.0.params".to_string(), Tensor::from_slice(&[0i64, 1])),
        ("param_groups.0.lr".to_string(), scalar(0.1)),
        ("param_groups.0.weight_decay".to_string(), scalar(0.0)),
        ("param_groups.0.momentum".to_string(), scalar(0.9)),
        ("param_groups.0.dampening".to_string(), scalar(0.0)),
        ("param_groups.0.nesterov".to_string(), scalar(1.0)),
        ("param_groups.0.maximize".to_string(), scalar(0.0)),
        ("state.1.momentum_buffer".to_string(), w.shallow_clone()),
    ];
    let sequential = flat_numbers(&[
        ("last_epoch", 22.0),
        ("milestones.len", 1.0),
        ("milestones.0", 5.0),
        ("last_lr.0", 0.06),
        ("schedulers.0.last_epoch", 4.0),
        ("schedulers.0.base_lrs.0", 0.1),
        ("schedulers.0.last_lr.0", 0.082),
        ("schedulers.0.start_factor", 0.1),
        ("schedulers.0.end_factor", 1.0),
        ("schedulers.0.total_iters", 5.0),
        ("schedulers.1.last_epoch", 17.0),
        ("schedulers.1.base_lrs.0", 0.1),
        ("schedulers.1.last_lr.0", 0.06),
        ("schedulers.1.t_max", 39.0),
        ("schedulers.1.eta_min", 0.001),
    ]);
    let plateau = flat_numbers(&[
        ("last_epoch", 3.0),
        ("best", 0.25),
        ("num_bad_epochs", 1.0),
        ("cooldown_counter", 0.0),
        ("mode_max", 1.0),
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
    ]);
    let mut ck = Checkpoint {
        epoch: 1,
        global_step: 12,
        batches_stepped: 12,
        batches_in_epoch: 11,
        epoch_finished: true,
        scheduler_steps: (4, 2),
        val_batches: (4, 4),
        state_dict: vec![("0.weight".to_string(), w.shallow_clone())],
        optimizer_states: vec![adam, sgd],
        optimizer_kinds: vec!["adamw".into(), "sgd".into()],
        scheduler_states: vec![sequential, plateau],
        scheduler_owners: vec![0, 1],
        precision_state: flat_numbers(&[
            ("scale", 1024.0),
            ("growth_factor", 2.0),
            ("backoff_factor", 0.5),
            ("growth_interval", 2000.0),
            ("_growth_tracker", 7.0),
        ]),
        rng_state: Some(Tensor::from_slice(&[1u8, 2, 3])),
        device_rng_state: Some(Tensor::from_slice(&[7u8, 8])),
        loop_info: LoopInfo { num_train_batches: 11, accumulate_grad_batches: 2, manual_optimization: false },
        ..Default::default()
    };
    ck.hparams.insert("lr".into(), "0.01".into());
    ck.hparams.insert("name".into(), "mlp".into());
    let mc = "ModelCheckpoint{monitor=\"val_loss\"}".to_string();
    ck.callbacks.insert(
        mc.clone(),
        [
            ("monitor", "val_loss"),
            ("mode", "min"),
            ("best_model_path", "/ck/epoch=1.ckpt"),
            ("best_model_score", "0.5"),
            ("last_model_path", ""),
            ("dirpath", "/ck"),
            ("best_k_models", "{\"/ck/epoch=0.ckpt\":0.75,\"/ck/epoch=1.ckpt\":0.5}"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    ck.lightning_keys.insert(
        mc,
        "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, \
         'train_time_interval': None}"
            .into(),
    );
    let es = "EarlyStopping{monitor=\"val_loss\", mode=\"min\"}".to_string();
    ck.callbacks.insert(
        es.clone(),
        [("wait_count", "1"), ("stopped_epoch", "0"), ("best_score", "0.5"), ("patience", "3")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    ck.lightning_keys.insert(es, "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}".into());
    ck
}

pub(super) fn through_bytes(ck: &Checkpoint, prefix: &str) -> Value {
    let bytes = to_bytes(&to_lightning(ck, prefix).unwrap()).unwrap();
    read_bytes(&bytes, "written").unwrap()
}

fn sorted<T, U>(v: &[(String, T)], key: impl Fn(&T) -> U) -> Vec<(String, U)> {
    let mut out: Vec<(String, U)> = v.iter().map(|(k, x)| (k.clone(), key(x))).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

pub(super) fn numbers_of(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(tch::Kind::Double).flatten(0, -1)).unwrap()
}

#[test]
fn a_checkpoint_reads_back_as_written() {
    let ck = sample();
    let value = through_bytes(&ck, "model.");
    assert!(is_lightning(&value));
    let back = from_lightning(&value, "written").unwrap();
    assert_eq!((back.epoch, back.global_step, back.batches_stepped), (1, 12, 12));
    assert_eq!((back.batches_in_epoch, back.epoch_finished, back.scheduler_steps), (11, true, (4, 2)));
    assert_eq!(back.state_dict[0].0, "model.0.weight");
    assert!(back.schedulers_listed);
    assert_eq!(back.scheduler_owners, ck.scheduler_owners);
    for (ours, theirs) in ck.optimizer_states.iter().zip(&back.optimizer_states) {
        assert_eq!(sorted(ours, numbers_of), sorted(theirs, numbers_of));
    }
    for (ours, theirs) in ck.scheduler_states.iter().zip(&back.scheduler_states) {
        assert_eq!(sorted(ours, |v| *v), sorted(theirs, |v| *v));
    }
    assert_eq!(back.precision_state, ck.precision_state);
    assert_eq!(back.callbacks, ck.callbacks);
    assert_eq!(back.hparams, ck.hparams);
    assert_eq!(back.rng_state.unwrap(), Tensor::from_slice(&[1u8, 2, 3]));
    assert_eq!(back.device_rng_state.unwrap(), Tensor::from_slice(&[7u8, 8]));
    assert!(back.cuda_rng_state.is_none());
}

/// The `fulmen` entry's scheduler owners must fit the listed schedulers.
#[test]
fn scheduler_owners_that_do_not_fit_are_refused() {
    let Value::Dict(mut top) = through_bytes(&sample(), "") else { panic!() };
    for bad in [vec![Value::Int(0)], vec![Value::Int(0), Value::Int(-1)], vec![Value::Int(0), Value::Float(0.5)]] {
        for (k, v) in top.iter_mut() {
            if matches!(k, Value::Str(s) if s == "fulmen") {
                let Value::Dict(own) = v else { panic!() };
                for (name, owners) in own.iter_mut() {
                    if matches!(name, Value::Str(s) if s == "scheduler_owners") {
                        *owners = Value::List(bad.iter().map(value::copy_value).collect());
                    }
                }
            }
        }
        let edited = Value::Dict(top.iter().map(|(k, v)| (value::copy_value(k), value::copy_value(v))).collect());
        let e = from_lightning(&edited, "edited").err().expect("accepted");
        assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    }
}

#[test]
fn torch_entries_are_written_as_torch_keeps_them() {
    let value = through_bytes(&sample(), "");
    let opt = &items(value.get("optimizer_states").unwrap(), "").unwrap()[0];
    let group = &items(opt.get("param_groups").unwrap(), "").unwrap()[0];
    assert!(matches!(group.get("betas"), Some(Value::Tuple(b)) if b.len() == 2));
    assert!(matches!(group.get("decoupled_weight_decay"), Some(Value::Bool(true))));
    assert!(matches!(group.get("foreach"), Some(Value::None)));
    assert!(matches!(group.get("params"), Some(Value::List(ids)) if matches!(ids.as_slice(), [Value::Int(0)])));
    let step = opt.get("state").and_then(|s| match s {
        Value::Dict(e) => e.first().map(|(_, v)| v),
        _ => None,
    });
    assert!(matches!(step.and_then(|s| s.get("step")), Some(Value::Tensor(t)) if t.kind() == tch::Kind::Float));
    let plateau = &items(value.get("lr_schedulers").unwrap(), "").unwrap()[1];
    assert!(matches!(plateau.get("mode"), Some(Value::Str(m)) if m == "max"));
    assert!(matches!(plateau.get("mode_worse"), Some(Value::Float(f)) if *f == f64::NEG_INFINITY));
    let callbacks = value.get("callbacks").unwrap();
    let es = callbacks.get("EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}").unwrap();
    assert!(matches!(es.get("best_score"), Some(Value::Tensor(_))));
    let mc = entries(callbacks, "")
        .unwrap()
        .iter()
        .find(|(k, _)| matches!(k, Value::Str(s) if s.starts_with("ModelCheckpoint")));
    let mc = mc.and_then(|(_, v)| v.get("kth_best_model_path")).unwrap();
    assert!(matches!(mc, Value::Str(p) if p == "/ck/epoch=0.ckpt"), "{mc:?}");
    assert!(matches!(value.get("hyper_parameters").and_then(|h| h.get("lr")), Some(Value::Float(f)) if *f == 0.01));
}

/// A progress no run of equal epochs has: totals and currents apart,
/// every count of every event different.
fn uneven_progress() -> crate::trainer::loop_progress::FitProgress {
    use crate::trainer::loop_progress::{FitProgress, Tracker};
    let t = |base: i64| Tracker { ready: base + 3, started: base + 2, processed: base + 1, completed: base };
    let mut p = FitProgress::default();
    p.epoch.total = t(4);
    p.epoch.current = Tracker { ready: 5, started: 5, processed: 4, completed: 4 };
    p.batches_that_stepped = 29;
    p.batch.progress.total = t(40);
    p.batch.progress.current = t(6);
    p.batch.is_last_batch = true;
    p.scheduler.total = Tracker { ready: 8, completed: 7, ..Default::default() };
    p.scheduler.current = Tracker { ready: 2, completed: 1, ..Default::default() };
    p.optimizer.step.total = Tracker { ready: 31, completed: 30, ..Default::default() };
    p.optimizer.step.current = Tracker { ready: 4, completed: 3, ..Default::default() };
    p.optimizer.zero_grad.total = Tracker { ready: 35, started: 34, completed: 33, ..Default::default() };
    p.optimizer.zero_grad.current = Tracker { ready: 6, started: 5, completed: 5, ..Default::default() };
    p.manual_step.total = Tracker { ready: 1, completed: 1, ..Default::default() };
    p.manual_step.current = Tracker { ready: 1, completed: 1, ..Default::default() };
    p.val_batch.progress.total = t(12);
    p.val_batch.progress.current = t(3);
    p
}

#[test]
fn kept_loop_progress_is_written_whole_and_read_back() {
    let mut ck = sample();
    // Counters that imply another progress: the kept one must win.
    ck.epoch_finished = true;
    ck.batches_in_epoch = 11;
    ck.progress = Some(uneven_progress());
    let value = through_bytes(&ck, "");
    let fit = value.get("loops").and_then(|l| l.get("fit_loop")).unwrap();
    let counts = |v: &Value| {
        ["ready", "started", "processed", "completed"].map(|k| match v.get(k) {
            Some(Value::Int(n)) => *n,
            _ => -1,
        })
    };
    let batches = fit.get("epoch_loop.batch_progress").unwrap();
    assert_eq!(counts(batches.get("total").unwrap()), [43, 42, 41, 40]);
    let zero_grad = fit.get("epoch_loop.automatic_optimization.optim_progress").unwrap();
    let zero_grad = zero_grad.get("optimizer").and_then(|o| o.get("zero_grad")).unwrap();
    assert_eq!(counts(zero_grad.get("total").unwrap()), [35, 34, -1, 33], "a started tracker has no `processed`");
    let back = from_lightning(&value, "written").unwrap();
    assert_eq!(back.progress, Some(uneven_progress()));
    assert_eq!(back.extra_zero_grads, (3, 2));
    assert_eq!(back.scheduler_steps, (7, 1));
}

#[test]
fn kept_loop_progress_survives_the_safetensors_format() {
    let dir = TempDir::new("kept-progress");
    let path = dir.join("progress.ckpt");
    let mut ck = sample();
    ck.progress = Some(uneven_progress());
    ck.save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap().progress, Some(uneven_progress()));
    ck.progress = None;
    ck.save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap().progress, None, "a file without it reads as one that predates it");
}

#[test]
fn loop_progress_round_trips_where_a_checkpoint_can_be_taken() {
    let base = sample();
    let info = LoopInfo { num_train_batches: 11, accumulate_grad_batches: 2, manual_optimization: false };
    // Epoch end; after a batch that stepped; after one that accumulated;
    // before an epoch's first batch; manual optimization inside an epoch.
    let cases = [
        (1, 12, 12, 11, true, info),
        (1, 10, 10, 8, false, info),
        (1, 10, 10, 9, false, info),
        (2, 12, 12, 0, false, info),
        (0, 14, 7, 7, false, LoopInfo { manual_optimization: true, accumulate_grad_batches: 1, ..info }),
    ];
    for (epoch, global_step, stepped, k, finished, loop_info) in cases {
        let ck = Checkpoint {
            epoch,
            global_step,
            batches_stepped: stepped,
            batches_in_epoch: k,
            epoch_finished: finished,
            loop_info,
            weights_only: true,
            state_dict: base.state_dict.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect(),
            ..Default::default()
        };
        let back = from_lightning(&through_bytes(&ck, ""), "written").unwrap();
        assert_eq!(
            (back.epoch, back.global_step, back.batches_stepped, back.batches_in_epoch, back.epoch_finished),
            (epoch, global_step, stepped, k, finished),
            "case epoch {epoch} batch {k}"
        );
        assert!(back.weights_only);
    }
}

#[test]
fn malformed_checkpoints_are_refused() {
    let good = to_lightning(&sample(), "").unwrap();
    let Value::Dict(entries) = good else { panic!() };
    let with = |key: &str, v: Value| -> Value {
        let mut e: Vec<(Value, Value)> = entries
            .iter()
            .filter(|(k, _)| !matches!(k, Value::Str(s) if s == key))
            .map(|(k, v)| (value::copy_value(k), value::copy_value(v)))
            .collect();
        if key == "callbacks" {
            // fulmen's own entry holds the callback states it reads first.
            e.retain(|(k, _)| !matches!(k, Value::Str(s) if s == "fulmen"));
        }
        e.push((text(key), v));
        Value::Dict(e)
    };
    let refused = |v: Value, code: ErrorCode, says: &str| {
        let e = from_lightning(&v, "bad.ckpt").err().unwrap_or_else(|| panic!("accepted ({says})"));
        assert_eq!(e.code, code, "{}", e.message);
        assert!(e.message.contains(says), "{} (wanted {says:?})", e.message);
    };
    refused(with("epoch", Value::Int(-1)), ErrorCode::Format, "epoch");
    refused(with("global_step", text("12")), ErrorCode::Format, "global_step");
    refused(with("optimizer_states", Value::Int(3)), ErrorCode::Format, "optimizer_states");
    let lambda = dict(vec![
        ("base_lrs", floats(&[0.1])),
        ("last_epoch", Value::Int(0)),
        ("lr_lambdas", Value::List(vec![dict(vec![("factor", Value::Float(0.5))])])),
        ("_last_lr", floats(&[0.1])),
    ]);
    refused(with("lr_schedulers", Value::List(vec![lambda])), ErrorCode::Unsupported, "callable object");
    let huge = Value::Dict(vec![(Value::Int(3), Value::Int(1 << 40))]);
    let multistep = dict(vec![
        ("milestones", huge),
        ("gamma", Value::Float(0.5)),
        ("base_lrs", floats(&[0.1])),
        ("last_epoch", Value::Int(0)),
        ("_last_lr", floats(&[0.1])),
    ]);
    refused(with("lr_schedulers", Value::List(vec![multistep])), ErrorCode::Format, "milestones");
    refused(with("loops", dict(vec![])), ErrorCode::Format, "fit_loop");
    refused(with("callbacks", Value::List(vec![])), ErrorCode::Format, "callbacks");
}

/// A scheduler's state as (key, value) entries.
pub(super) type SchedulerState = Vec<(String, f64)>;

/// A state of each scheduler kind Lightning's format writes but
/// OneCycleLR, ReduceLROnPlateau and SWALR (LambdaLR, StepLR, MultiStepLR,
/// ExponentialLR, CosineAnnealingLR, LinearLR, ConstantLR, PolynomialLR,
/// CosineAnnealingWarmRestarts, CyclicLR), all over one param group; and a
/// ChainedScheduler and a SequentialLR of two of them.
pub(super) fn writable_states() -> (Vec<SchedulerState>, [SchedulerState; 2]) {
    let base = [("last_epoch", 7.0), ("base_lrs.0", 0.1), ("last_lr.0", 0.05)];
    let with = |extra: &[(&str, f64)]| {
        let mut all: Vec<(&str, f64)> = base.to_vec();
        all.extend_from_slice(extra);
        flat_numbers(&all)
    };
    let states = vec![
        with(&[]), // LambdaLR / MultiplicativeLR
        with(&[("step_size", 2.0), ("gamma", 0.5)]),
        with(&[
            ("gamma", 0.5),
            ("milestones.len", 3.0),
            ("milestones.0", 2.0),
            ("milestones.1", 2.0),
            ("milestones.2", 5.0),
        ]),
        with(&[("gamma", 0.9)]),
        with(&[("t_max", 10.0), ("eta_min", 0.001)]),
        with(&[("start_factor", 0.1), ("end_factor", 1.0), ("total_iters", 5.0)]),
        with(&[("factor", 0.5), ("total_iters", 4.0)]),
        with(&[("total_iters", 6.0), ("power", 2.0)]),
        with(&[("t_0", 3.0), ("t_mult", 2.0), ("eta_min", 0.001)]),
        flat_numbers(&[
            ("last_epoch", 7.0),
            ("base_lrs.0", 0.01),
            ("last_lr.0", 0.05),
            ("base_lr", 0.01),
            ("max_lr", 0.1),
            ("step_size_up", 4.0),
            ("step_size_down", 6.0),
            ("mode", 2.0),
            ("gamma", 0.99),
            ("cycle_momentum", 1.0),
            ("base_momentum", 0.8),
            ("max_momentum", 0.9),
            ("ranges.len", 1.0),
            ("max_lrs.0", 0.1),
            ("base_momentums.0", 0.8),
            ("max_momentums.0", 0.9),
        ]),
    ];
    // A ChainedScheduler of two of them, and a SequentialLR of the chain's
    // kind of parts: torch tells them apart by `_milestones` alone.
    let mut chained = flat_numbers(&[("chain.len", 2.0), ("last_lr.0", 0.045)]);
    let mut sequential =
        flat_numbers(&[("last_epoch", 7.0), ("milestones.len", 1.0), ("milestones.0", 3.0), ("last_lr.0", 0.045)]);
    for (i, part) in [&states[6], &states[3]].iter().enumerate() {
        chained.extend(part.iter().map(|(k, v)| (format!("schedulers.{i}.{k}"), *v)));
        sequential.extend(part.iter().map(|(k, v)| (format!("schedulers.{i}.{k}"), *v)));
    }
    (states, [chained, sequential])
}

#[test]
fn every_writable_scheduler_reads_back() {
    let (states, composite) = writable_states();
    for state in states.iter().chain(&composite) {
        let torch = scheduler::to_torch(state, false).unwrap();
        let back = scheduler::from_torch(&torch, "scheduler", 1).unwrap();
        assert_eq!(sorted(state, |v| *v), sorted(&back, |v| *v), "{torch:?}");
    }
    // Warm restarts: torch's T_cur / T_i after 7 steps of periods 3, 6.
    let torch = scheduler::to_torch(&states[8], false).unwrap();
    assert!(matches!(torch.get("T_cur"), Some(Value::Int(4))) && matches!(torch.get("T_i"), Some(Value::Int(6))));
    // CyclicLR's momentum range goes to the param groups too.
    assert_eq!(scheduler::group_entries(&states[9]), vec![("base_momentum", vec![0.8]), ("max_momentum", vec![0.9])]);
}

/// OneCycleLR goes to torch's form (its ranges into the param groups) and
/// back, and the state read back steps on with the same learning rates.
#[test]
fn one_cycle_round_trips_through_torch_and_the_param_groups() {
    use crate::optim::scheduler::{AnnealStrategy, LrScheduler, OneCycleLr, OneCycleOptions};
    use crate::optim::{Optimizer, Sgd, SgdOptions};
    let sgd = || {
        let p = Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        Sgd::new(vec![p], SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap()
    };
    for three_phase in [false, true] {
        let opts = OneCycleOptions {
            pct_start: 0.3,
            anneal_strategy: if three_phase { AnnealStrategy::Linear } else { AnnealStrategy::Cos },
            three_phase,
            ..OneCycleOptions::new(0.7, 23)
        };
        let (mut o, mut o2) = (sgd(), sgd());
        let mut s = OneCycleLr::new(&mut o, opts).unwrap();
        for _ in 0..9 {
            s.step(&mut o, None).unwrap();
        }
        let state = s.state_dict();
        check_scheduler(&state).unwrap();
        let torch = scheduler::to_torch(&state, false).unwrap();
        let phases = torch.get("_schedule_phases").unwrap();
        assert_eq!(items(phases, "phases").unwrap().len(), if three_phase { 3 } else { 2 });
        let groups: Vec<(String, Vec<f64>)> =
            scheduler::group_entries(&state).iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        assert_eq!(
            groups.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["max_lr", "min_lr", "max_momentum", "base_momentum"]
        );
        let mut back = scheduler::from_torch(&torch, "scheduler", 1).unwrap();
        complete_from_groups(&mut back, &groups, "scheduler").unwrap();
        let mut s2 = OneCycleLr::new(&mut o2, OneCycleOptions::new(3.0, 50)).unwrap();
        s2.load_state_dict(&back).unwrap();
        for _ in 0..14 {
            s.step(&mut o, None).unwrap();
            s2.step(&mut o2, None).unwrap();
            assert_eq!(o.param_groups()[0].lr.to_bits(), o2.param_groups()[0].lr.to_bits());
            assert_eq!(o.param_groups()[0].momentum.to_bits(), o2.param_groups()[0].momentum.to_bits());
        }
        // Without the param groups' ranges, the state is incomplete.
        let mut bare = scheduler::from_torch(&torch, "scheduler", 1).unwrap();
        let err = complete_from_groups(&mut bare, &[], "scheduler").unwrap_err();
        assert!(err.message.contains("max_lr"), "{err}");
    }

    // A warm-up, then a one-cycle, in a SequentialLR: the part's ranges go
    // to the param groups and back.
    use crate::optim::scheduler::{LinearLr, SequentialLr};
    let sequential = |o: &mut Sgd| {
        let warm = LinearLr::new(o, 0.1, 1.0, 3).unwrap();
        let cycle = OneCycleLr::new(o, OneCycleOptions::new(0.7, 20)).unwrap();
        SequentialLr::new(o, vec![Box::new(warm), Box::new(cycle)], vec![3]).unwrap()
    };
    let (mut o, mut o2) = (sgd(), sgd());
    let mut s = sequential(&mut o);
    for _ in 0..6 {
        s.step(&mut o, None).unwrap();
    }
    let state = s.state_dict();
    let groups: Vec<(String, Vec<f64>)> =
        scheduler::group_entries(&state).iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    assert!(groups.iter().any(|(k, _)| k == "max_lr"), "{groups:?}");
    let mut back = scheduler::from_torch(&scheduler::to_torch(&state, false).unwrap(), "scheduler", 1).unwrap();
    complete_from_groups(&mut back, &groups, "scheduler").unwrap();
    let mut s2 = sequential(&mut o2);
    s2.load_state_dict(&back).unwrap();
    for _ in 0..10 {
        s.step(&mut o, None).unwrap();
        s2.step(&mut o2, None).unwrap();
        assert_eq!(o.param_groups()[0].lr.to_bits(), o2.param_groups()[0].lr.to_bits());
    }

    // A state with an empty phase or a negative min_lr is refused.
    let mut o3 = sgd();
    let mut s3 = OneCycleLr::new(&mut o3, OneCycleOptions::new(0.7, 23)).unwrap();
    for (key, bad) in [("phase_end.0", 0.0), ("phase_end.1", 21.0), ("min_lr", -1.0)] {
        let mut state = s3.state_dict();
        state.iter_mut().find(|(k, _)| k == key).unwrap().1 = bad;
        assert_eq!(s3.load_state_dict(&state).unwrap_err().code, ErrorCode::Format, "{key} = {bad}");
    }
}

#[test]
fn the_weights_alone_read_past_a_scheduler_fulmen_cannot_resume() {
    let dir = TempDir::new("lightning-weights");
    let path = dir.join("stateful-lambda.ckpt");
    let Value::Dict(mut top) = to_lightning(&sample(), "").unwrap() else { panic!() };
    // A LambdaLR whose function kept state (a callable object's __dict__).
    let lambda = dict(vec![
        ("lr_lambdas", Value::List(vec![dict(vec![("scale", Value::Float(2.0))])])),
        ("base_lrs", floats(&[0.1])),
        ("last_epoch", Value::Int(3)),
        ("_last_lr", floats(&[0.02])),
    ]);
    for (k, v) in top.iter_mut() {
        if matches!(k, Value::Str(s) if s == "lr_schedulers") {
            *v = Value::List(vec![lambda]);
            break;
        }
    }
    crate::checkpoint::torch_save::save(&path, &Value::Dict(top)).unwrap();
    assert_eq!(Checkpoint::load(&path).err().map(|e| e.code), Some(ErrorCode::Unsupported));
    let weights = Checkpoint::load_weights(&path).unwrap();
    assert_eq!(weights.state_dict.len(), 1);
}

#[test]
fn foreach_choices_cross_torch_form_as_booleans() {
    use crate::optim::{Adam, AdamOptions, Adamax, AdamaxOptions, Optimizer};
    let w = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
    for choice in [Some(true), Some(false), None] {
        let mut adam = Adam::new(vec![w.shallow_clone()], AdamOptions::default()).unwrap();
        adam.set_foreach(choice).unwrap();
        let v = optimizer::to_torch("adam", &adam.state_dict().unwrap()).unwrap();
        let group = &items(v.get("param_groups").unwrap(), "").unwrap()[0];
        match choice {
            Some(on) => assert!(matches!(group.get("foreach"), Some(Value::Bool(b)) if *b == on)),
            None => assert!(matches!(group.get("foreach"), Some(Value::None))),
        }
        let mut back = Adam::new(vec![w.shallow_clone()], AdamOptions::default()).unwrap();
        back.load_state_dict(&optimizer::from_torch(&v, "adam").unwrap()).unwrap();
        assert_eq!(back.foreach(), choice);
    }
    // A foreach=True written by torch's Adamax (not by fulmen) is read too.
    let mut adamax = Adamax::new(vec![w.shallow_clone()], AdamaxOptions::default()).unwrap();
    let Value::Dict(mut top) = optimizer::to_torch("adamax", &adamax.state_dict().unwrap()).unwrap() else { panic!() };
    let mut found = false;
    for (k, groups) in top.iter_mut() {
        if let (Value::Str(k), Value::List(groups)) = (k, groups) {
            if k == "param_groups" {
                let Value::Dict(entries) = &mut groups[0] else { panic!() };
                for (name, x) in entries.iter_mut() {
                    if matches!(name, Value::Str(s) if s == "foreach") {
                        *x = Value::Bool(true);
                        found = true;
                    }
                }
            }
        }
    }
    assert!(found, "torch's Adamax group has a foreach entry");
    adamax.load_state_dict(&optimizer::from_torch(&Value::Dict(top), "adamax").unwrap()).unwrap();
    assert_eq!(adamax.foreach(), Some(true));
}
