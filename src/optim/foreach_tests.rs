//! Foreach updates. On the CPU libtorch runs torch's `_multi_tensor_*` ops
//! tensor by tensor, so torch's `foreach=True` trajectories equal its
//! for-loop ones bit for bit (checked with `test_util`'s Python `run` for
//! the options below, f32 and f64); so must fulmen's foreach and for-loop
//! updates. Also: buckets by dtype across groups, torch's in-place Nesterov
//! gradients, the state entry and what is refused.
use super::test_util::Model;
use super::{
    Adagrad, AdagradOptions, Adam, AdamOptions, AdamW, Adamax, AdamaxOptions, Lbfgs, LbfgsOptions, Optimizer, RmsProp,
    RmsPropOptions, Sgd, SgdOptions,
};
use crate::error::ErrorCode;
use tch::{Kind, Tensor};

type Make = Box<dyn Fn(Vec<Tensor>) -> Box<dyn Optimizer>>;

fn configs() -> Vec<(&'static str, Make)> {
    vec![
        (
            "sgd nesterov",
            Box::new(|p| {
                let o = SgdOptions { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01, ..Default::default() };
                Box::new(Sgd::new(p, o).unwrap())
            }),
        ),
        (
            "sgd dampening maximize",
            Box::new(|p| {
                let o = SgdOptions { lr: 0.1, momentum: 0.9, dampening: 0.1, maximize: true, ..Default::default() };
                Box::new(Sgd::new(p, o).unwrap())
            }),
        ),
        (
            "sgd plain",
            Box::new(|p| {
                Box::new(Sgd::new(p, SgdOptions { lr: 0.1, weight_decay: 0.1, ..Default::default() }).unwrap())
            }),
        ),
        (
            "adam amsgrad",
            Box::new(|p| {
                let o = AdamOptions { lr: 0.1, amsgrad: true, weight_decay: 0.1, ..Default::default() };
                Box::new(Adam::new(p, o).unwrap())
            }),
        ),
        (
            "adam maximize",
            Box::new(|p| {
                Box::new(Adam::new(p, AdamOptions { lr: 0.1, maximize: true, ..Default::default() }).unwrap())
            }),
        ),
        (
            "adamw",
            Box::new(|p| {
                Box::new(AdamW::new(p, AdamOptions { lr: 0.1, weight_decay: 0.1, ..Default::default() }).unwrap())
            }),
        ),
        (
            "adagrad lr_decay",
            Box::new(|p| {
                let o = AdagradOptions {
                    lr: 0.1,
                    lr_decay: 0.01,
                    weight_decay: 0.1,
                    initial_accumulator_value: 0.1,
                    ..Default::default()
                };
                Box::new(Adagrad::new(p, o).unwrap())
            }),
        ),
        (
            "adagrad maximize",
            Box::new(|p| {
                Box::new(
                    Adagrad::new(p, AdagradOptions { lr: 0.1, eps: 1e-3, maximize: true, ..Default::default() })
                        .unwrap(),
                )
            }),
        ),
        (
            "adagrad plain",
            Box::new(|p| Box::new(Adagrad::new(p, AdagradOptions { lr: 0.1, ..Default::default() }).unwrap())),
        ),
        (
            "rmsprop centered momentum",
            Box::new(|p| {
                let o =
                    RmsPropOptions { lr: 0.01, momentum: 0.9, centered: true, weight_decay: 0.1, ..Default::default() };
                Box::new(RmsProp::new(p, o).unwrap())
            }),
        ),
        (
            "rmsprop maximize",
            Box::new(|p| {
                Box::new(RmsProp::new(p, RmsPropOptions { lr: 0.01, maximize: true, ..Default::default() }).unwrap())
            }),
        ),
        (
            "adamax weight decay",
            Box::new(|p| {
                let o = AdamaxOptions { lr: 0.1, weight_decay: 0.1, ..Default::default() };
                Box::new(Adamax::new(p, o).unwrap())
            }),
        ),
        (
            "adamax maximize",
            Box::new(|p| {
                Box::new(Adamax::new(p, AdamaxOptions { lr: 0.1, maximize: true, ..Default::default() }).unwrap())
            }),
        ),
        (
            "adamax plain",
            Box::new(|p| Box::new(Adamax::new(p, AdamaxOptions { lr: 0.1, ..Default::default() }).unwrap())),
        ),
    ]
}

fn run(make: &Make, kind: Kind, foreach: Option<bool>) -> (Vec<Vec<f64>>, Vec<String>) {
    let m = Model::new(kind);
    let mut opt = make(m.params());
    opt.set_foreach(foreach).unwrap();
    assert_eq!(opt.foreach(), foreach);
    let out = m.run(opt.as_mut(), 5);
    m.assert_v_untouched();
    let names = opt.state_dict().unwrap().into_iter().map(|(k, _)| k).filter(|k| !k.ends_with(".foreach")).collect();
    (out, names)
}

#[test]
fn foreach_updates_equal_the_for_loop_bit_for_bit() {
    for (name, make) in configs() {
        for kind in [Kind::Float, Kind::Double] {
            let (foreach, state) = run(&make, kind, Some(true));
            let (for_loop, loop_state) = run(&make, kind, Some(false));
            assert_eq!(foreach, for_loop, "{name} {kind:?}");
            assert_eq!(state, loop_state, "{name} {kind:?}: the same state entries");
            // The default on the CPU is the for-loop.
            assert_eq!(run(&make, kind, None).0, for_loop, "{name} {kind:?} default");
        }
    }
}

/// Three parameters in two groups, the first group mixing f32 and f64 (two
/// kernel calls): `steps` steps, returning every parameter's values.
fn mixed_run(make: &Make, foreach: bool, steps: usize) -> Vec<Vec<f64>> {
    let a = Tensor::from_slice(&[1.0f32, -2.0, 0.5]).set_requires_grad(true);
    let b = Tensor::from_slice(&[0.25f64, 3.0]).set_requires_grad(true);
    let c = Tensor::from_slice(&[-1.5f32, 0.75]).set_requires_grad(true);
    let mut opt = make(vec![a.shallow_clone(), b.shallow_clone()]);
    opt.add_param_group(vec![c.shallow_clone()], Some(0.05)).unwrap();
    opt.set_foreach(Some(foreach)).unwrap();
    let mut out = Vec::new();
    for _ in 0..steps {
        let loss = (&a * &a * 3.0).sum(Kind::Double)
            + (&b * &b * &b).sum(Kind::Double)
            + (&c * &a.slice(0, 0, 2, 1)).sum(Kind::Double);
        loss.backward();
        opt.step().unwrap();
        opt.zero_grad();
        out.push([&a, &b, &c].iter().flat_map(|t| super::test_util::values(t)).collect());
    }
    out
}

#[test]
fn foreach_buckets_by_dtype_within_each_group() {
    for (name, make) in configs() {
        assert_eq!(mixed_run(&make, true, 4), mixed_run(&make, false, 4), "{name}");
    }
}

#[test]
fn foreach_nesterov_adds_to_the_gradients_in_place_as_torch() {
    // torch's _multi_tensor_sgd: without maximize or weight decay, Nesterov's
    // `_foreach_add_(grads, bufs, alpha=momentum)` writes into the
    // gradients themselves; on the first step the buffer is the gradient.
    let m = Model::new(Kind::Double);
    let mut opt =
        Sgd::new(m.params(), SgdOptions { lr: 0.1, momentum: 0.9, nesterov: true, ..Default::default() }).unwrap();
    opt.set_foreach(Some(true)).unwrap();
    m.backward();
    let g = super::test_util::values(&m.w.grad());
    opt.step().unwrap();
    let after = super::test_util::values(&m.w.grad());
    let want: Vec<f64> = g.iter().map(|x| x + 0.9 * x).collect();
    assert_eq!(after, want);
}

#[test]
fn foreach_choice_is_saved_and_loaded() {
    let m = Model::new(Kind::Float);
    for choice in [Some(true), Some(false), None] {
        let mut a = Adam::new(m.params(), AdamOptions::default()).unwrap();
        a.set_foreach(choice).unwrap();
        let dict = a.state_dict().unwrap();
        let entry = dict.iter().find(|(k, _)| k == "param_groups.0.foreach").map(|(_, t)| t.double_value(&[]));
        assert_eq!(entry, choice.map(|on| if on { 1.0 } else { 0.0 }));
        let mut b = Adam::new(m.params(), AdamOptions::default()).unwrap();
        b.set_foreach(Some(true)).unwrap();
        b.load_state_dict(&dict).unwrap();
        assert_eq!(b.foreach(), choice, "as torch, a loaded state's choice replaces the optimizer's");
    }
}

#[test]
fn foreach_refusals() {
    let m = Model::new(Kind::Float);
    // LBFGS has no foreach updates (torch's neither).
    let mut r = Lbfgs::new(m.params(), LbfgsOptions::default()).unwrap();
    assert_eq!(r.set_foreach(Some(true)).unwrap_err().code, ErrorCode::Unsupported);
    r.set_foreach(Some(false)).unwrap();
    let mut dict = r.state_dict().unwrap();
    dict.push(("param_groups.0.foreach".into(), Tensor::from(1.0f64)));
    assert_eq!(r.load_state_dict(&dict).unwrap_err().code, ErrorCode::Format);
    // fused and foreach together, either way round.
    let mut s = Sgd::new(m.params(), SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    s.set_fused(true).unwrap();
    assert_eq!(s.set_foreach(Some(true)).unwrap_err().code, ErrorCode::InvalidArgument);
    s.set_foreach(Some(false)).unwrap();
    s.set_fused(false).unwrap();
    s.set_foreach(Some(true)).unwrap();
    assert_eq!(s.set_fused(true).unwrap_err().code, ErrorCode::InvalidArgument);
    assert!(!s.fused());
    let mut dict = s.state_dict().unwrap();
    dict.push(("param_groups.0.fused".into(), Tensor::from(1.0f64)));
    let err = s.load_state_dict(&dict).unwrap_err();
    assert!(err.code == ErrorCode::Format && err.message.contains("both"), "{err:?}");
    // A value other than 0 or 1, or groups that disagree.
    let mut two = Sgd::new(m.params(), SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    two.set_foreach(Some(true)).unwrap();
    let mut dict = two.state_dict().unwrap();
    for (k, t) in dict.iter_mut() {
        if k == "param_groups.0.foreach" {
            *t = Tensor::from(0.5f64);
        }
    }
    assert_eq!(two.load_state_dict(&dict).unwrap_err().code, ErrorCode::Format);
}
