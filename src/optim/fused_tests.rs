//! Fused updates against torch's `fused=True` trajectories (f32, bit for
//! bit; each differs from torch's for-loop update), their state entry,
//! and what they refuse. Reference: `test_util`'s Python `run` with
//! `fused=True` added to the options below.
use super::test_util::{values, Model};
use super::{
    Adagrad, AdagradOptions, Adam, AdamOptions, AdamW, Lbfgs, LbfgsOptions, Optimizer, RmsProp, RmsPropOptions, Sgd,
    SgdOptions,
};
use crate::error::ErrorCode;
use tch::{Kind, Tensor};

// Adam(lr=0.1, amsgrad=True, weight_decay=0.1), AdamW(lr=0.1,
// weight_decay=0.1), SGD(lr=0.1, momentum=0.9, nesterov=True,
// weight_decay=0.01), Adagrad(lr=0.1, lr_decay=0.01, weight_decay=0.1,
// initial_accumulator_value=0.1) and Adagrad(lr=0.1, eps=1e-3,
// maximize=True).
const ADAM_FUSED: [[f64; 4]; 5] = [
    [0.9000000357627869, -1.899999976158142, 2.9000000953674316, 0.4000000059604645],
    [0.8003653287887573, -1.8001573085784912, 2.8000991344451904, 0.301723837852478],
    [0.7013989090919495, -1.7005882263183594, 2.7003676891326904, 0.20730826258659363],
    [0.6034563183784485, -1.601418375968933, 2.6008799076080322, 0.11998286843299866],
    [0.5069518089294434, -1.5027825832366943, 2.5017130374908447, 0.044024787843227386],
];
const ADAMW_FUSED: [[f64; 4]; 5] = [
    [0.8899999856948853, -1.8799999952316284, 2.870000123977661, 0.39500001072883606],
    [0.7815122008323669, -1.7613964080810547, 2.7414348125457764, 0.2929510474205017],
    [0.6748629212379456, -1.644321084022522, 2.6143856048583984, 0.1962031126022339],
    [0.5704334378242493, -1.5289154052734375, 2.488938093185425, 0.10828350484371185],
    [0.4686652719974518, -1.415331244468689, 2.3651814460754395, 0.033720098435878754],
];
const SGD_FUSED: [[f64; 4]; 5] = [
    [0.7890999913215637, -1.198199987411499, 1.2273000478744507, 0.19505000114440918],
    [0.5287616848945618, -0.36078742146492004, -0.2873227596282959, -0.007563593797385693],
    [0.254717081785202, 0.33391422033309937, -1.1836878061294556, -0.07375957071781158],
    [-0.0027388432063162327, 0.7863574028015137, -1.421301007270813, -0.039868224412202835],
    [-0.22076979279518127, 0.9736514091491699, -1.1729718446731567, 0.034389764070510864],
];
const ADAGRAD_FUSED: [[f64; 4]; 5] = [
    [0.9033012390136719, -1.9002572298049927, 2.9000542163848877, 0.4017874598503113],
    [0.8378392457962036, -1.832066297531128, 2.8312203884124756, 0.3427666127681732],
    [0.7863211631774902, -1.7777671813964844, 2.7761335372924805, 0.3003087341785431],
    [0.7431575059890747, -1.7317522764205933, 2.729259490966797, 0.26757848262786865],
    [0.7057197093963623, -1.691402792930603, 2.688009262084961, 0.24142104387283325],
];
const ADAGRAD_MAX_FUSED: [[f64; 4]; 5] = [
    [1.0999091863632202, -2.0999763011932373, 3.099989175796509, 0.5999375581741333],
    [1.173576831817627, -2.17229962348938, 3.1718077659606934, 0.6779901385307312],
    [1.2351669073104858, -2.232144594192505, 3.23099422454834, 0.7449793815612793],
    [1.2894071340560913, -2.2844808101654053, 3.2826054096221924, 0.8048501014709473],
    [1.3385591506958008, -2.331660747528076, 3.329026699066162, 0.8595988750457764],
];

fn f32_rows(rows: &[[f64; 4]; 5]) -> Vec<Vec<f64>> {
    rows.iter().map(|r| r.to_vec()).collect()
}

fn fused(mut opt: Box<dyn Optimizer>, m: &Model) -> Vec<Vec<f64>> {
    opt.set_fused(true).unwrap();
    assert!(opt.fused());
    let out = m.run(opt.as_mut(), 5);
    m.assert_v_untouched();
    out
}

#[test]
fn fused_updates_equal_torchs_bit_for_bit() {
    let m = Model::new(Kind::Float);
    let o = AdamOptions { lr: 0.1, amsgrad: true, weight_decay: 0.1, ..Default::default() };
    assert_eq!(fused(Box::new(Adam::new(m.params(), o).unwrap()), &m), f32_rows(&ADAM_FUSED));
    let m = Model::new(Kind::Float);
    let o = AdamOptions { lr: 0.1, weight_decay: 0.1, ..Default::default() };
    assert_eq!(fused(Box::new(AdamW::new(m.params(), o).unwrap()), &m), f32_rows(&ADAMW_FUSED));
    let m = Model::new(Kind::Float);
    let o = SgdOptions { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01, ..Default::default() };
    assert_eq!(fused(Box::new(Sgd::new(m.params(), o).unwrap()), &m), f32_rows(&SGD_FUSED));
    let m = Model::new(Kind::Float);
    let o = AdagradOptions {
        lr: 0.1,
        lr_decay: 0.01,
        weight_decay: 0.1,
        initial_accumulator_value: 0.1,
        ..Default::default()
    };
    assert_eq!(fused(Box::new(Adagrad::new(m.params(), o).unwrap()), &m), f32_rows(&ADAGRAD_FUSED));
    let m = Model::new(Kind::Float);
    let o = AdagradOptions { lr: 0.1, eps: 1e-3, maximize: true, ..Default::default() };
    assert_eq!(fused(Box::new(Adagrad::new(m.params(), o).unwrap()), &m), f32_rows(&ADAGRAD_MAX_FUSED));
    // The state torch keeps: the step count and the sum, under `fused`.
    let mut a = Adagrad::new(m.params(), o).unwrap();
    a.set_fused(true).unwrap();
    m.train_step(&mut a);
    let state = a.state_dict().unwrap();
    let get = |k: &str| state.iter().find(|(n, _)| n == k).map(|(_, t)| t.double_value(&[]));
    assert_eq!(get("state.0.step"), Some(1.0));
    assert_eq!(get("param_groups.0.fused"), Some(1.0));
    assert!(state.iter().any(|(n, _)| n == "state.0.sum"));
}

#[test]
fn the_choice_travels_with_the_state() {
    let m = Model::new(Kind::Float);
    let o = SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() };
    let mut a = Sgd::new(m.params(), o).unwrap();
    a.set_fused(true).unwrap();
    m.train_step(&mut a);
    let state = a.state_dict().unwrap();
    assert!(state.iter().any(|(k, t)| k == "param_groups.0.fused" && t.double_value(&[]) == 1.0));
    // As torch: loading sets the choice, both ways.
    let mut b = Sgd::new(m.params(), o).unwrap();
    b.load_state_dict(&state).unwrap();
    assert!(b.fused());
    b.load_state_dict(&Sgd::new(m.params(), o).unwrap().state_dict().unwrap()).unwrap();
    assert!(!b.fused());
    // Kinds without fused updates refuse the entry; groups must agree.
    let mut r = RmsProp::new(m.params(), RmsPropOptions::default()).unwrap();
    let mut rs = r.state_dict().unwrap();
    rs.push(("param_groups.0.fused".into(), Tensor::from(1.0f64)));
    assert_eq!(r.load_state_dict(&rs).unwrap_err().code, ErrorCode::Format);
    let mut two = Sgd::new(vec![m.w.shallow_clone()], o).unwrap();
    two.add_param_group(vec![m.v.shallow_clone()], None).unwrap();
    let mut st = two.state_dict().unwrap();
    st.push(("param_groups.1.fused".into(), Tensor::from(1.0f64)));
    assert!(two.load_state_dict(&st).unwrap_err().message.contains("some param groups are fused"));
}

#[test]
fn kinds_and_parameters_without_fused_kernels_are_refused() {
    let m = Model::new(Kind::Float);
    let mut l = Lbfgs::new(m.params(), LbfgsOptions::default()).unwrap();
    assert_eq!(l.set_fused(true).unwrap_err().code, ErrorCode::Unsupported);
    l.set_fused(false).unwrap();
    // SGD whose momentum buffers exist for some parameters only: torch's
    // fused step cannot take them; refused, nothing changed.
    let o = SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() };
    let mut s = Sgd::new(m.params(), o).unwrap();
    m.train_step(&mut s); // `v` gets no gradient, so no buffer
    s.set_fused(true).unwrap();
    let before = values(&m.w);
    m.backward();
    (&m.v * &m.v).sum(Kind::Float).backward();
    assert_eq!(s.step().unwrap_err().code, ErrorCode::InvalidState);
    assert_eq!(values(&m.w), before);
}

/// Adam's, AdamW's and Adagrad's fused updates keep each step count on the
/// parameter's device between steps; it must follow the state's count
/// through for-loop steps between fused ones and through loaded states.
#[test]
fn the_kept_device_steps_follow_the_state() {
    type Make = fn(Vec<Tensor>) -> Box<dyn Optimizer>;
    let makes: [Make; 3] = [
        |p| Box::new(Adam::new(p, AdamOptions { lr: 0.1, amsgrad: true, ..Default::default() }).unwrap()),
        |p| Box::new(AdamW::new(p, AdamOptions { lr: 0.1, weight_decay: 0.1, ..Default::default() }).unwrap()),
        |p| Box::new(Adagrad::new(p, AdagradOptions { lr: 0.1, lr_decay: 0.01, ..Default::default() }).unwrap()),
    ];
    let schedule = [true, true, false, true, true, false, false, true];
    for make in makes {
        // One optimizer throughout, fused or not as the schedule says.
        let a = Model::new(Kind::Float);
        let mut kept = make(a.params());
        for &on in &schedule {
            kept.set_fused(on).unwrap();
            a.train_step(kept.as_mut());
        }
        // A new optimizer for every step, loaded from the last one's state.
        let b = Model::new(Kind::Float);
        let mut state = make(b.params()).state_dict().unwrap();
        for &on in &schedule {
            let mut fresh = make(b.params());
            fresh.load_state_dict(&state).unwrap();
            fresh.set_fused(on).unwrap();
            b.train_step(fresh.as_mut());
            state = fresh.state_dict().unwrap();
        }
        assert_eq!(values(&a.w), values(&b.w), "{}", kept.name());
        let steps = |o: &dyn Optimizer| {
            o.state_dict().unwrap().into_iter().find(|(k, _)| k == "state.0.step").map(|(_, t)| t.double_value(&[]))
        };
        assert_eq!(steps(kept.as_ref()), Some(schedule.len() as f64));
        assert!(kept.state_dict().unwrap().iter().all(|(k, _)| !k.contains("device")));
    }
}

/// A fused step handed a loss scaler's finding of 1 (`step_scaled`) is no
/// step at all: the same weights and state, step counts included, as an
/// optimizer that skipped it on the host; with 0 it is a plain step.
#[test]
fn a_step_skipped_on_the_device_is_no_step() {
    type Make = fn(Vec<Tensor>) -> Box<dyn Optimizer>;
    let makes: [Make; 4] = [
        |p| Box::new(Adam::new(p, AdamOptions { lr: 0.1, amsgrad: true, ..Default::default() }).unwrap()),
        |p| Box::new(AdamW::new(p, AdamOptions { lr: 0.1, weight_decay: 0.1, ..Default::default() }).unwrap()),
        // A skipped first step leaves zeroed momentum buffers, so that the
        // next one equals a first step (dampening 0).
        |p| Box::new(Sgd::new(p, SgdOptions { lr: 0.1, momentum: 0.9, nesterov: true, ..Default::default() }).unwrap()),
        |p| Box::new(Adagrad::new(p, AdagradOptions { lr: 0.1, lr_decay: 0.01, ..Default::default() }).unwrap()),
    ];
    let skips = [true, false, false, true, true, false];
    let finding = |v: f64| Tensor::from(v as f32);
    for make in makes {
        let (a, b) = (Model::new(Kind::Float), Model::new(Kind::Float));
        let (mut on_device, mut on_host) = (make(a.params()), make(b.params()));
        on_device.set_fused(true).unwrap();
        on_host.set_fused(true).unwrap();
        assert!(on_device.supports_amp_scaling());
        for &skip in &skips {
            a.backward();
            if skip {
                let _ = a.w.grad().fill_(f64::INFINITY);
            }
            on_device.step_scaled(&finding(if skip { 1.0 } else { 0.0 })).unwrap();
            on_device.zero_grad();
            if !skip {
                b.train_step(on_host.as_mut());
            }
        }
        let name = on_device.name();
        assert_eq!(values(&a.w), values(&b.w), "{name}");
        let read = |o: &dyn Optimizer| -> Vec<(String, Vec<f64>)> {
            o.state_dict().unwrap().into_iter().map(|(k, t)| (k, values(&t))).collect()
        };
        assert_eq!(read(on_device.as_ref()), read(on_host.as_ref()), "{name}");
        // A step that counts on the host reads the device's counts first.
        on_device.set_fused(false).unwrap();
        on_host.set_fused(false).unwrap();
        a.train_step(on_device.as_mut());
        b.train_step(on_host.as_mut());
        assert_eq!(values(&a.w), values(&b.w), "{name} after an unfused step");
        a.assert_v_untouched();
    }
    // Without fused updates the finding is refused.
    let m = Model::new(Kind::Float);
    let mut adam = Adam::new(m.params(), AdamOptions::default()).unwrap();
    assert!(!adam.supports_amp_scaling());
    m.backward();
    let e = adam.step_scaled(&finding(0.0)).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
    assert!(e.message.contains("fused"), "{}", e.message);
    let mut lbfgs = Lbfgs::new(m.params(), LbfgsOptions::default()).unwrap();
    assert_eq!(lbfgs.step_scaled(&finding(0.0)).unwrap_err().code, ErrorCode::Unsupported);
}
