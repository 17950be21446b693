//! ChainedScheduler against torch.optim.lr_scheduler (constants at the
//! end, from Python torch 2.13.0: SGD lr 0.1 momentum 0.9, the lr after
//! construction and after each of 12 steps).
use super::tests::{opt, sequence};
use super::*;
use crate::optim::{OneCycleOptions, Optimizer};

type Part = Box<dyn LrScheduler>;

fn chain(o: &mut dyn Optimizer, parts: Vec<Part>) -> Result<Box<dyn LrScheduler>> {
    Ok(Box::new(ChainedLr::new(o, parts)?))
}

/// The chain's lrs equal torch's to the bit, and its state round trips: a
/// fresh chain loaded from the state of one 4 steps in, on an optimizer
/// whose lrs are restored as an optimizer state restores them, goes on
/// identically.
fn check_chain(name: &str, make: impl Fn(&mut dyn Optimizer) -> Result<Box<dyn LrScheduler>>, want: &[f64]) {
    let mut o = opt();
    let mut s = make(&mut o).unwrap();
    let (lrs, _) = sequence(&mut o, s.as_mut(), want.len());
    assert_eq!(lrs, want, "{name}: the same operations as torch's, so the same bits");
    let mut o1 = opt();
    let mut s1 = make(&mut o1).unwrap();
    for _ in 0..4 {
        s1.step(&mut o1, None).unwrap();
    }
    let dict = s1.state_dict();
    let mut o2 = opt();
    let mut s2 = make(&mut o2).unwrap();
    s2.load_state_dict(&dict).unwrap();
    assert_eq!(s2.state_dict(), dict, "{name}");
    for (g2, g1) in o2.param_groups_mut().iter_mut().zip(o1.param_groups()) {
        (g2.lr, g2.momentum) = (g1.lr, g1.momentum);
    }
    for _ in 0..5 {
        s1.step(&mut o1, None).unwrap();
        s2.step(&mut o2, None).unwrap();
        assert_eq!(o1.lr(), o2.lr(), "{name}");
    }
}

#[test]
fn chains_match_torch() {
    check_chain(
        "constant_exponential",
        |o| {
            let parts: Vec<Part> = vec![Box::new(ConstantLr::new(o, 0.5, 3)?), Box::new(ExponentialLr::new(o, 0.9)?)];
            chain(o, parts)
        },
        &CHAINED_CONSTANT_EXP,
    );
    check_chain(
        "linear_cosine",
        |o| {
            let parts: Vec<Part> =
                vec![Box::new(LinearLr::new(o, 0.25, 1.0, 4)?), Box::new(CosineAnnealingLr::new(o, 5, 0.01)?)];
            chain(o, parts)
        },
        &CHAINED_LINEAR_COSINE,
    );
    check_chain(
        "step_multi_poly",
        |o| {
            let parts: Vec<Part> = vec![
                Box::new(StepLr::new(o, 3, 0.5)?),
                Box::new(MultiStepLr::new(o, &[2, 5, 5], 0.1)?),
                Box::new(PolynomialLr::new(o, 6, 2.0)?),
            ];
            chain(o, parts)
        },
        &CHAINED_STEP_MULTI_POLY,
    );
    check_chain(
        "lambda_mult_restarts",
        |o| {
            let parts: Vec<Part> = vec![
                Box::new(LambdaLr::new(o, Box::new(|e, _| Ok(1.0 / (e as f64 + 1.0))))?),
                Box::new(LambdaLr::multiplicative(o, Box::new(|_, _| Ok(0.95)))?),
                Box::new(CosineAnnealingWarmRestarts::new(o, 3, 2, 0.01)?),
                Box::new(ConstantLr::new(o, 0.5, 2)?),
            ];
            chain(o, parts)
        },
        &CHAINED_LAMBDA_MULT_RESTARTS,
    );
}

#[test]
fn an_absolute_scheduler_overwrites_the_chain_and_cycles_momentum() {
    let make = |o: &mut dyn Optimizer| -> Result<Box<dyn LrScheduler>> {
        let parts: Vec<Part> =
            vec![Box::new(ExponentialLr::new(o, 0.9)?), Box::new(OneCycleLr::new(o, OneCycleOptions::new(1.0, 20))?)];
        chain(o, parts)
    };
    check_chain("exponential_one_cycle", make, &CHAINED_EXP_ONE_CYCLE);
    let mut o = opt();
    let mut s = make(&mut o).unwrap();
    let (_, moms) = sequence(&mut o, s.as_mut(), CHAINED_EXP_ONE_CYCLE_MOMENTUM.len());
    for (g, w) in moms.iter().zip(&CHAINED_EXP_ONE_CYCLE_MOMENTUM) {
        assert!((g - w).abs() < 1e-12, "{moms:?}");
    }
}

#[test]
fn chains_refuse_what_torch_refuses() {
    let mut o = opt();
    assert!(ChainedLr::new(&mut o, vec![]).is_err(), "no scheduler");
    let plateau: Part = Box::new(ReduceLrOnPlateau::new(&mut o, PlateauOptions::default()).unwrap());
    let e = ChainedLr::new(&mut o, vec![plateau]).err().unwrap();
    assert!(e.message.contains("ReduceLROnPlateau"), "{}", e.message);
    // A part that has stepped already.
    let mut stepped = StepLr::new(&mut o, 2, 0.5).unwrap();
    stepped.step(&mut o, None).unwrap();
    let e = ChainedLr::new(&mut o, vec![Box::new(stepped)]).err().unwrap();
    assert!(e.message.contains("not stepped"), "{}", e.message);
    // A SequentialLR inside: refused, naming it.
    let (a, b): (Part, Part) =
        (Box::new(ConstantLr::new(&mut o, 0.5, 2).unwrap()), Box::new(ExponentialLr::new(&mut o, 0.9).unwrap()));
    let seq: Part = Box::new(SequentialLr::new(&mut o, vec![a, b], vec![2]).unwrap());
    let e = ChainedLr::new(&mut o, vec![seq]).err().unwrap();
    assert!(e.message.contains("sequential_lr cannot be part of a ChainedScheduler"), "{}", e.message);
    let too_many: Vec<Part> =
        (0..=MAX_CHAINED).map(|_| Box::new(ExponentialLr::new(&mut o, 0.9).unwrap()) as Part).collect();
    assert!(ChainedLr::new(&mut o, too_many).is_err());
}

#[test]
fn a_chain_state_from_another_chain_is_refused_whole() {
    let build = |o: &mut dyn Optimizer| {
        let parts: Vec<Part> =
            vec![Box::new(ConstantLr::new(o, 0.5, 3).unwrap()), Box::new(ExponentialLr::new(o, 0.9).unwrap())];
        ChainedLr::new(o, parts).unwrap()
    };
    let mut o = opt();
    let mut s = build(&mut o);
    s.step(&mut o, None).unwrap();
    let before = s.state_dict();
    // Parts at different steps, a missing part, a wrong count: refused, nothing changed.
    let mut skewed = before.clone();
    for (k, v) in skewed.iter_mut() {
        if k == "schedulers.1.last_epoch" {
            *v = 5.0;
        }
    }
    assert!(s.load_state_dict(&skewed).is_err());
    let mut extra = before.clone();
    extra.push(("schedulers.2.last_epoch".into(), 1.0));
    assert!(s.load_state_dict(&extra).is_err());
    let mut count = before.clone();
    count[0].1 = 3.0;
    assert!(s.load_state_dict(&count).is_err());
    assert_eq!(s.state_dict(), before);
}

// ChainedScheduler([ConstantLR(opt, factor=0.5, total_iters=3), ExponentialLR(opt, gamma=0.9)])
const CHAINED_CONSTANT_EXP: [f64; 13] = [
    0.05,
    0.045000000000000005,
    0.04050000000000001,
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
// ChainedScheduler([LinearLR(opt, start_factor=0.25, end_factor=1.0, total_iters=4), CosineAnnealingLR(opt, T_max=5, eta_min=0.01)])
const CHAINED_LINEAR_COSINE: [f64; 13] = [
    0.025,
    0.04052716178007724,
    0.044657831676181675,
    0.03536660232039412,
    0.01926694609200657,
    0.01,
    0.018594235253127367,
    0.04109423525312739,
    0.06890576474687267,
    0.09140576474687269,
    0.10000000000000006,
    0.09140576474687272,
    0.06890576474687268,
];
// ChainedScheduler([StepLR(opt, step_size=3, gamma=0.5), MultiStepLR(opt, milestones=[2, 5, 5], gamma=0.1), PolynomialLR(opt, total_iters=6, power=2.0)])
const CHAINED_STEP_MULTI_POLY: [f64; 13] = [
    0.1,
    0.06944444444444446,
    0.004444444444444447,
    0.0012500000000000005,
    0.0005555555555555559,
    1.3888888888888892e-06,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
];
// ChainedScheduler([ExponentialLR(opt, gamma=0.9), OneCycleLR(opt, max_lr=1.0, total_steps=20)])
const CHAINED_EXP_ONE_CYCLE: [f64; 13] = [
    0.040000000000000036,
    0.1316718427000253,
    0.3716718427000253,
    0.6683281572999747,
    0.9083281572999747,
    1.0,
    0.9874640062350873,
    0.9504846320134737,
    0.89091617757105,
    0.8117456539497631,
    0.7169430017913008,
    0.6112620219362893,
    0.500002,
];
const CHAINED_EXP_ONE_CYCLE_MOMENTUM: [f64; 13] = [
    0.95,
    0.9404508497187474,
    0.9154508497187474,
    0.8845491502812526,
    0.8595491502812526,
    0.85,
    0.8512536043909088,
    0.854951556604879,
    0.8609084258765984,
    0.8688255099070633,
    0.878305813044122,
    0.8888739533021842,
    0.8999999999999999,
];
// ChainedScheduler([LambdaLR(opt, lambda e: 1 / (e + 1)), MultiplicativeLR(opt, lambda e: 0.95), CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.01), ConstantLR(opt, factor=0.5, total_iters=2)])
const CHAINED_LAMBDA_MULT_RESTARTS: [f64; 13] = [
    0.05,
    0.0775,
    0.06500000000000003,
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
