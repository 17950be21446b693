//! CyclicLR, LambdaLR and MultiplicativeLR against torch 2.13 (constants
//! from `torch.optim.lr_scheduler` with SGD(lr 0.1, momentum 0.9) or
//! Adam(lr 0.1): the lr, and the momentum / beta1, after construction and
//! after each of 13 steps).
use super::*;
use crate::optim::{Adam, AdamOptions, Optimizer, Sgd, SgdOptions};
use tch::{Kind, Tensor};

fn param() -> Vec<Tensor> {
    vec![Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true)]
}

fn sgd() -> Sgd {
    Sgd::new(param(), SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap()
}

fn run(o: &mut dyn Optimizer, s: &mut dyn LrScheduler, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut lrs = vec![o.lr()];
    let mut moms = vec![o.param_groups()[0].momentum];
    for _ in 1..n {
        s.step(o, None).unwrap();
        assert_eq!(s.last_lr(), vec![o.lr()]);
        lrs.push(o.lr());
        moms.push(o.param_groups()[0].momentum);
    }
    (lrs, moms)
}

fn same(name: &str, got: &[f64], want: &[f64]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-15 * w.abs().max(1.0), "{name} step {i}: got {got:?}\nwant {want:?}");
    }
    assert_eq!(got.len(), want.len());
}

#[test]
fn cyclic_lr_matches_torch() {
    let mut o = sgd();
    let mut s = CyclicLr::new(&mut o, CyclicLrOptions { step_size_up: 3, ..CyclicLrOptions::new(0.01, 0.1) }).unwrap();
    let (lrs, moms) = run(&mut o, &mut s, 14);
    same("triangular", &lrs, &CYCLIC_TRIANGULAR);
    same("triangular momentum", &moms, &CYCLIC_TRIANGULAR_MOMENTUM);
    let mut o = sgd();
    let opts = CyclicLrOptions {
        step_size_up: 2,
        step_size_down: Some(3),
        mode: CyclicMode::Triangular2,
        ..CyclicLrOptions::new(0.01, 0.1)
    };
    let mut s = CyclicLr::new(&mut o, opts).unwrap();
    let (lrs, moms) = run(&mut o, &mut s, 14);
    same("triangular2", &lrs, &CYCLIC_TRIANGULAR2);
    same("triangular2 momentum", &moms, &CYCLIC_TRIANGULAR2_MOMENTUM);
    let mut o = Adam::new(param(), AdamOptions { lr: 0.1, ..Default::default() }).unwrap();
    let opts = CyclicLrOptions {
        step_size_up: 4,
        step_size_down: Some(2),
        mode: CyclicMode::ExpRange,
        gamma: 0.9,
        ..CyclicLrOptions::new(0.02, 0.2)
    };
    let mut s = CyclicLr::new(&mut o, opts).unwrap();
    let (lrs, betas) = run(&mut o, &mut s, 14);
    same("exp_range", &lrs, &CYCLIC_EXP_RANGE_ADAM);
    same("exp_range beta1", &betas, &CYCLIC_EXP_RANGE_ADAM_BETA1);
    // A state dict round trip continues the same cycle.
    let dict = s.state_dict();
    let mut o2 = Adam::new(param(), AdamOptions { lr: 0.1, ..Default::default() }).unwrap();
    let mut s2 = CyclicLr::new(&mut o2, CyclicLrOptions::new(0.5, 0.6)).unwrap();
    s2.load_state_dict(&dict).unwrap();
    s.step(&mut o, None).unwrap();
    s2.step(&mut o2, None).unwrap();
    assert_eq!(o.lr(), o2.lr());
    // An earlier scheduler's initial_lr stays (torch's setdefault).
    let mut o = sgd();
    let _first = ExponentialLr::new(&mut o, 0.5).unwrap();
    let _cyc = CyclicLr::new(&mut o, CyclicLrOptions::new(0.01, 0.1)).unwrap();
    assert_eq!(o.param_groups()[0].initial_lr, Some(0.1));
    // Bad options.
    let bad = CyclicLrOptions { step_size_up: 0, ..CyclicLrOptions::new(0.01, 0.1) };
    assert!(CyclicLr::new(&mut sgd(), bad).is_err());
    let bad = CyclicLrOptions { max_lr: f64::NAN, ..CyclicLrOptions::new(0.01, 0.1) };
    assert!(CyclicLr::new(&mut sgd(), bad).is_err());
}

#[test]
fn lambda_and_multiplicative_match_torch() {
    let mut o = sgd();
    let f: LrLambda = Box::new(|e, _| Ok(0.95f64.powf(e as f64) / (1.0 + e as f64)));
    let mut s = LambdaLr::new(&mut o, f).unwrap();
    same("lambda", &run(&mut o, &mut s, 14).0, &LAMBDA);
    assert_eq!(s.name(), "lambda_lr");
    let mut o = sgd();
    let f: LrLambda = Box::new(|e, _| Ok(if e % 2 == 1 { 0.9 } else { 0.8 }));
    let mut s = LambdaLr::multiplicative(&mut o, f).unwrap();
    same("multiplicative", &run(&mut o, &mut s, 14).0, &MULTIPLICATIVE);
    // A factor that is not finite, or a failing function, changes nothing.
    let mut o = sgd();
    let f: LrLambda = Box::new(|e, _| {
        if e < 2 {
            Ok(1.0)
        } else if e == 2 {
            Ok(f64::NAN)
        } else {
            Err(crate::error::Error::invalid("host failed"))
        }
    });
    let mut s = LambdaLr::new(&mut o, f).unwrap();
    s.step(&mut o, None).unwrap();
    assert!(s.step(&mut o, None).unwrap_err().message.contains("NaN"));
    assert_eq!((o.lr(), s.state_dict()[0].1), (0.1, 1.0));
}

const CYCLIC_TRIANGULAR: [f64; 14] = [
    0.01,
    0.040000000000000015,
    0.06999999999999999,
    0.1,
    0.07000000000000003,
    0.03999999999999998,
    0.01,
    0.040000000000000056,
    0.06999999999999995,
    0.1,
    0.06999999999999995,
    0.040000000000000056,
    0.01,
    0.03999999999999998,
];
const CYCLIC_TRIANGULAR_MOMENTUM: [f64; 14] = [
    0.9,
    0.8666666666666667,
    0.8333333333333334,
    0.8,
    0.8333333333333334,
    0.8666666666666667,
    0.9,
    0.8666666666666666,
    0.8333333333333335,
    0.8,
    0.8333333333333335,
    0.8666666666666666,
    0.9,
    0.8666666666666667,
];
const CYCLIC_TRIANGULAR2: [f64; 14] = [
    0.01,
    0.055,
    0.09999999999999999,
    0.06999999999999999,
    0.039999999999999994,
    0.01,
    0.03250000000000002,
    0.055,
    0.039999999999999994,
    0.025000000000000015,
    0.01,
    0.021250000000000012,
    0.0325,
    0.024999999999999998,
];
const CYCLIC_TRIANGULAR2_MOMENTUM: [f64; 14] = [
    0.9,
    0.8500000000000001,
    0.8,
    0.8333333333333334,
    0.8666666666666667,
    0.9,
    0.875,
    0.8500000000000001,
    0.8666666666666667,
    0.8833333333333333,
    0.9,
    0.8875000000000001,
    0.875,
    0.8833333333333334,
];
const CYCLIC_EXP_RANGE_ADAM: [f64; 14] = [
    0.02,
    0.060500000000000026,
    0.09290000000000001,
    0.11841500000000002,
    0.138098,
    0.07314409999999996,
    0.02,
    0.04152336050000005,
    0.05874204889999998,
    0.07230176601500002,
    0.08276211921799997,
    0.04824295364810005,
    0.02,
    0.03143839622748049,
];
const CYCLIC_EXP_RANGE_ADAM_BETA1: [f64; 14] = [
    0.9,
    0.8775000000000001,
    0.8595,
    0.845325,
    0.8343900000000001,
    0.8704755000000001,
    0.9,
    0.8880425775,
    0.8784766395,
    0.8709434633250001,
    0.86513215599,
    0.8843094701955,
    0.9,
    0.8936453354291776,
];
const LAMBDA: [f64; 14] = [
    0.1,
    0.0475,
    0.030083333333333337,
    0.021434375,
    0.016290125,
    0.01289634895833333,
    0.010501312723214284,
    0.008729216201171872,
    0.007371338125434026,
    0.006302494097246091,
    0.005443063083985261,
    0.004740000768970498,
    0.004156616058943359,
    0.0036667291662821778,
];
const MULTIPLICATIVE: [f64; 14] = [
    0.1,
    0.09000000000000001,
    0.07200000000000001,
    0.06480000000000001,
    0.05184000000000001,
    0.04665600000000001,
    0.03732480000000001,
    0.03359232000000001,
    0.02687385600000001,
    0.024186470400000007,
    0.01934917632000001,
    0.01741425868800001,
    0.013931406950400009,
    0.012538266255360008,
];
