//! Each param group keeps its own constants: a group whose `betas[1]`,
//! `eps`, flags, ... differ from the optimizer's defaults steps exactly as
//! an optimizer built with those options (whose update rules are checked
//! against torch.optim elsewhere), the other group is unaffected, and a
//! state dict restores every group's values.
use super::group_hyper::{get, set};
use super::test_util::Model;
use super::*;
use crate::error::{ErrorCode, Result};
use tch::Kind;

type Make = Box<dyn Fn(Vec<tch::Tensor>) -> Result<Box<dyn Optimizer>>>;

fn make<O: Optimizer + 'static>(f: impl Fn(Vec<tch::Tensor>) -> Result<O> + 'static) -> Make {
    Box::new(move |p| Ok(Box::new(f(p)?) as Box<dyn Optimizer>))
}

/// `defaults` over one model and, in group 1, another model with
/// `settings`; `own` (an optimizer built with those settings) over a third
/// model; `defaults` alone over a fourth. Both groups must follow their
/// twins bit for bit, and a state dict must carry group 1's values.
fn check_group(defaults: Make, own: Make, settings: &[(&str, f64)]) {
    let (m0, m1, twin1, twin0) =
        (Model::new(Kind::Float), Model::new(Kind::Float), Model::new(Kind::Float), Model::new(Kind::Float));
    let mut opt = defaults(m0.params()).unwrap();
    opt.add_param_group(m1.params(), None).unwrap();
    for (k, v) in settings {
        set(opt.as_mut(), 1, k, *v).unwrap_or_else(|e| panic!("{} {k}: {}", opt.name(), e.message));
    }
    let mut alone1 = own(twin1.params()).unwrap();
    let mut alone0 = defaults(twin0.params()).unwrap();
    for step in 0..6 {
        m0.backward();
        m1.backward();
        opt.step().unwrap();
        opt.zero_grad();
        twin1.train_step(alone1.as_mut());
        twin0.train_step(alone0.as_mut());
        assert_eq!(m1.w(), twin1.w(), "{} group 1, step {step}", opt.name());
        assert_eq!(m0.w(), twin0.w(), "{} group 0, step {step}", opt.name());
    }
    let dict = opt.state_dict().unwrap();
    let mut back = defaults(m0.params()).unwrap();
    back.add_param_group(m1.params(), None).unwrap();
    back.load_state_dict(&dict).unwrap();
    for (k, v) in settings {
        assert_eq!(get(back.as_ref(), 1, k).unwrap(), *v, "{} {k} after a load", opt.name());
        assert_eq!(get(back.as_ref(), 0, k).unwrap(), get(alone0.as_ref(), 0, k).unwrap());
    }
    m1.backward();
    back.step().unwrap();
    twin1.train_step(alone1.as_mut());
    assert_eq!(m1.w(), twin1.w(), "{} group 1 after a load", opt.name());
}

#[test]
fn sgd_groups() {
    let base = SgdOptions { lr: 0.05, momentum: 0.5, ..Default::default() };
    let own =
        SgdOptions { lr: 0.05, momentum: 0.9, dampening: 0.0, nesterov: true, maximize: false, weight_decay: 0.1 };
    let sets = [("momentum", 0.9), ("nesterov", 1.0), ("weight_decay", 0.1)];
    check_group(make(move |p| Sgd::new(p, base)), make(move |p| Sgd::new(p, own)), &sets);
    let own = SgdOptions { dampening: 0.3, maximize: true, ..base };
    let sets = [("dampening", 0.3), ("maximize", 1.0)];
    check_group(make(move |p| Sgd::new(p, base)), make(move |p| Sgd::new(p, own)), &sets);
}

#[test]
fn rmsprop_groups() {
    let base = RmsPropOptions { lr: 0.01, ..Default::default() };
    let own = RmsPropOptions { alpha: 0.9, eps: 1e-4, centered: true, momentum: 0.5, ..base };
    let sets = [("alpha", 0.9), ("eps", 1e-4), ("centered", 1.0), ("momentum", 0.5)];
    check_group(make(move |p| RmsProp::new(p, base)), make(move |p| RmsProp::new(p, own)), &sets);
}

#[test]
fn adagrad_groups() {
    let base = AdagradOptions { lr: 0.1, ..Default::default() };
    let own = AdagradOptions { lr_decay: 0.05, eps: 1e-3, maximize: true, initial_accumulator_value: 0.2, ..base };
    let sets = [("lr_decay", 0.05), ("eps", 1e-3), ("maximize", 1.0), ("initial_accumulator_value", 0.2)];
    check_group(make(move |p| Adagrad::new(p, base)), make(move |p| Adagrad::new(p, own)), &sets);
}

#[test]
fn adam_family_groups() {
    let base = AdamOptions { lr: 0.05, ..Default::default() };
    let own = AdamOptions { betas: (0.8, 0.95), eps: 1e-6, amsgrad: true, weight_decay: 0.1, ..base };
    let sets = [("beta1", 0.8), ("beta2", 0.95), ("eps", 1e-6), ("amsgrad", 1.0), ("weight_decay", 0.1)];
    check_group(make(move |p| Adam::new(p, base)), make(move |p| Adam::new(p, own)), &sets);
    check_group(make(move |p| AdamW::new(p, base)), make(move |p| AdamW::new(p, own)), &sets);

    let base = AdamaxOptions { lr: 0.05, ..Default::default() };
    let own = AdamaxOptions { betas: (0.9, 0.9), eps: 1e-3, maximize: true, ..base };
    let sets = [("betas.1", 0.9), ("eps", 1e-3), ("maximize", 1.0)];
    check_group(make(move |p| Adamax::new(p, base)), make(move |p| Adamax::new(p, own)), &sets);

    let base = NAdamOptions { lr: 0.05, weight_decay: 0.1, ..Default::default() };
    let own = NAdamOptions { betas: (0.9, 0.99), momentum_decay: 0.1, decoupled_weight_decay: true, ..base };
    let sets = [("betas.1", 0.99), ("momentum_decay", 0.1), ("decoupled_weight_decay", 1.0)];
    check_group(make(move |p| NAdam::new(p, base)), make(move |p| NAdam::new(p, own)), &sets);

    let base = RAdamOptions { lr: 0.05, weight_decay: 0.1, ..Default::default() };
    let own = RAdamOptions { betas: (0.9, 0.5), eps: 1e-5, decoupled_weight_decay: true, ..base };
    let sets = [("beta2", 0.5), ("eps", 1e-5), ("decoupled_weight_decay", 1.0)];
    check_group(make(move |p| RAdam::new(p, base)), make(move |p| RAdam::new(p, own)), &sets);
}

#[test]
fn group_values_are_checked() {
    let m = Model::new(Kind::Float);
    let mut adam = Adam::new(m.params(), AdamOptions::default()).unwrap();
    let code = |r: Result<()>| r.unwrap_err().code;
    assert_eq!(code(set(&mut adam, 0, "beta2", 1.0)), ErrorCode::InvalidArgument);
    assert_eq!(code(set(&mut adam, 0, "eps", -1.0)), ErrorCode::InvalidArgument);
    assert_eq!(code(set(&mut adam, 0, "eps", f64::NAN)), ErrorCode::InvalidArgument);
    assert_eq!(code(set(&mut adam, 0, "amsgrad", 0.5)), ErrorCode::InvalidArgument);
    // AdamW is a kind of its own: Adam's group cannot turn into it.
    let e = set(&mut adam, 0, "decoupled_weight_decay", 1.0).unwrap_err();
    assert!(e.message.contains("\"eps\""), "{}", e.message);
    assert_eq!(code(set(&mut adam, 0, "alpha", 0.5)), ErrorCode::InvalidArgument);
    // Nothing changed on a refusal.
    assert_eq!(get(&adam, 0, "betas.1").unwrap(), 0.999);
    assert_eq!(get(&adam, 0, "eps").unwrap(), 1e-8);
    assert_eq!(get(&adam, 0, "amsgrad").unwrap(), 0.0);

    // A state dict whose group holds a value torch would refuse.
    let mut dict = adam.state_dict().unwrap();
    for (k, t) in dict.iter_mut() {
        if k == "param_groups.0.eps" {
            *t = tch::Tensor::from(-1.0f64);
        }
    }
    let e = adam.load_state_dict(&dict).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("group 0"), "{}", e.message);
    // An AdamW state refused by Adam.
    let w = AdamW::new(m.params(), AdamOptions::default()).unwrap();
    let e = adam.load_state_dict(&w.state_dict().unwrap()).unwrap_err();
    assert!(e.message.contains("decoupled_weight_decay"), "{}", e.message);

    // A cycling scheduler may write beta1 >= 1 (torch's OneCycleLR and
    // CyclicLR take any max_momentum): the state still reads back, and the
    // group's other values can still be set.
    let mut adam = Adam::new(m.params(), AdamOptions::default()).unwrap();
    adam.param_groups_mut()[0].momentum = 1.0;
    set(&mut adam, 0, "eps", 1e-6).unwrap();
    assert_eq!(get(&adam, 0, "beta1").unwrap(), 1.0);
    let dict = adam.state_dict().unwrap();
    let mut back = Adam::new(m.params(), AdamOptions::default()).unwrap();
    back.load_state_dict(&dict).unwrap();
    assert_eq!((get(&back, 0, "beta1").unwrap(), get(&back, 0, "eps").unwrap()), (1.0, 1e-6));
    assert_eq!(code(set(&mut back, 0, "beta1", 1.0)), ErrorCode::InvalidArgument);

    // SGD: Nesterov's needs are the constructor's; a group may drop its momentum.
    let nesterov = SgdOptions { lr: 0.1, momentum: 0.9, nesterov: true, ..Default::default() };
    let mut sgd = Sgd::new(m.params(), nesterov).unwrap();
    set(&mut sgd, 0, "momentum", 0.0).unwrap();
    assert!(Sgd::new(m.params(), SgdOptions { momentum: 0.0, ..nesterov }).is_err());
}
