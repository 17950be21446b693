//! Fused updates against torch's `fused=True` trajectories (f32, bit for
//! bit; each differs from torch's for-loop update), their state entry,
//! and what they refuse. Reference: `test_util`'s Python `run` with
//! `fused=True` added to the options below.
use super::test_util::{values, Model};
use super::{Adam, AdamOptions, AdamW, Lbfgs, LbfgsOptions, Optimizer, RmsProp, RmsPropOptions, Sgd, SgdOptions};
use crate::error::ErrorCode;
use tch::{Kind, Tensor};

// Adam(lr=0.1, amsgrad=True, weight_decay=0.1), AdamW(lr=0.1,
// weight_decay=0.1), SGD(lr=0.1, momentum=0.9, nesterov=True,
// weight_decay=0.01).
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
