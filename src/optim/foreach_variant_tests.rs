//! NAdam's and RAdam's foreach updates against torch's `foreach=True`
//! trajectories (they differ from the for-loop ones in the last bits, in
//! torch as in fulmen), recorded with `test_util`'s Python `run` for 8
//! steps (RAdam rectifies from step 6 on), f64 then f32:
//!
//! ```python
//! run(torch.optim.NAdam, dict(lr=0.1, weight_decay=0.1, foreach=True), dtype, 8)
//! run(torch.optim.NAdam, dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True, maximize=True,
//!                             foreach=True), dtype, 8)
//! run(torch.optim.RAdam, dict(lr=0.1, weight_decay=0.1, foreach=True), dtype, 8)
//! run(torch.optim.RAdam, dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True, maximize=True,
//!                             foreach=True), dtype, 8)
//! ```
use super::test_util::{check_round_trip, Model};
use super::torch_reference;
use super::{NAdam, NAdamOptions, Optimizer, RAdam, RAdamOptions};
use tch::{Kind, Tensor};

const NADAM_L2_64: [[f64; 4]; 8] = [
    [0.8943548217468974, -1.8943548211066237, 2.894354820976568, 0.39435482150679474],
    [0.8196151718117094, -1.8178071913391893, 2.817202536320339, 0.32723628984441705],
    [0.7518245449817704, -1.7472827937523463, 2.745775699542518, 0.27133019863788127],
    [0.686056051293058, -1.6777799329867635, 2.675057582947132, 0.22224962745079624],
    [0.620999445468054, -1.6078123202879, 2.6035140065672437, 0.1794803406271771],
    [0.5564787999920232, -1.5370077805249518, 2.5307192316360507, 0.1434266874713139],
    [0.4927409981272076, -1.4654143316725516, 2.4566671736178343, 0.11448205157362953],
    [0.43019336772455835, -1.3932443929401146, 2.381516698036374, 0.09266068084296891],
];
const NADAM_L2_32: [[f64; 4]; 8] = [
    [0.8943548798561096, -1.8943548202514648, 2.894354820251465, 0.39435482025146484],
    [0.8196152448654175, -1.8178071975708008, 2.817202568054199, 0.3272362947463989],
    [0.7518246173858643, -1.747282862663269, 2.7457756996154785, 0.27133020758628845],
    [0.6860561370849609, -1.677780032157898, 2.6750574111938477, 0.22224962711334229],
    [0.6209995150566101, -1.6078124046325684, 2.6035139560699463, 0.17948034405708313],
    [0.5564788579940796, -1.5370078086853027, 2.53071928024292, 0.14342668652534485],
    [0.49274104833602905, -1.4654144048690796, 2.456667423248291, 0.11448205262422562],
    [0.4301934242248535, -1.3932443857192993, 2.381516933441162, 0.09266068786382675],
];
const NADAMW_MAX_64: [[f64; 4]; 8] = [
    [1.0956451781730683, -2.085645178881943, 3.0756451790198818, 0.6006451784731967],
    [1.1658786261315797, -2.144528368758771, 3.124088079475635, 0.6802306568633499],
    [1.2313843206242963, -2.1981891811625407, 3.1671744019717987, 0.7564946852467533],
    [1.297175185666908, -2.251694935895152, 3.209982703810059, 0.8341114654630704],
    [1.3649407745940483, -2.3067184252961224, 3.2541702099144305, 0.9146691806153288],
    [1.4352595927049263, -2.3638205982891467, 3.300281309338899, 0.9986566782755163],
    [1.508265540851348, -2.423128235845914, 3.3484296263626927, 1.0861010399499464],
    [1.5839028885274224, -2.4845894251984713, 3.3985539658198265, 1.1768263871128184],
];
const NADAMW_MAX_32: [[f64; 4]; 8] = [
    [1.0956451892852783, -2.0856451988220215, 3.0756452083587646, 0.6006451845169067],
    [1.1658786535263062, -2.144528388977051, 3.1240880489349365, 0.6802306771278381],
    [1.2313843965530396, -2.1981892585754395, 3.1671743392944336, 0.7564947009086609],
    [1.2971751689910889, -2.251694917678833, 3.2099826335906982, 0.8341114521026611],
    [1.3649407625198364, -2.306718349456787, 3.2541701793670654, 0.9146691560745239],
    [1.4352596998214722, -2.3638205528259277, 3.300281286239624, 0.998656690120697],
    [1.508265733718872, -2.423128366470337, 3.3484296798706055, 1.0861010551452637],
    [1.583903193473816, -2.4845895767211914, 3.3985540866851807, 1.1768263578414917],
];
const RADAM_L2_64: [[f64; 4]; 8] = [
    [0.88, -1.56, 2.04, 0.33499999999999996],
    [0.7669473684210526, -1.1686315789473685, 1.2366315789473683, 0.20560526315789468],
    [0.6607908331714896, -0.8237413089920372, 0.5771792581083702, 0.10761147795688478],
    [0.5614588235400421, -0.5230221920076289, 0.04873209889350817, 0.03691431364528668],
    [0.4688596260602008, -0.2640320820469333, -0.3616861456287031, -0.010447084575854403],
    [0.46643860746386384, -0.2619456075794153, -0.36322202909807727, -0.011313597893227506],
    [0.46341556296854175, -0.25946410224258165, -0.3648101242029266, -0.011893844313172794],
    [0.4598779849130594, -0.25667902371591933, -0.36633641372565273, -0.012079144520397558],
];
const RADAM_L2_32: [[f64; 4]; 8] = [
    [0.8799999952316284, -1.5600000619888306, 2.0399999618530273, 0.3349999785423279],
    [0.766947329044342, -1.168631672859192, 1.2366315126419067, 0.20560523867607117],
    [0.6607908010482788, -0.8237414360046387, 0.5771791934967041, 0.10761145502328873],
    [0.5614587664604187, -0.5230222940444946, 0.04873202368617058, 0.036914292722940445],
    [0.46885955333709717, -0.26403218507766724, -0.36168622970581055, -0.01044710073620081],
    [0.46643853187561035, -0.2619457244873047, -0.3632221221923828, -0.011313613504171371],
    [0.4634154736995697, -0.25946423411369324, -0.3648102283477783, -0.011893859133124352],
    [0.4598779082298279, -0.25667914748191833, -0.36633652448654175, -0.012079158797860146],
];
const RADAMW_MAX_64: [[f64; 4]; 8] = [
    [1.1, -2.4, 3.9, 0.655],
    [1.204263157894737, -2.8381052631578947, 4.933105263157895, 0.8410815789473685],
    [1.3130789454262963, -3.3181452631578945, 6.117438999805788, 1.0636053135560304],
    [1.426752918621977, -3.844332231578947, 7.473577817424586, 1.3288318640388082],
    [1.545607587364999, -4.4212994355789474, 9.024882784072764, 1.6440715642684456],
    [1.5327718305890472, -4.379701645581492, 8.937221496865739, 1.6301825135231802],
    [1.5207780505229476, -4.339240767995064, 8.851159161016273, 1.6171545996729086],
    [1.5095247332849713, -4.299816014056075, 8.766595467291058, 1.604899917702431],
];
const RADAMW_MAX_32: [[f64; 4]; 8] = [
    [1.100000023841858, -2.4000000953674316, 3.9000000953674316, 0.6550000309944153],
    [1.2042632102966309, -2.8381054401397705, 4.93310546875, 0.8410816192626953],
    [1.3130789995193481, -3.318145275115967, 6.117439270019531, 1.0636054277420044],
    [1.426753044128418, -3.844332218170166, 7.473577976226807, 1.3288320302963257],
    [1.5456076860427856, -4.421299457550049, 9.024883270263672, 1.6440718173980713],
    [1.5327719449996948, -4.379701614379883, 8.93722152709961, 1.6301827430725098],
    [1.5207781791687012, -4.339240550994873, 8.851160049438477, 1.617154836654663],
    [1.5095248222351074, -4.299816131591797, 8.766596794128418, 1.6049001216888428],
];

fn nadam(p: Vec<Tensor>, decoupled: bool) -> NAdam {
    let o = NAdamOptions {
        lr: 0.1,
        weight_decay: 0.1,
        decoupled_weight_decay: decoupled,
        maximize: decoupled,
        ..Default::default()
    };
    let mut opt = NAdam::new(p, o).unwrap();
    opt.set_foreach(Some(true)).unwrap();
    opt
}

fn radam(p: Vec<Tensor>, decoupled: bool) -> RAdam {
    let o = RAdamOptions {
        lr: 0.1,
        weight_decay: 0.1,
        decoupled_weight_decay: decoupled,
        maximize: decoupled,
        ..Default::default()
    };
    let mut opt = RAdam::new(p, o).unwrap();
    opt.set_foreach(Some(true)).unwrap();
    opt
}

/// `make`'s 8 steps in f64 and f32 equal torch's, every value bit for bit.
/// `python` is the `run(...)` call (with `DTYPE`) that gives torch's
/// trajectory on this machine where `FULMEN_PYTHON` is set
/// (`torch_reference`); the recorded constants serve elsewhere.
fn assert_torch(
    name: &str,
    python: &str,
    make: impl Fn(Vec<Tensor>) -> Box<dyn Optimizer>,
    want64: &[[f64; 4]],
    want32: &[[f64; 4]],
) {
    for (kind, dtype, want) in [(Kind::Double, "float64", want64), (Kind::Float, "float32", want32)] {
        let m = Model::new(kind);
        let mut opt = make(m.params());
        let want: Vec<Vec<f64>> =
            torch_reference::trajectory(python, dtype).unwrap_or_else(|| want.iter().map(|r| r.to_vec()).collect());
        let got = m.run(opt.as_mut(), want.len());
        assert_eq!(got, want, "{name} {kind:?}");
        m.assert_v_untouched();
    }
}

#[test]
fn nadam_foreach_equals_torch_bit_for_bit() {
    let nadam_l2 = "run(torch.optim.NAdam, dict(lr=0.1, weight_decay=0.1, foreach=True), DTYPE, 8)";
    let nadamw = "run(torch.optim.NAdam, dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True, maximize=True, \
                  foreach=True), DTYPE, 8)";
    assert_torch("nadam", nadam_l2, |p| Box::new(nadam(p, false)), &NADAM_L2_64, &NADAM_L2_32);
    assert_torch("nadamw maximize", nadamw, |p| Box::new(nadam(p, true)), &NADAMW_MAX_64, &NADAMW_MAX_32);
}

#[test]
fn radam_foreach_equals_torch_bit_for_bit() {
    let radam_l2 = "run(torch.optim.RAdam, dict(lr=0.1, weight_decay=0.1, foreach=True), DTYPE, 8)";
    let radamw = "run(torch.optim.RAdam, dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True, maximize=True, \
                  foreach=True), DTYPE, 8)";
    assert_torch("radam", radam_l2, |p| Box::new(radam(p, false)), &RADAM_L2_64, &RADAM_L2_32);
    assert_torch("radamw maximize", radamw, |p| Box::new(radam(p, true)), &RADAMW_MAX_64, &RADAMW_MAX_32);
}

#[test]
fn foreach_state_equals_the_for_loop_state() {
    // The same entries, NAdam's float32 momentum product and the step
    // counts equal; the buffers only differ in their last bits.
    let scalars = |opt: &dyn Optimizer| -> Vec<(String, f64)> {
        let dict = opt.state_dict().unwrap();
        dict.into_iter()
            .filter(|(k, t)| !k.ends_with(".foreach") && t.dim() == 0)
            .map(|(k, t)| (k, t.double_value(&[])))
            .collect()
    };
    for decoupled in [false, true] {
        let (a, b) = (Model::new(Kind::Float), Model::new(Kind::Float));
        let mut foreach = nadam(a.params(), decoupled);
        let mut for_loop = nadam(b.params(), decoupled);
        for_loop.set_foreach(Some(false)).unwrap();
        a.run(&mut foreach, 5);
        b.run(&mut for_loop, 5);
        assert_eq!(scalars(&foreach), scalars(&for_loop));
        assert!(scalars(&foreach).iter().any(|(k, _)| k == "state.0.mu_product"));
        let mut foreach = radam(a.params(), decoupled);
        let mut for_loop = radam(b.params(), decoupled);
        for_loop.set_foreach(Some(false)).unwrap();
        a.run(&mut foreach, 3);
        b.run(&mut for_loop, 3);
        assert_eq!(scalars(&foreach), scalars(&for_loop));
    }
}

#[test]
fn foreach_state_round_trips() {
    for decoupled in [false, true] {
        check_round_trip(|p| Ok(nadam(p, decoupled)), 4);
        check_round_trip(|p| Ok(radam(p, decoupled)), 4);
    }
}
