//! Param groups appended after a scheduler was built (BackboneFinetuning's)
//! against torch 2.13: SGD(lr 0.1), the scheduler, one step, then
//! `add_param_group({"params": [q], "lr": 0.05})` and further steps; the
//! appended group's lrs below are torch's `repr`s. Where torch's step
//! fails (its `zip(..., strict=True)`), fulmen's does too.
use super::tests::opt;
use super::*;
use crate::optim::Sgd;
use tch::{Kind, Tensor};

/// A scheduler made by `make`, stepped once, then a group (lr 0.05)
/// appended: the appended group's lr after each of `want.len()` steps,
/// and the error of the step after them, if torch fails there.
fn appended(make: impl Fn(&mut Sgd) -> Result<Box<dyn LrScheduler>>, want: &[f64], fails_next: bool) {
    let mut o = opt();
    let mut s = make(&mut o).unwrap();
    s.step(&mut o, None).unwrap();
    let q = Tensor::zeros([1], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    o.add_param_group(vec![q], Some(0.05)).unwrap();
    for (i, w) in want.iter().enumerate() {
        s.step(&mut o, None).unwrap();
        assert_eq!(o.param_groups()[1].lr, *w, "{} step {i}", s.name());
        assert_eq!(s.last_lr().len(), 2);
    }
    if !fails_next {
        // Its state loads into the scheduler a resumed fit builds on the
        // construction's one group.
        let state = s.state_dict();
        let mut fresh = opt();
        let mut again = make(&mut fresh).unwrap();
        again.load_state_dict(&state).unwrap();
        assert_eq!(again.last_lr(), s.last_lr(), "{}", s.name());
    }
    if fails_next {
        let before: Vec<f64> = o.param_groups().iter().map(|g| g.lr).collect();
        let e = s.step(&mut o, None).unwrap_err();
        assert!(e.message.contains("param group"), "{}", e.message);
        assert_eq!(o.param_groups().iter().map(|g| g.lr).collect::<Vec<_>>(), before, "a failed step changes nothing");
    }
}

#[test]
fn closed_forms_move_an_appended_group_as_torch() {
    appended(|o| Ok(Box::new(StepLr::new(o, 2, 0.5)?)), &[0.025, 0.025, 0.0125], false);
    appended(
        |o| Ok(Box::new(MultiStepLr::new(o, &[2, 3, 3], 0.1)?)),
        &[0.005000000000000001, 5.000000000000002e-05, 5.000000000000002e-05],
        false,
    );
    appended(|o| Ok(Box::new(ExponentialLr::new(o, 0.9)?)), &[0.045000000000000005, 0.04050000000000001], false);
    appended(|o| Ok(Box::new(LinearLr::new(o, 0.5, 1.0, 4)?)), &[0.06, 0.07, 0.08, 0.08], false);
    appended(
        |o| Ok(Box::new(PolynomialLr::new(o, 4, 2.0)?)),
        &[0.022222222222222223, 0.005555555555555556, 0.0],
        false,
    );
    appended(|o| Ok(Box::new(ConstantLr::new(o, 0.5, 2)?)), &[0.1, 0.1], false);
    // CosineAnnealingLR moves it, but fails at the restart (step 4).
    appended(|o| Ok(Box::new(CosineAnnealingLr::new(o, 3, 0.01)?)), &[0.023333333333333338, 0.01], true);
    // A ChainedScheduler's parts compose on it.
    appended(
        |o| {
            let parts: Vec<Box<dyn LrScheduler>> =
                vec![Box::new(LinearLr::new(o, 0.5, 1.0, 2)?), Box::new(ExponentialLr::new(o, 0.9)?)];
            Ok(Box::new(ChainedLr::new(o, parts)?))
        },
        &[0.06, 0.054, 0.0486],
        false,
    );
}

#[test]
fn kinds_torch_cannot_step_refuse_an_appended_group() {
    appended(|o| Ok(Box::new(CosineAnnealingWarmRestarts::new(o, 2, 1, 0.0)?)), &[], true);
    appended(|o| Ok(Box::new(LambdaLr::new(o, Box::new(|e, _| Ok(0.9f64.powi(e as i32))))?)), &[], true);
    appended(|o| Ok(Box::new(LambdaLr::multiplicative(o, Box::new(|_, _| Ok(0.9)))?)), &[], true);
    appended(|o| Ok(Box::new(CyclicLr::new(o, CyclicLrOptions::new(0.01, 0.1))?)), &[], true);
    appended(|o| Ok(Box::new(OneCycleLr::new(o, OneCycleOptions::new(1.0, 20))?)), &[], true);
    // SequentialLR: its first part moves the group; the jump at the
    // milestone (3) fails.
    appended(
        |o| {
            let parts: Vec<Box<dyn LrScheduler>> =
                vec![Box::new(LinearLr::new(o, 0.5, 1.0, 2)?), Box::new(ExponentialLr::new(o, 0.9)?)];
            Ok(Box::new(SequentialLr::new(o, parts, vec![3])?))
        },
        &[0.06666666666666667],
        true,
    );
}
