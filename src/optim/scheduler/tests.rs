//! Scheduler sequences against torch.optim.lr_scheduler (constants at the
//! end, produced with Python torch 2.13.0 as described there).
use super::*;
use crate::optim::{Adam, AdamOptions, ParamGroup, Sgd, SgdOptions};
use tch::{Kind, Tensor};

pub(super) fn opt() -> Sgd {
    let p = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    Sgd::new(vec![p], SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-3)
}

/// lr (and momentum) after construction and after each of `want.len() - 1` steps.
pub(super) fn sequence(o: &mut Sgd, s: &mut dyn LrScheduler, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut lrs = vec![s.last_lr()[0]];
    let mut moms = vec![o.param_groups()[0].momentum];
    assert_eq!(o.lr(), lrs[0]);
    for _ in 1..n {
        s.step(o, None).unwrap();
        assert_eq!(s.last_lr(), vec![o.lr()]);
        lrs.push(o.lr());
        moms.push(o.param_groups()[0].momentum);
    }
    (lrs, moms)
}

fn assert_seq(name: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w), "{name} step {i}: got {got:?}\nwant {want:?}");
    }
}

pub(super) fn check_closed(name: &str, make: impl Fn(&mut Sgd) -> Result<Box<dyn LrScheduler>>, want: &[f64]) {
    let mut o = opt();
    let mut s = make(&mut o).unwrap();
    let (lrs, _) = sequence(&mut o, s.as_mut(), want.len());
    assert_seq(name, &lrs, want);
    assert_eq!(o.param_groups()[0].initial_lr, Some(0.1));
    // Round trip after 4 steps: a fresh scheduler loaded from the dict
    // continues identically.
    let mut o1 = opt();
    let mut s1 = make(&mut o1).unwrap();
    for _ in 0..4 {
        s1.step(&mut o1, None).unwrap();
    }
    let dict = s1.state_dict();
    let mut o2 = opt();
    let mut s2 = make(&mut o2).unwrap();
    s2.load_state_dict(&dict).unwrap();
    assert_eq!(s2.state_dict(), dict);
    for _ in 0..5 {
        s1.step(&mut o1, None).unwrap();
        s2.step(&mut o2, None).unwrap();
        assert_eq!(o1.lr(), o2.lr());
    }
}

#[test]
fn closed_form_schedulers_match_torch() {
    check_closed("step", |o| Ok(Box::new(StepLr::new(o, 3, 0.5)?)), &STEP);
    check_closed("multi_step", |o| Ok(Box::new(MultiStepLr::new(o, &[8, 5, 2, 5], 0.1)?)), &MULTI_STEP);
    check_closed("exponential", |o| Ok(Box::new(ExponentialLr::new(o, 0.9)?)), &EXPONENTIAL);
    check_closed("cosine", |o| Ok(Box::new(CosineAnnealingLr::new(o, 5, 0.01)?)), &COSINE);
    check_closed("linear", |o| Ok(Box::new(LinearLr::new(o, 0.25, 1.0, 4)?)), &LINEAR);
    check_closed("constant", |o| Ok(Box::new(ConstantLr::new(o, 0.5, 3)?)), &CONSTANT);
    check_closed("polynomial", |o| Ok(Box::new(PolynomialLr::new(o, 6, 2.0)?)), &POLYNOMIAL);
    check_closed("warm_restarts", |o| Ok(Box::new(CosineAnnealingWarmRestarts::new(o, 3, 2, 0.01)?)), &WARM_RESTARTS);
}

#[test]
fn sequential_matches_torch() {
    check_closed(
        "warmup_cosine",
        |o| {
            let warm: Box<dyn LrScheduler> = Box::new(LinearLr::new(o, 0.1, 1.0, 3)?);
            let cosine: Box<dyn LrScheduler> = Box::new(CosineAnnealingLr::new(o, 6, 0.001)?);
            Ok(Box::new(SequentialLr::new(o, vec![warm, cosine], vec![3])?))
        },
        &WARMUP_COSINE,
    );
    check_closed(
        "sequential_3",
        |o| {
            let a: Box<dyn LrScheduler> = Box::new(ConstantLr::new(o, 0.5, 2)?);
            let b: Box<dyn LrScheduler> = Box::new(ExponentialLr::new(o, 0.9)?);
            let c: Box<dyn LrScheduler> = Box::new(StepLr::new(o, 2, 0.5)?);
            Ok(Box::new(SequentialLr::new(o, vec![a, b, c], vec![2, 5])?))
        },
        &SEQUENTIAL_3,
    );
}

#[test]
fn sequential_refuses_bad_parts_and_bad_states() {
    let mut o = opt();
    let step = |o: &mut Sgd| -> Box<dyn LrScheduler> { Box::new(StepLr::new(o, 1, 0.5).unwrap()) };
    let (a, b) = (step(&mut o), step(&mut o));
    assert!(SequentialLr::new(&mut o, vec![a, b], vec![]).is_err(), "milestone count");
    let (a, b, c) = (step(&mut o), step(&mut o), step(&mut o));
    assert!(SequentialLr::new(&mut o, vec![a, b, c], vec![4, 2]).is_err(), "decreasing milestones");
    assert!(SequentialLr::new(&mut o, vec![], vec![]).is_err(), "no scheduler");
    let plateau: Box<dyn LrScheduler> = Box::new(ReduceLrOnPlateau::new(&mut o, PlateauOptions::default()).unwrap());
    let first = step(&mut o);
    let e = SequentialLr::new(&mut o, vec![first, plateau], vec![2]).err().unwrap();
    assert!(e.message.contains("ReduceLROnPlateau"), "{}", e.message);
    // A state of other schedulers is refused and changes nothing.
    let (a, b) = (step(&mut o), step(&mut o));
    let mut s = SequentialLr::new(&mut o, vec![a, b], vec![2]).unwrap();
    s.step(&mut o, None).unwrap();
    let before = s.state_dict();
    let mut o2 = opt();
    let cos: Box<dyn LrScheduler> = Box::new(CosineAnnealingLr::new(&mut o2, 5, 0.0).unwrap());
    let first = step(&mut o2);
    let other = SequentialLr::new(&mut o2, vec![first, cos], vec![2]).unwrap().state_dict();
    assert!(s.load_state_dict(&other).is_err());
    assert_eq!(s.state_dict(), before);
    let mut extra = before.clone();
    extra.push(("schedulers.7.last_epoch".into(), 1.0));
    assert!(s.load_state_dict(&extra).is_err());
    assert_eq!(s.state_dict(), before);
}

#[test]
fn warm_restarts_period_is_torchs_for_huge_steps() {
    let mut o = opt();
    let s = CosineAnnealingWarmRestarts::new(&mut o, 3, 2, 0.0).unwrap();
    // 3 + 6 + 12 = 21: step 21 starts the fourth period of 24.
    let mut s = s;
    s.jump_to(&mut o, 21).unwrap();
    assert_eq!(o.lr(), 0.1);
    s.jump_to(&mut o, i64::MAX).unwrap();
    assert!(o.lr().is_finite());
    assert!(CosineAnnealingWarmRestarts::new(&mut o, 0, 1, 0.0).is_err());
    assert!(CosineAnnealingWarmRestarts::new(&mut o, 1, 0, 0.0).is_err());
    assert!(ConstantLr::new(&mut o, 1.5, 3).is_err());
    assert!(PolynomialLr::new(&mut o, 0, 1.0).is_err());
}

#[test]
fn one_cycle_matches_torch() {
    let mut o = opt();
    let mut s = OneCycleLr::new(&mut o, OneCycleOptions::new(1.0, 10)).unwrap();
    let (lrs, moms) = sequence(&mut o, &mut s, ONE_CYCLE_COS.len());
    assert_seq("one_cycle cos", &lrs, &ONE_CYCLE_COS);
    assert_seq("one_cycle cos momentum", &moms, &ONE_CYCLE_COS_MOM);
    // Step 11 of 10 is an error and changes nothing.
    let before = s.state_dict();
    let e = s.step(&mut o, None).unwrap_err();
    assert_eq!(e.code, crate::error::ErrorCode::OutOfRange);
    assert_eq!(s.state_dict(), before);

    let opts = OneCycleOptions {
        pct_start: 0.25,
        anneal_strategy: AnnealStrategy::Linear,
        three_phase: true,
        div_factor: 10.0,
        final_div_factor: 100.0,
        ..OneCycleOptions::new(0.5, 12)
    };
    let mut o = opt();
    let mut s = OneCycleLr::new(&mut o, opts).unwrap();
    assert_eq!(o.param_groups()[0].initial_lr, Some(0.05));
    let (lrs, moms) = sequence(&mut o, &mut s, ONE_CYCLE_LINEAR_3.len());
    assert_seq("one_cycle linear 3", &lrs, &ONE_CYCLE_LINEAR_3);
    assert_seq("one_cycle linear 3 momentum", &moms, &ONE_CYCLE_LINEAR_3_MOM);
}

#[test]
fn one_cycle_cycles_adam_beta1_and_round_trips() {
    let p = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let mut adam = Adam::new(vec![p], AdamOptions::default()).unwrap();
    let mut s = OneCycleLr::new(&mut adam, OneCycleOptions::new(1.0, 10)).unwrap();
    for want in &ONE_CYCLE_COS_MOM[1..5] {
        s.step(&mut adam, None).unwrap();
        assert!(close(adam.param_groups()[0].momentum, *want));
    }
    let dict = s.state_dict();
    let mut o2 = opt();
    let mut s2 = OneCycleLr::new(&mut o2, OneCycleOptions::new(3.0, 50)).unwrap();
    s2.load_state_dict(&dict).unwrap();
    s2.step(&mut o2, None).unwrap();
    assert!(close(o2.lr(), ONE_CYCLE_COS[5]));
    let no_cycle = OneCycleOptions { cycle_momentum: false, ..OneCycleOptions::new(1.0, 10) };
    let mut o3 = opt();
    OneCycleLr::new(&mut o3, no_cycle).unwrap();
    assert_eq!(o3.param_groups()[0].momentum, 0.9);
}

fn plateau_run(opts: PlateauOptions, metrics: &[f64], lrs: &[f64], bad: &[u64], cooldown: &[u64]) {
    let mut o = Sgd::new(
        vec![Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true)],
        SgdOptions { lr: 0.1, ..Default::default() },
    )
    .unwrap();
    let mut s = ReduceLrOnPlateau::new(&mut o, opts).unwrap();
    assert_eq!(s.last_lr(), vec![0.1]);
    let mut saved = None;
    for (i, m) in metrics.iter().enumerate() {
        s.step(&mut o, Some(*m)).unwrap();
        assert!(close(o.lr(), lrs[i]), "step {i}: lr {} want {}", o.lr(), lrs[i]);
        assert_eq!((s.num_bad_epochs(), s.cooldown_counter()), (bad[i], cooldown[i]), "step {i}");
        assert_eq!(s.last_lr(), vec![o.lr()]);
        if i == metrics.len() / 2 {
            saved = Some((s.state_dict(), i));
        }
    }
    // Resume from the middle: a fresh scheduler continues identically.
    let (dict, from) = saved.unwrap();
    let mut o2 = opt();
    let mut s2 = ReduceLrOnPlateau::new(&mut o2, PlateauOptions::default()).unwrap();
    s2.load_state_dict(&dict).unwrap();
    o2.set_lr(lrs[from]);
    for (i, m) in metrics.iter().enumerate().skip(from + 1) {
        s2.step(&mut o2, Some(*m)).unwrap();
        assert!(close(o2.lr(), lrs[i]), "resumed step {i}");
    }
}

#[test]
fn plateau_matches_torch() {
    let min =
        PlateauOptions { factor: 0.5, patience: 2, threshold: 0.05, cooldown: 1, min_lr: 0.02, ..Default::default() };
    plateau_run(min, &PLATEAU_MIN_METRICS, &PLATEAU_MIN, &PLATEAU_MIN_BAD, &PLATEAU_MIN_COOLDOWN);
    let max = PlateauOptions {
        mode: PlateauMode::Max,
        factor: 0.1,
        patience: 1,
        threshold: 0.02,
        threshold_mode: ThresholdMode::Abs,
        ..Default::default()
    };
    plateau_run(max, &PLATEAU_MAX_METRICS, &PLATEAU_MAX, &PLATEAU_MAX_BAD, &PLATEAU_MAX_COOLDOWN);
}

#[test]
fn plateau_needs_metric_and_valid_factor() {
    let mut o = opt();
    let mut s = ReduceLrOnPlateau::new(&mut o, PlateauOptions::default()).unwrap();
    let e = s.step(&mut o, None).unwrap_err();
    assert_eq!(e.code, crate::error::ErrorCode::InvalidArgument);
    let bad = PlateauOptions { factor: 1.0, ..Default::default() };
    assert!(ReduceLrOnPlateau::new(&mut o, bad).is_err());
    assert_eq!(s.name(), "reduce_lr_on_plateau");
}

#[test]
fn plateau_bounds_each_group_by_its_own_min_lr() {
    let mut o = opt();
    let p = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    o.add_param_group(vec![p], Some(0.2)).unwrap();
    let opts = PlateauOptions { factor: 0.5, patience: 0, ..Default::default() };
    assert!(ReduceLrOnPlateau::with_min_lrs(&mut o, opts, &[0.04]).is_err());
    assert!(ReduceLrOnPlateau::with_min_lrs(&mut o, opts, &[0.04, f64::NAN]).is_err());
    assert!(ReduceLrOnPlateau::with_min_lrs(&mut o, opts, &[0.04, -1.0]).is_err());
    let mut s = ReduceLrOnPlateau::with_min_lrs(&mut o, opts, &[0.04, 0.08]).unwrap();
    // torch: ReduceLROnPlateau(opt, factor=0.5, patience=0, min_lr=[0.04, 0.08]);
    // a metric that never improves halves each group down to its bound.
    let mut seen = Vec::new();
    for _ in 0..4 {
        s.step(&mut o, Some(1.0)).unwrap();
        seen.push((o.param_groups()[0].lr, o.param_groups()[1].lr));
    }
    assert_eq!(seen, vec![(0.1, 0.2), (0.05, 0.1), (0.04, 0.08), (0.04, 0.08)]);
    // The bounds travel with the state; an older state's one min_lr serves all.
    let state = s.state_dict();
    let mut back = ReduceLrOnPlateau::new(&mut o, opts).unwrap();
    back.load_state_dict(&state).unwrap();
    assert_eq!(back.min_lrs(), &[0.04, 0.08]);
    let older: Vec<(String, f64)> = state.iter().filter(|(k, _)| !k.starts_with("min_lrs")).cloned().collect();
    back.load_state_dict(&older).unwrap();
    assert_eq!(back.min_lrs(), &[0.0, 0.0]);
    let mut bad = state.clone();
    bad.iter_mut().filter(|(k, _)| k == "min_lrs.1").for_each(|(_, v)| *v = -1.0);
    assert!(back.load_state_dict(&bad).is_err());

    // A group added later: one min_lr serves it (torch resizes its list);
    // bounds given per group refuse the reduction, as torch raises.
    let third = || Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    for per_group in [false, true] {
        let mut o = opt();
        let one = PlateauOptions { min_lr: 0.09, ..opts };
        let mut s = if per_group {
            ReduceLrOnPlateau::with_min_lrs(&mut o, one, &[0.09]).unwrap()
        } else {
            ReduceLrOnPlateau::new(&mut o, one).unwrap()
        };
        o.add_param_group(vec![third()], Some(0.3)).unwrap();
        s.step(&mut o, Some(1.0)).unwrap();
        let reduced = s.step(&mut o, Some(1.0));
        if per_group {
            assert_eq!(reduced.unwrap_err().code, crate::error::ErrorCode::InvalidState);
        } else {
            reduced.unwrap();
            assert_eq!((o.param_groups()[0].lr, o.param_groups()[1].lr), (0.09, 0.15));
            assert_eq!(s.min_lrs(), &[0.09, 0.09]);
        }
    }
}

#[test]
fn construction_sets_initial_lr_and_epoch_zero_lr() {
    let mut o = opt();
    let _warmup = LinearLr::new(&mut o, 0.5, 1.0, 2).unwrap();
    assert_eq!(o.lr(), 0.05);
    assert_eq!(o.param_groups()[0].initial_lr, Some(0.1));
    // A second scheduler takes its base lrs from initial_lr, like torch.
    let s = StepLr::new(&mut o, 2, 0.5).unwrap();
    assert_eq!(s.last_lr(), vec![0.1]);
    assert_eq!(s.state_dict().iter().find(|(k, _)| k == "base_lrs.0").map(|x| x.1), Some(0.1));
}

#[test]
fn validation_errors() {
    let mut o = opt();
    assert!(StepLr::new(&mut o, 0, 0.5).is_err());
    assert!(ExponentialLr::new(&mut o, f64::NAN).is_err());
    assert!(CosineAnnealingLr::new(&mut o, 0, 0.0).is_err());
    assert!(LinearLr::new(&mut o, 0.0, 1.0, 5).is_err());
    assert!(LinearLr::new(&mut o, 0.5, 1.5, 5).is_err());
    assert!(LinearLr::new(&mut o, 0.5, 1.0, 0).is_err());
    assert!(OneCycleLr::new(&mut o, OneCycleOptions::new(1.0, 0)).is_err());
    assert!(OneCycleLr::new(&mut o, OneCycleOptions { pct_start: 1.5, ..OneCycleOptions::new(1.0, 10) }).is_err());
    // pct_start * total_steps - 1 == 0: torch divides by zero.
    assert!(OneCycleLr::new(&mut o, OneCycleOptions { pct_start: 0.1, ..OneCycleOptions::new(1.0, 10) }).is_err());
    let e = StepLr::new(&mut o, -1, 0.5).unwrap_err();
    assert_eq!(e.code, crate::error::ErrorCode::InvalidArgument);
}

#[test]
fn load_errors_and_group_changes() {
    let mut o = opt();
    let mut step = StepLr::new(&mut o, 3, 0.5).unwrap();
    let cosine = CosineAnnealingLr::new(&mut o, 5, 0.0).unwrap();
    let before = step.state_dict();
    let e = step.load_state_dict(&cosine.state_dict()).unwrap_err();
    assert_eq!(e.code, crate::error::ErrorCode::Format);
    let mut extra = before.clone();
    extra.push(("bogus".into(), 1.0));
    assert_eq!(step.load_state_dict(&extra).unwrap_err().code, crate::error::ErrorCode::Format);
    let bad: Vec<_> = before.iter().map(|(k, v)| (k.clone(), if k == "step_size" { 0.0 } else { *v })).collect();
    assert_eq!(step.load_state_dict(&bad).unwrap_err().code, crate::error::ErrorCode::Format);
    let frac: Vec<_> = before.iter().map(|(k, v)| (k.clone(), if k == "last_epoch" { 1.5 } else { *v })).collect();
    assert!(step.load_state_dict(&frac).is_err());
    assert_eq!(step.state_dict(), before);

    let mut plateau = ReduceLrOnPlateau::new(&mut o, PlateauOptions::default()).unwrap();
    assert!(plateau.load_state_dict(&before).is_err());
    let mut one = OneCycleLr::new(&mut o, OneCycleOptions::new(1.0, 10)).unwrap();
    assert!(one.load_state_dict(&before).is_err());

    let p = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    o.add_param_group(vec![p], None).unwrap();
    // torch's StepLR takes a group added later; its OneCycleLR cannot
    // (appended_tests.rs has each kind).
    step.step(&mut o, None).unwrap();
    assert_eq!(step.last_lr().len(), 2);
    let e = one.step(&mut o, None).unwrap_err();
    assert_eq!(e.code, crate::error::ErrorCode::InvalidState);
    let _: &[ParamGroup] = o.param_groups();
}

// Produced with torch 2.13.0: opt = SGD([p], lr=0.1, momentum=0.9); s = <scheduler>;
// lrs = [s.get_last_lr()[0]] then, `steps` times, opt.step(); s.step(); lrs.append(s.get_last_lr()[0])
// (and the same for opt.param_groups[0]['momentum'] in the *_MOM arrays).
// StepLR(opt, step_size=3, gamma=0.5)
const STEP: [f64; 13] = [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125, 0.00625];
// MultiStepLR(opt, [2, 5, 5, 8], gamma=0.1)
const MULTI_STEP: [f64; 13] = [
    0.1,
    0.1,
    0.010000000000000002,
    0.010000000000000002,
    0.010000000000000002,
    0.00010000000000000005,
    0.00010000000000000005,
    0.00010000000000000005,
    1.0000000000000006e-05,
    1.0000000000000006e-05,
    1.0000000000000006e-05,
    1.0000000000000006e-05,
    1.0000000000000006e-05,
];
// ExponentialLR(opt, gamma=0.9)
const EXPONENTIAL: [f64; 13] = [
    0.1,
    0.09000000000000001,
    0.08100000000000002,
    0.07290000000000002,
    0.06561000000000002,
    0.05904900000000002,
    0.05314410000000002,
    0.04782969000000002,
    0.043046721000000024,
    0.03874204890000002,
    0.03486784401000002,
    0.03138105960900001,
    0.028242953648100012,
];
// CosineAnnealingLR(opt, T_max=5, eta_min=0.01)
const COSINE: [f64; 13] = [
    0.1,
    0.09140576474687263,
    0.06890576474687263,
    0.04109423525312736,
    0.018594235253127367,
    0.01,
    0.018594235253127367,
    0.04109423525312739,
    0.06890576474687267,
    0.09140576474687269,
    0.10000000000000006,
    0.09140576474687272,
    0.06890576474687268,
];
// LinearLR(opt, start_factor=0.25, end_factor=1.0, total_iters=4)
const LINEAR: [f64; 13] = [
    0.025,
    0.043750000000000004,
    0.06250000000000001,
    0.08125000000000002,
    0.10000000000000002,
    0.10000000000000002,
    0.10000000000000002,
    0.10000000000000002,
    0.10000000000000002,
    0.10000000000000002,
    0.10000000000000002,
    0.10000000000000002,
    0.10000000000000002,
];
// OneCycleLR(opt, max_lr=1.0, total_steps=10)
const ONE_CYCLE_COS: [f64; 11] = [
    0.040000000000000036,
    0.52,
    1.0,
    0.9504846320134737,
    0.8117456539497631,
    0.6112620219362893,
    0.38874197806371075,
    0.18825834605023697,
    0.049519367986526286,
    4e-06,
    0.04951936798652623,
];
const ONE_CYCLE_COS_MOM: [f64; 11] = [
    0.95,
    0.8999999999999999,
    0.85,
    0.854951556604879,
    0.8688255099070633,
    0.8888739533021842,
    0.9111260466978157,
    0.9311744900929366,
    0.945048443395121,
    0.95,
    0.945048443395121,
];
// OneCycleLR(opt, max_lr=0.5, total_steps=12, pct_start=0.25, anneal_strategy='linear', three_phase=True, div_factor=10, final_div_factor=100)
const ONE_CYCLE_LINEAR_3: [f64; 13] = [
    0.05,
    0.275,
    0.5,
    0.275,
    0.04999999999999999,
    0.042928571428571434,
    0.03585714285714286,
    0.02878571428571429,
    0.021714285714285717,
    0.014642857142857145,
    0.007571428571428576,
    0.0005000000000000004,
    -0.006571428571428568,
];
const ONE_CYCLE_LINEAR_3_MOM: [f64; 13] =
    [0.95, 0.8999999999999999, 0.85, 0.8999999999999999, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95];
// ReduceLROnPlateau(SGD([p], lr=0.1), {'mode': 'min', 'factor': 0.5, 'patience': 2, 'threshold': 0.05, 'cooldown': 1, 'min_lr': 0.02}) stepped with PLATEAU_MIN_METRICS
const PLATEAU_MIN_METRICS: [f64; 24] = [
    1.0, 0.95, 0.91, 0.9, 0.89, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
    0.5, 0.5,
];
const PLATEAU_MIN: [f64; 24] = [
    0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025, 0.02, 0.02, 0.02, 0.02,
    0.02, 0.02, 0.02, 0.02,
];
const PLATEAU_MIN_BAD: [u64; 24] = [0, 1, 0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0, 0, 1, 2];
const PLATEAU_MIN_COOLDOWN: [u64; 24] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0];
// ReduceLROnPlateau(SGD([p], lr=0.1), {'mode': 'max', 'factor': 0.1, 'patience': 1, 'threshold': 0.02, 'threshold_mode': 'abs'}) stepped with PLATEAU_MAX_METRICS
const PLATEAU_MAX_METRICS: [f64; 10] = [0.1, 0.2, 0.2, 0.25, 0.3, 0.3, 0.3, 0.3, 0.31, 0.3];
const PLATEAU_MAX: [f64; 10] = [
    0.1,
    0.1,
    0.1,
    0.1,
    0.1,
    0.1,
    0.010000000000000002,
    0.010000000000000002,
    0.0010000000000000002,
    0.0010000000000000002,
];
const PLATEAU_MAX_BAD: [u64; 10] = [0, 0, 1, 0, 0, 1, 0, 1, 0, 1];
const PLATEAU_MAX_COOLDOWN: [u64; 10] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
// ConstantLR(opt, factor=0.5, total_iters=3)
const CONSTANT: [f64; 13] = [0.05, 0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1];
// PolynomialLR(opt, total_iters=6, power=2.0)
const POLYNOMIAL: [f64; 13] = [
    0.1,
    0.06944444444444446,
    0.04444444444444447,
    0.02500000000000001,
    0.011111111111111117,
    0.0027777777777777775,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
];
// CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.01)
const WARM_RESTARTS: [f64; 13] = [
    0.1,
    0.0775,
    0.032500000000000015,
    0.1,
    0.09397114317029975,
    0.0775,
    0.05500000000000001,
    0.032500000000000015,
    0.01602885682970026,
    0.1,
    0.09846666218300808,
    0.09397114317029975,
    0.08681980515339464,
];
// SequentialLR(opt, [LinearLR(opt, start_factor=0.1, total_iters=3), CosineAnnealingLR(opt, T_max=6, eta_min=0.001)], milestones=[3])
const WARMUP_COSINE: [f64; 13] = [
    0.010000000000000002,
    0.04,
    0.07,
    0.1,
    0.09336825748732973,
    0.07525000000000001,
    0.0505,
    0.025750000000000012,
    0.007631742512670284,
    0.001,
    0.007631742512670284,
    0.025750000000000002,
    0.05050000000000004,
];
// SequentialLR(opt, [ConstantLR(opt, factor=0.5, total_iters=2), ExponentialLR(opt, gamma=0.9), StepLR(opt, step_size=2, gamma=0.5)], milestones=[2, 5])
const SEQUENTIAL_3: [f64; 13] =
    [0.05, 0.05, 0.1, 0.09000000000000001, 0.08100000000000002, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125];
