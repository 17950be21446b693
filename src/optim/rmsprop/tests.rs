//! RMSprop against torch.optim.RMSprop trajectories (see `test_util` for the
//! Python that produced the constants, torch 2.13.0).
use super::*;
use crate::error::ErrorCode;
use crate::optim::test_util::{check, check_round_trip, Model};
use tch::Kind;

fn o(lr: f64) -> RmsPropOptions {
    RmsPropOptions { lr, ..Default::default() }
}

#[test]
fn matches_torch() {
    let rms = |opts: RmsPropOptions| move |p| RmsProp::new(p, opts);
    let n = check(rms(o(0.01)), &RMSPROP_PLAIN, &RMSPROP_PLAIN_F32);
    let centered = RmsPropOptions { centered: true, ..o(0.01) };
    let n = n + check(rms(centered), &RMSPROP_CENTERED, &RMSPROP_CENTERED_F32);
    let momentum = RmsPropOptions { momentum: 0.9, ..o(0.01) };
    let n = n + check(rms(momentum), &RMSPROP_MOMENTUM, &RMSPROP_MOMENTUM_F32);
    let all = RmsPropOptions { alpha: 0.9, weight_decay: 0.1, momentum: 0.5, centered: true, ..o(0.01) };
    let n = n + check(rms(all), &RMSPROP_ALL, &RMSPROP_ALL_F32);
    let max = RmsPropOptions { maximize: true, ..o(0.01) };
    let n = n + check(rms(max), &RMSPROP_MAXIMIZE, &RMSPROP_MAXIMIZE_F32);
    eprintln!("rmsprop: {n} of 100 f32 values bit-identical to torch");
}

#[test]
fn defaults_are_torch() {
    let d = RmsPropOptions::default();
    assert_eq!((d.lr, d.alpha, d.eps, d.weight_decay, d.momentum), (1e-2, 0.99, 1e-8, 0.0, 0.0));
    assert!(!d.centered && !d.maximize);
}

#[test]
fn validation() {
    let m = Model::new(Kind::Float);
    let bad = [
        o(-0.01),
        RmsPropOptions { eps: -1.0, ..o(0.01) },
        RmsPropOptions { momentum: -0.9, ..o(0.01) },
        RmsPropOptions { weight_decay: -0.1, ..o(0.01) },
        RmsPropOptions { alpha: -0.5, ..o(0.01) },
    ];
    for opts in bad {
        assert_eq!(RmsProp::new(m.params(), opts).unwrap_err().code, ErrorCode::InvalidArgument, "{opts:?}");
    }
}

#[test]
fn state_dict_round_trip() {
    let all = RmsPropOptions { alpha: 0.9, weight_decay: 0.1, momentum: 0.5, centered: true, ..o(0.01) };
    check_round_trip(move |p| RmsProp::new(p, all), 2);
    check_round_trip(|p| RmsProp::new(p, o(0.01)), 1);
}

#[test]
fn state_keys_and_kind_check() {
    let m = Model::new(Kind::Float);
    let mut a = RmsProp::new(m.params(), RmsPropOptions { momentum: 0.9, centered: true, ..o(0.01) }).unwrap();
    assert_eq!(a.name(), "rmsprop");
    m.run(&mut a, 1);
    let dict = a.state_dict().unwrap();
    for k in ["state.0.step", "state.0.square_avg", "state.0.momentum_buffer", "state.0.grad_avg"] {
        assert!(dict.iter().any(|(n, _)| n == k), "{k}");
    }
    let mut adam = crate::optim::Adam::new(m.params(), Default::default()).unwrap();
    assert_eq!(adam.load_state_dict(&dict).unwrap_err().code, ErrorCode::Format);
}
// RMSprop([w, v], {'lr': 0.01})
const RMSPROP_PLAIN: [[f64; 4]; 5] = [
    [0.9000000090909083, -1.9000000023809525, 2.9000000010752687, 0.40000000624999965],
    [0.8325478262848031, -1.8308529528192428, 2.8302776064459896, 0.33980708192677417],
    [0.7791114439875177, -1.775138247037889, 2.773795712772905, 0.2962721950144682],
    [0.7339422935351407, -1.7273653399702118, 2.7251535267419946, 0.26255780549140095],
    [0.6943897603192702, -1.684984833063759, 2.6818366446490876, 0.23553784070825762],
];
const RMSPROP_PLAIN_F32: [[f32; 4]; 5] = [
    [0.9, -1.9, 2.9, 0.4],
    [0.8325478, -1.8308529, 2.8302777, 0.3398071],
    [0.7791114, -1.7751381, 2.7737958, 0.29627222],
    [0.7339422, -1.7273653, 2.7251537, 0.26255783],
    [0.6943897, -1.6849848, 2.6818368, 0.23553787],
];
// RMSprop([w, v], {'lr': 0.01, 'centered': True})
const RMSPROP_CENTERED: [[f64; 4]; 5] = [
    [0.8994962276568145, -1.899496220879081, 2.8994962195602088, 0.39949622478720975],
    [0.8313830053192621, -1.829660325363611, 2.8290758305565484, 0.3387729436186365],
    [0.7771783747258663, -1.7731197755948682, 2.771749298923151, 0.2947388594752249],
    [0.7311605357323555, -1.724408887816249, 2.722140234566064, 0.26058695276656835],
    [0.6906966199268703, -1.6809942041070318, 2.6777497330692435, 0.2332073797504203],
];
const RMSPROP_CENTERED_F32: [[f32; 4]; 5] = [
    [0.8994962, -1.8994962, 2.8994963, 0.39949623],
    [0.831383, -1.8296603, 2.8290758, 0.33877295],
    [0.77717835, -1.7731197, 2.7717493, 0.29473886],
    [0.7311605, -1.7244087, 2.7221403, 0.26058695],
    [0.6906966, -1.680994, 2.6777499, 0.23320737],
];
// RMSprop([w, v], {'lr': 0.01, 'momentum': 0.9})
const RMSPROP_MOMENTUM: [[f64; 4]; 5] = [
    [0.9000000090909083, -1.9000000023809525, 2.9000000010752687, 0.40000000624999965],
    [0.7425478344666205, -1.7408529549621, 2.7402776074137316, 0.24980708755177386],
    [0.5512432575967718, -1.5437359185441526, 2.5412443722115774, 0.08571501606180328],
    [0.34311609752326794, -1.322796333904822, 2.316211454933012, -0.059197476810410606],
    [0.13192642410264196, -1.0885331293078429, 2.0747991582243355, -0.15998301194518907],
];
const RMSPROP_MOMENTUM_F32: [[f32; 4]; 5] = [
    [0.9, -1.9, 2.9, 0.4],
    [0.7425478, -1.740853, 2.7402778, 0.2498071],
    [0.55124325, -1.5437359, 2.5412445, 0.08571504],
    [0.34311607, -1.3227962, 2.3162117, -0.05919745],
    [0.1319264, -1.088533, 2.0747993, -0.15998298],
];
// RMSprop([w, v], {'lr': 0.01, 'alpha': 0.9, 'weight_decay': 0.1, 'momentum': 0.5, 'centered': True})
const RMSPROP_ALL: [[f64; 4]; 5] = [
    [0.9666666675925926, -1.966666666919192, 2.9666666667824075, 0.46666666734006734],
    [0.9248880652880077, -1.924704081944619, 2.924640529677419, 0.4255832277080664],
    [0.8822898659952112, -1.8816264970985086, 2.881399028637013, 0.38485853675046405],
    [0.8411114282634143, -1.8396268220345717, 2.8391216385165925, 0.34700426181694455],
    [0.8017221722372645, -1.799057337504259, 2.7981577487566947, 0.31256132773394985],
];
const RMSPROP_ALL_F32: [[f32; 4]; 5] = [
    [0.96666664, -1.9666667, 2.9666667, 0.46666667],
    [0.924888, -1.9247041, 2.9246407, 0.42558324],
    [0.8822898, -1.8816265, 2.8813992, 0.38485855],
    [0.84111136, -1.8396268, 2.8391218, 0.34700426],
    [0.8017221, -1.7990572, 2.798158, 0.31256133],
];
// RMSprop([w, v], {'lr': 0.01, 'maximize': True})
const RMSPROP_MAXIMIZE: [[f64; 4]; 5] = [
    [1.0999999909090916, -2.0999999976190478, 3.0999999989247313, 0.5999999937500003],
    [1.1738842723351899, -2.172508602144813, 3.171998515668903, 0.6782396833005057],
    [1.2357911689998982, -2.232649480658834, 3.2314772715881586, 0.7455188424807413],
    [1.2904326496202279, -2.285370129937616, 3.2834691565274103, 0.8057665907639489],
    [1.3400598320322539, -2.333010090034625, 3.330346300982521, 0.8609684626037184],
];
const RMSPROP_MAXIMIZE_F32: [[f32; 4]; 5] = [
    [1.1, -2.1, 3.1, 0.6],
    [1.1738843, -2.1725085, 3.1719985, 0.6782397],
    [1.2357912, -2.2326493, 3.2314773, 0.74551886],
    [1.2904327, -2.2853699, 3.2834692, 0.80576664],
    [1.3400599, -2.3330097, 3.3303463, 0.86096853],
];
