//! SGD against torch.optim.SGD trajectories (see `test_util` for the Python
//! that produced the constants, torch 2.13.0).
use super::*;
use crate::error::ErrorCode;
use crate::optim::test_util::{check, check_round_trip, values, Model};
use crate::optim::{Adam, AdamOptions};
use tch::Kind;

fn sgd(opts: SgdOptions) -> impl Fn(Vec<Tensor>) -> Result<Sgd> {
    move |p| Sgd::new(p, opts)
}

fn o(lr: f64, momentum: f64) -> SgdOptions {
    SgdOptions { lr, momentum, ..Default::default() }
}

#[test]
fn matches_torch() {
    let n = check(sgd(o(0.1, 0.0)), &SGD_PLAIN, &SGD_PLAIN_F32);
    let n = n + check(sgd(o(0.1, 0.9)), &SGD_MOMENTUM, &SGD_MOMENTUM_F32);
    let damp = SgdOptions { dampening: 0.3, ..o(0.1, 0.9) };
    let n = n + check(sgd(damp), &SGD_DAMPENING, &SGD_DAMPENING_F32);
    let nesterov = SgdOptions { nesterov: true, ..o(0.1, 0.9) };
    let n = n + check(sgd(nesterov), &SGD_NESTEROV, &SGD_NESTEROV_F32);
    let wd = SgdOptions { weight_decay: 0.05, ..o(0.1, 0.9) };
    let n = n + check(sgd(wd), &SGD_WD, &SGD_WD_F32);
    let max = SgdOptions { maximize: true, ..o(0.01, 0.5) };
    let n = n + check(sgd(max), &SGD_MAXIMIZE, &SGD_MAXIMIZE_F32);
    eprintln!("sgd: {n} of 120 f32 values bit-identical to torch");
}

#[test]
fn defaults_are_torch() {
    let d = SgdOptions::default();
    assert_eq!((d.lr, d.momentum, d.dampening, d.weight_decay), (1e-3, 0.0, 0.0, 0.0));
    assert!(!d.nesterov && !d.maximize);
}

#[test]
fn validation() {
    let m = Model::new(Kind::Float);
    let bad = [
        o(-0.1, 0.0),
        o(f64::NAN, 0.0),
        o(0.1, -0.5),
        SgdOptions { weight_decay: -1.0, ..o(0.1, 0.0) },
        SgdOptions { nesterov: true, ..o(0.1, 0.0) },
        SgdOptions { nesterov: true, dampening: 0.1, ..o(0.1, 0.9) },
    ];
    for opts in bad {
        let e = Sgd::new(m.params(), opts).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{opts:?}");
    }
    let e = Sgd::new(m.params(), SgdOptions { nesterov: true, ..o(0.1, 0.0) }).unwrap_err();
    assert!(e.message.contains("Nesterov"), "{}", e.message);
    let e = Sgd::new(Vec::new(), o(0.1, 0.0)).unwrap_err();
    assert!(e.message.contains("empty parameter list"));
    let e = Sgd::new(vec![m.w.shallow_clone(), m.w.shallow_clone()], o(0.1, 0.0)).unwrap_err();
    assert!(e.message.contains("more than one"));
    let complex = Tensor::zeros([2], (Kind::ComplexFloat, tch::Device::Cpu));
    let e = Sgd::new(vec![complex], o(0.1, 0.0)).unwrap_err();
    assert_eq!(e.code, ErrorCode::DtypeMismatch);
}

#[test]
fn zero_grad_sets_grads_to_none() {
    let m = Model::new(Kind::Float);
    let mut opt = Sgd::new(m.params(), o(0.1, 0.0)).unwrap();
    m.backward();
    assert!(m.w.grad().defined());
    opt.zero_grad();
    assert!(!m.w.grad().defined());
    assert!(!m.v.grad().defined());
    // Stepping without grads changes nothing.
    let before = m.w();
    opt.step().unwrap();
    assert_eq!(m.w(), before);
}

#[test]
fn param_groups_and_lr() {
    let m = Model::new(Kind::Double);
    let extra = Tensor::from_slice(&[1.0f64, 2.0]).set_requires_grad(true);
    let mut opt = Sgd::new(vec![m.w.shallow_clone()], o(0.1, 0.0)).unwrap();
    opt.add_param_group(vec![extra.shallow_clone()], Some(0.5)).unwrap();
    assert!(opt.add_param_group(vec![m.w.shallow_clone()], None).is_err());
    assert!(opt.add_param_group(vec![m.v.shallow_clone()], Some(-1.0)).is_err());
    opt.add_param_group(vec![m.v.shallow_clone()], None).unwrap();
    assert_eq!(opt.param_groups().len(), 3);
    assert_eq!(opt.param_groups()[2].lr, 0.1);
    assert_eq!(opt.lr(), 0.1);
    (&extra * &extra).sum(Kind::Double).backward();
    opt.step().unwrap();
    // p - 0.5 * 2p = 0
    assert_eq!(values(&extra), vec![0.0, 0.0]);
    opt.set_lr(0.25);
    assert!(opt.param_groups().iter().all(|g| g.lr == 0.25));
}

#[test]
fn no_state_for_params_without_grad() {
    let m = Model::new(Kind::Float);
    let mut opt = Sgd::new(m.params(), o(0.1, 0.9)).unwrap();
    m.run(&mut opt, 2);
    let names: Vec<String> = opt.state_dict().unwrap().into_iter().map(|(k, _)| k).collect();
    assert!(names.contains(&"state.0.momentum_buffer".to_string()), "{names:?}");
    assert!(!names.iter().any(|k| k.starts_with("state.1.")), "{names:?}");
    assert!(names.contains(&"param_groups.0.lr".to_string()));
}

#[test]
fn state_dict_round_trip() {
    check_round_trip(sgd(SgdOptions { dampening: 0.2, weight_decay: 0.01, ..o(0.1, 0.9) }), 2);
    check_round_trip(sgd(SgdOptions { nesterov: true, ..o(0.1, 0.9) }), 3);
    check_round_trip(sgd(o(0.1, 0.0)), 1);
    check_round_trip(sgd(o(0.1, 0.9)), 0);
}

#[test]
fn load_restores_hyperparameters() {
    let m = Model::new(Kind::Float);
    let mut a = Sgd::new(m.params(), SgdOptions { nesterov: true, ..o(0.3, 0.9) }).unwrap();
    a.param_groups_mut()[0].initial_lr = Some(0.7);
    let dict = a.state_dict().unwrap();
    let mut b = Sgd::new(m.params(), o(0.1, 0.5)).unwrap();
    b.load_state_dict(&dict).unwrap();
    // The group takes the loaded values; the defaults of new groups stay
    // the constructor's, as torch's `defaults`.
    assert_eq!(crate::optim::group_hyper::get(&b, 0, "nesterov").unwrap(), 1.0);
    assert!(!b.options().nesterov);
    let g = &b.param_groups()[0];
    assert_eq!((g.lr, g.momentum, g.initial_lr), (0.3, 0.9, Some(0.7)));
}

#[test]
fn load_errors_leave_optimizer_unchanged() {
    let m = Model::new(Kind::Float);
    let mut good = Sgd::new(m.params(), o(0.1, 0.9)).unwrap();
    m.run(&mut good, 1);
    let dict = good.state_dict().unwrap();
    let mut target = Sgd::new(m.params(), o(0.2, 0.8)).unwrap();
    let snapshot = |opt: &Sgd| opt.state_dict().unwrap().into_iter().map(|(k, t)| (k, values(&t))).collect::<Vec<_>>();
    let before = snapshot(&target);

    let missing: Vec<_> =
        dict.iter().filter(|(k, _)| k != "param_groups.0.lr").map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    let e = target.load_state_dict(&missing).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("param_groups.0.lr"), "{}", e.message);

    let mut shape: Vec<_> = dict.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    for (k, t) in shape.iter_mut() {
        if k == "state.0.momentum_buffer" {
            *t = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu));
        }
    }
    assert_eq!(target.load_state_dict(&shape).unwrap_err().code, ErrorCode::ShapeMismatch);

    let mut extra: Vec<_> = dict.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    extra.push(("state.0.exp_avg".into(), Tensor::zeros([4], (Kind::Float, tch::Device::Cpu))));
    assert_eq!(target.load_state_dict(&extra).unwrap_err().code, ErrorCode::Format);

    let mut adam = Adam::new(m.params(), AdamOptions::default()).unwrap();
    m.run(&mut adam, 1);
    let e = target.load_state_dict(&adam.state_dict().unwrap()).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);

    let mut nesterov: Vec<_> = dict.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    for (k, t) in nesterov.iter_mut() {
        if k == "param_groups.0.nesterov" {
            *t = Tensor::from(0.5f64);
        }
    }
    assert_eq!(target.load_state_dict(&nesterov).unwrap_err().code, ErrorCode::Format);

    let other_groups = Sgd::new(vec![m.w.shallow_clone()], o(0.1, 0.9)).unwrap();
    let e = target.load_state_dict(&other_groups.state_dict().unwrap()).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);

    assert_eq!(snapshot(&target), before);
    assert_eq!(target.lr(), 0.2);
}
// SGD([w, v], {'lr': 0.1})
const SGD_PLAIN: [[f64; 4]; 5] = [
    [0.89, -1.5799999999999998, 2.07, 0.33999999999999997],
    [0.791, -1.244, 1.4189999999999998, 0.24399999999999997],
    [0.7019000000000001, -0.9752, 0.9632999999999998, 0.18639999999999998],
    [0.6217100000000001, -0.76016, 0.6443099999999998, 0.15184],
    [0.5495390000000001, -0.588128, 0.42101699999999986, 0.131104],
];
const SGD_PLAIN_F32: [[f32; 4]; 5] = [
    [0.89, -1.58, 2.07, 0.34],
    [0.791, -1.2440001, 1.4189999, 0.244],
    [0.7019, -0.97520006, 0.9632999, 0.18640001],
    [0.62171, -0.76016, 0.6443099, 0.15184],
    [0.549539, -0.58812803, 0.4210169, 0.131104],
];
// SGD([w, v], {'lr': 0.1, 'momentum': 0.9})
const SGD_MOMENTUM: [[f64; 4]; 5] = [
    [0.89, -1.5799999999999998, 2.07, 0.33999999999999997],
    [0.6920000000000001, -0.8659999999999999, 0.5819999999999999, 0.09999999999999996],
    [0.43460000000000004, -0.03019999999999978, -0.9618000000000001, -0.11600000000000006],
    [0.14948000000000003, 0.7480600000000003, -2.09268, -0.2240000000000001],
    [-0.132076, 1.3188820000000003, -2.512668, -0.19160000000000008],
];
const SGD_MOMENTUM_F32: [[f32; 4]; 5] = [
    [0.89, -1.58, 2.07, 0.34],
    [0.692, -0.86600006, 0.5819999, 0.099999994],
    [0.43459997, -0.030200064, -0.9618001, -0.11600002],
    [0.14947997, 0.7480599, -2.09268, -0.224],
    [-0.13207603, 1.3188819, -2.512668, -0.1916],
];
// SGD([w, v], {'lr': 0.1, 'momentum': 0.9, 'dampening': 0.3})
const SGD_DAMPENING: [[f64; 4]; 5] = [
    [0.89, -1.5799999999999998, 2.07, 0.33999999999999997],
    [0.7217, -0.9667999999999999, 0.7772999999999998, 0.12879999999999994],
    [0.512711, -0.2655679999999999, -0.5703630000000002, -0.06934400000000006],
    [0.28173113, 0.41672032, -1.6844834700000002, -0.20025728000000004],
    [0.047128067900000015, 0.9864389632, -2.3544503643000003, -0.2340071936],
];
const SGD_DAMPENING_F32: [[f32; 4]; 5] = [
    [0.89, -1.58, 2.07, 0.34],
    [0.7217, -0.96680003, 0.7772999, 0.1288],
    [0.512711, -0.26556808, -0.57036304, -0.06934399],
    [0.2817311, 0.41672024, -1.6844834, -0.20025726],
    [0.047128048, 0.9864389, -2.3544502, -0.23400716],
];
// SGD([w, v], {'lr': 0.1, 'momentum': 0.9, 'nesterov': True})
const SGD_NESTEROV: [[f64; 4]; 5] = [
    [0.7909999999999999, -1.202, 1.2329999999999997, 0.19599999999999998],
    [0.5326099999999999, -0.36703999999999987, -0.28011000000000025, -0.006560000000000016],
    [0.26005309999999987, 0.32753920000000014, -1.1793363000000001, -0.07331840000000002],
    [0.003276700999999857, 0.7821283840000001, -1.4220479789999998, -0.04004057600000002],
    [-0.21503985229000014, 0.9730069196800001, -1.1783419430699997, 0.03394567935999999],
];
const SGD_NESTEROV_F32: [[f32; 4]; 5] = [
    [0.791, -1.202, 1.2329999, 0.196],
    [0.53261, -0.36704004, -0.28010997, -0.00655998],
    [0.2600531, 0.32753915, -1.1793362, -0.07331838],
    [0.003276714, 0.78212833, -1.4220479, -0.040040556],
    [-0.21503982, 0.97300684, -1.1783417, 0.033945687],
];
// SGD([w, v], {'lr': 0.1, 'momentum': 0.9, 'weight_decay': 0.05})
const SGD_WD: [[f64; 4]; 5] = [
    [0.885, -1.57, 2.0549999999999997, 0.33749999999999997],
    [0.6785749999999999, -0.8411500000000001, 0.5477249999999997, 0.09456249999999997],
    [0.41154212499999987, 0.007250750000000042, -1.0058786250000002, -0.12237906250000001],
    [0.11800061437499983, 0.7893250212500001, -2.1273289068750003, -0.22806294843749997],
    [-0.16857680969687522, 1.3513802360187501, -2.5177988439656254, -0.19081295166406245],
];
const SGD_WD_F32: [[f32; 4]; 5] = [
    [0.885, -1.57, 2.055, 0.3375],
    [0.678575, -0.84115005, 0.54772514, 0.094562486],
    [0.41154212, 0.0072506554, -1.0058784, -0.12237909],
    [0.11800061, 0.7893249, -2.1273286, -0.22806296],
    [-0.16857678, 1.35138, -2.5177987, -0.19081295],
];
// SGD([w, v], {'lr': 0.01, 'momentum': 0.5, 'maximize': True})
const SGD_MAXIMIZE: [[f64; 4]; 5] = [
    [1.011, -2.042, 3.093, 0.516],
    [1.02761, -2.1058399999999997, 3.23529, 0.54064],
    [1.0471910999999998, -2.1818767999999995, 3.4064937, 0.5705856],
    [1.0684535609999999, -2.2655327359999995, 3.5972903609999998, 0.6043818240000001],
    [1.0907693271099999, -2.3546713587199997, 3.80360740233, 0.6414552089600001],
];
const SGD_MAXIMIZE_F32: [[f32; 4]; 5] = [
    [1.011, -2.042, 3.093, 0.516],
    [1.0276101, -2.10584, 3.23529, 0.54064],
    [1.0471911, -2.1818767, 3.4064937, 0.5705856],
    [1.0684536, -2.2655325, 3.5972903, 0.60438186],
    [1.0907693, -2.354671, 3.8036072, 0.64145523],
];
