//! Adam and AdamW against torch.optim trajectories (see `test_util` for the
//! Python that produced the constants, torch 2.13.0).
use super::*;
use crate::error::ErrorCode;
use crate::optim::test_util::{check, check_round_trip, values, Model};
use crate::optim::{Sgd, SgdOptions};
use tch::Kind;

fn o(lr: f64) -> AdamOptions {
    AdamOptions { lr, ..Default::default() }
}

#[test]
fn adam_matches_torch() {
    let adam = |opts: AdamOptions| move |p| Adam::new(p, opts);
    let n = check(adam(o(0.1)), &ADAM_PLAIN, &ADAM_PLAIN_F32);
    let ams = AdamOptions { betas: (0.9, 0.5), amsgrad: true, ..o(0.1) };
    let n = n + check(adam(ams), &ADAM_AMSGRAD, &ADAM_AMSGRAD_F32);
    let wd = AdamOptions { weight_decay: 0.1, ..o(0.1) };
    let n = n + check(adam(wd), &ADAM_WD, &ADAM_WD_F32);
    let max = AdamOptions { maximize: true, ..o(0.05) };
    let n = n + check(adam(max), &ADAM_MAXIMIZE, &ADAM_MAXIMIZE_F32);
    eprintln!("adam: {n} of 80 f32 values bit-identical to torch");
}

#[test]
fn adamw_matches_torch() {
    let adamw = |opts: AdamOptions| move |p| AdamW::new(p, opts);
    let n = check(adamw(AdamOptions { lr: 0.1, ..AdamOptions::adamw() }), &ADAMW_PLAIN, &ADAMW_PLAIN_F32);
    let ams = AdamOptions { betas: (0.8, 0.6), weight_decay: 0.2, amsgrad: true, ..o(0.1) };
    let n = n + check(|p| Adam::new_w(p, ams), &ADAMW_AMSGRAD, &ADAMW_AMSGRAD_F32);
    eprintln!("adamw: {n} of 40 f32 values bit-identical to torch");
}

#[test]
fn defaults_are_torch() {
    let d = AdamOptions::default();
    assert_eq!((d.lr, d.betas, d.eps, d.weight_decay), (1e-3, (0.9, 0.999), 1e-8, 0.0));
    assert!(!d.amsgrad && !d.maximize);
    assert_eq!(AdamOptions::adamw().weight_decay, 1e-2);
}

#[test]
fn validation() {
    let m = Model::new(Kind::Float);
    let bad = [
        o(-1.0),
        AdamOptions { eps: -1e-8, ..o(0.1) },
        AdamOptions { betas: (1.0, 0.999), ..o(0.1) },
        AdamOptions { betas: (0.9, -0.1), ..o(0.1) },
        AdamOptions { betas: (f64::NAN, 0.9), ..o(0.1) },
        AdamOptions { weight_decay: -0.1, ..o(0.1) },
    ];
    for opts in bad {
        assert_eq!(Adam::new(m.params(), opts).unwrap_err().code, ErrorCode::InvalidArgument, "{opts:?}");
        assert_eq!(AdamW::new(m.params(), opts).unwrap_err().code, ErrorCode::InvalidArgument, "{opts:?}");
    }
    let e = Adam::new(m.params(), AdamOptions { betas: (1.0, 0.999), ..o(0.1) }).unwrap_err();
    assert!(e.message.contains("beta parameter at index 0"), "{}", e.message);
}

#[test]
fn names_and_state_keys() {
    let m = Model::new(Kind::Float);
    let mut a = Adam::new(m.params(), AdamOptions { amsgrad: true, ..o(0.1) }).unwrap();
    assert_eq!(a.name(), "adam");
    assert_eq!(AdamW::new(m.params(), o(0.1)).unwrap().name(), "adamw");
    m.run(&mut a, 2);
    let dict = a.state_dict().unwrap();
    let get = |k: &str| dict.iter().find(|(n, _)| n == k).map(|(_, t)| values(t));
    assert_eq!(get("state.0.step"), Some(vec![2.0]));
    assert!(get("state.0.exp_avg").is_some() && get("state.0.max_exp_avg_sq").is_some());
    assert!(get("state.1.step").is_none(), "no state for a param without grad");
    assert_eq!(get("param_groups.0.betas.0"), Some(vec![0.9]));
    assert_eq!(get("param_groups.0.decoupled_weight_decay"), Some(vec![0.0]));
    let lr = dict.iter().find(|(n, _)| n == "param_groups.0.lr").unwrap();
    assert_eq!((lr.1.dim(), lr.1.kind()), (0, Kind::Double));
}

#[test]
fn state_dict_round_trip() {
    check_round_trip(|p| Adam::new(p, AdamOptions { amsgrad: true, weight_decay: 0.1, ..o(0.1) }), 2);
    check_round_trip(|p| Adam::new(p, o(0.1)), 0);
    check_round_trip(|p| AdamW::new(p, AdamOptions { betas: (0.8, 0.6), amsgrad: true, ..o(0.1) }), 3);
}

#[test]
fn load_errors() {
    let m = Model::new(Kind::Float);
    let mut adam = Adam::new(m.params(), o(0.1)).unwrap();
    m.run(&mut adam, 1);
    let dict = adam.state_dict().unwrap();
    let mut adamw = AdamW::new(m.params(), o(0.1)).unwrap();
    let e = adamw.load_state_dict(&dict).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("adam"), "{}", e.message);
    assert!(adamw.state_dict().unwrap().iter().all(|(k, _)| !k.starts_with("state.")));

    let mut sgd = Sgd::new(m.params(), SgdOptions::default()).unwrap();
    assert_eq!(sgd.load_state_dict(&dict).unwrap_err().code, ErrorCode::Format);

    let without_sq: Vec<_> =
        dict.iter().filter(|(k, _)| k != "state.0.exp_avg_sq").map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    let mut fresh = Adam::new(m.params(), o(0.1)).unwrap();
    let e = fresh.load_state_dict(&without_sq).unwrap_err();
    assert!(e.message.contains("state.0.exp_avg_sq"), "{}", e.message);

    let bad_step: Vec<_> = dict
        .iter()
        .map(|(k, t)| {
            let t = if k == "state.0.step" { Tensor::from_slice(&[1.0f64, 2.0]) } else { t.shallow_clone() };
            (k.clone(), t)
        })
        .collect();
    assert_eq!(fresh.load_state_dict(&bad_step).unwrap_err().code, ErrorCode::Format);
    fresh.load_state_dict(&dict).unwrap();
}

#[test]
fn amsgrad_state_created_when_loaded_without_it() {
    // A state saved without amsgrad, loaded into an amsgrad optimizer: the
    // max buffer is created lazily (torch would fail with a KeyError).
    let m = Model::new(Kind::Float);
    let mut a = Adam::new(m.params(), o(0.1)).unwrap();
    m.run(&mut a, 1);
    let mut dict = a.state_dict().unwrap();
    for (k, t) in dict.iter_mut() {
        if k == "param_groups.0.amsgrad" {
            *t = Tensor::from(1.0f64);
        }
    }
    let mut b = Adam::new(m.params(), o(0.1)).unwrap();
    b.load_state_dict(&dict).unwrap();
    assert_eq!(crate::optim::group_hyper::get(&b, 0, "amsgrad").unwrap(), 1.0);
    m.run(&mut b, 1);
    assert!(b.state_dict().unwrap().iter().any(|(k, _)| k == "state.0.max_exp_avg_sq"));
}
// Adam([w, v], {'lr': 0.1})
const ADAM_PLAIN: [[f64; 4]; 5] = [
    [0.9000000009090909, -1.9000000002380952, 2.900000000107527, 0.400000000625],
    [0.8003611627734645, -1.800156845464305, 2.8000988853878317, 0.3017424931546844],
    [0.70138244621909, -1.7005866013863884, 2.7003671457663194, 0.2073949669561615],
    [0.6034141152574095, -1.6014143689311315, 2.6008786650819857, 0.12023818986579399],
    [0.5068637089650823, -1.502774554659436, 2.5017106737284314, 0.04461079598589328],
];
const ADAM_PLAIN_F32: [[f32; 4]; 5] = [
    [0.9, -1.9, 2.9, 0.4],
    [0.80036116, -1.8001568, 2.800099, 0.3017425],
    [0.70138246, -1.7005866, 2.7003672, 0.20739496],
    [0.6034141, -1.6014143, 2.6008787, 0.12023817],
    [0.5068637, -1.5027745, 2.5017107, 0.044610783],
];
// Adam([w, v], {'lr': 0.1, 'betas': (0.9, 0.5), 'amsgrad': True})
const ADAM_AMSGRAD: [[f64; 4]; 5] = [
    [0.9000000009090908, -1.9000000002380952, 2.900000000107527, 0.40000000062499996],
    [0.7987470748884632, -1.799336799365319, 2.7995494345323433, 0.2968162048234625],
    [0.6952769395220348, -1.697569100019085, 2.698364928201186, 0.20318926493380718],
    [0.5943644318656636, -1.5952295995077046, 2.596193114954656, 0.12449174910510422],
    [0.49823408577025846, -1.494357658967733, 2.4944061362826226, 0.06200943751556313],
];
const ADAM_AMSGRAD_F32: [[f32; 4]; 5] = [
    [0.9, -1.9, 2.9, 0.4],
    [0.79874706, -1.7993368, 2.7995496, 0.2968162],
    [0.6952769, -1.6975691, 2.698365, 0.20318925],
    [0.5943644, -1.5952296, 2.596193, 0.12449173],
    [0.49823406, -1.4943577, 2.4944062, 0.062009424],
];
// Adam([w, v], {'lr': 0.1, 'weight_decay': 0.1})
const ADAM_WD: [[f64; 4]; 5] = [
    [0.9000000008333333, -1.9000000002272728, 2.900000000104167, 0.4000000006060606],
    [0.8003653057760263, -1.8001572797745387, 2.8000990042869955, 0.3017238313698792],
    [0.7013989139686005, -1.7005882571232362, 2.700367592861133, 0.20730825758196117],
    [0.6034563477782939, -1.601418438716185, 2.600879748807872, 0.1199828655063136],
    [0.5069518318020372, -1.502782693361572, 2.5017128106933257, 0.044024790225225985],
];
const ADAM_WD_F32: [[f32; 4]; 5] = [
    [0.90000004, -1.9, 2.9, 0.4],
    [0.8003653, -1.8001573, 2.8000991, 0.30172384],
    [0.7013989, -1.7005882, 2.7003677, 0.20730826],
    [0.6034563, -1.6014184, 2.60088, 0.11998287],
    [0.5069518, -1.5027826, 2.501713, 0.044024788],
];
// Adam([w, v], {'lr': 0.05, 'maximize': True})
const ADAM_MAXIMIZE: [[f64; 4]; 5] = [
    [1.0499999995454545, -2.0499999998809524, 3.0499999999462366, 0.5499999996875],
    [1.1000455670277771, -2.100027203141464, 3.1000192517637033, 0.60006678150186],
    [1.1501649973950663, -2.150098941723248, 3.150070171040185, 0.6502464924533332],
    [1.2003850363031023, -2.2002319267748165, 3.200164837368934, 0.7005835193248583],
    [1.2507309000926259, -2.2504422365433583, 3.250314978450471, 0.7511193958435396],
];
const ADAM_MAXIMIZE_F32: [[f32; 4]; 5] = [
    [1.05, -2.05, 3.05, 0.55],
    [1.1000456, -2.100027, 3.1000192, 0.6000668],
    [1.150165, -2.1500988, 3.1500702, 0.6502465],
    [1.200385, -2.2002318, 3.2001648, 0.7005835],
    [1.2507309, -2.250442, 3.250315, 0.7511194],
];
// AdamW([w, v], {'lr': 0.1})
const ADAMW_PLAIN: [[f64; 4]; 5] = [
    [0.8990000009090909, -1.8980000002380952, 2.8970000001075267, 0.399500000625],
    [0.7984671369959828, -1.7962626802465478, 2.794205323531688, 0.30085847916319214],
    [0.698704042386194, -1.6949066966253745, 2.6916887143310513, 0.2062617617287062],
    [0.6000650413339439, -1.594059851628806, 2.589526360542345, 0.1190161762999348],
    [0.5029620806005539, -1.49385935476903, 2.487797839491822, 0.04348166829468064],
];
const ADAMW_PLAIN_F32: [[f32; 4]; 5] = [
    [0.899, -1.898, 2.897, 0.3995],
    [0.7984671, -1.7962627, 2.7942054, 0.3008585],
    [0.698704, -1.6949068, 2.6916888, 0.20626178],
    [0.600065, -1.59406, 2.5895264, 0.1190162],
    [0.50296205, -1.4938594, 2.487798, 0.043481685],
];
// AdamW([w, v], {'lr': 0.1, 'betas': (0.8, 0.6), 'weight_decay': 0.2, 'amsgrad': True})
const ADAMW_AMSGRAD: [[f64; 4]; 5] = [
    [0.8800000009090909, -1.8600000002380952, 2.8400000001075267, 0.390000000625],
    [0.7617485291873538, -1.7223738450070976, 2.682863069917681, 0.28119090989842777],
    [0.6447273288601012, -1.586785998855894, 2.52831346250937, 0.18509151037397598],
    [0.5328195065218742, -1.4531995177300416, 2.376096742913809, 0.1083331590118377],
    [0.428982392325165, -1.3243616592326208, 2.2277328710862943, 0.052449398400590555],
];
const ADAMW_AMSGRAD_F32: [[f32; 4]; 5] = [
    [0.88, -1.86, 2.8400002, 0.39000002],
    [0.76174855, -1.7223738, 2.6828632, 0.28119093],
    [0.6447274, -1.586786, 2.5283136, 0.18509153],
    [0.5328196, -1.4531996, 2.376097, 0.10833318],
    [0.42898256, -1.3243618, 2.2277331, 0.052449413],
];
