//! LBFGS against torch.optim.LBFGS trajectories, its state dict and its
//! refusals. The constants come from this Python (torch 2.13.0, CPU), on
//! the model of `test_util` with the loss summed in the parameters' dtype:
//!
//! ```python
//! def run(kw, dtype, steps=3):
//!     w = torch.tensor(W0, dtype=dtype, requires_grad=True)
//!     v = torch.tensor(V0, dtype=dtype, requires_grad=True)  # never gets a grad
//!     c = torch.tensor(C, dtype=dtype); d = torch.tensor(D, dtype=dtype)
//!     opt = torch.optim.LBFGS([w, v], **kw)
//!     out = []
//!     def closure():
//!         opt.zero_grad()
//!         loss = (c * w * w).sum() + (d * w).sum()
//!         loss.backward(); return loss
//!     for _ in range(steps):
//!         opt.step(closure)
//!         out.append(w.detach().tolist())
//!     return out
//! # FIXED: lr=0.1, max_iter=3, history_size=2
//! # WOLFE: lr=1, max_iter=4, history_size=3, line_search_fn="strong_wolfe"
//! ```
use super::*;
use crate::error::ErrorCode;
use crate::optim::test_util::values;
use crate::optim::torch_reference;
use tch::{Kind, Tensor};

/// A state dict.
type Dict = Vec<(String, Tensor)>;

const C: [f64; 4] = [0.5, 1.0, 1.5, 2.0];
const D: [f64; 4] = [0.1, -0.2, 0.3, -0.4];
const W0: [f64; 4] = [1.0, -2.0, 3.0, 0.5];
const V0: [f64; 2] = [0.3, 0.7];

struct Quadratic {
    w: Tensor,
    v: Tensor,
    c: Tensor,
    d: Tensor,
    evals: usize,
}

impl Quadratic {
    fn new(kind: Kind) -> Self {
        let leaf = |v: &[f64]| Tensor::from_slice(v).to_kind(kind).set_requires_grad(true);
        Quadratic {
            w: leaf(&W0),
            v: leaf(&V0),
            c: Tensor::from_slice(&C).to_kind(kind),
            d: Tensor::from_slice(&D).to_kind(kind),
            evals: 0,
        }
    }

    fn params(&self) -> Vec<Tensor> {
        vec![self.w.shallow_clone(), self.v.shallow_clone()]
    }

    /// torch's closure: zero_grad, the loss in the parameters' dtype,
    /// backward.
    fn evaluate(&mut self, opt_params: &[Tensor]) -> crate::error::Result<f64> {
        self.evals += 1;
        for p in opt_params {
            let mut p = p.shallow_clone();
            p.zero_grad();
        }
        let kind = self.w.kind();
        let loss = (&self.c * &self.w * &self.w).sum(kind) + (&self.d * &self.w).sum(kind);
        loss.backward();
        Ok(loss.double_value(&[]))
    }

    fn run(&mut self, opt: &mut Lbfgs, steps: usize) -> Vec<Vec<f64>> {
        let params = self.params();
        (0..steps)
            .map(|_| {
                opt.step_with_closure(&mut || self.evaluate(&params)).unwrap();
                values(&self.w)
            })
            .collect()
    }
}

fn fixed() -> LbfgsOptions {
    LbfgsOptions { lr: 0.1, max_iter: 3, history_size: 2, ..Default::default() }
}

fn wolfe() -> LbfgsOptions {
    LbfgsOptions { lr: 1.0, max_iter: 4, history_size: 3, strong_wolfe: true, ..Default::default() }
}

/// `kw` is the Python dict of the options, for torch's own trajectory on
/// this machine where `FULMEN_PYTHON` is set (`torch_reference`); the
/// recorded constants serve elsewhere.
fn check(opts: LbfgsOptions, kw: &str, want64: &[[f64; 4]; 3], want32: &[[f32; 4]; 3], evals: usize) {
    let python = format!("run_closure(torch.optim.LBFGS, {kw}, DTYPE, 3)");
    let want64: Vec<Vec<f64>> =
        torch_reference::trajectory(&python, "float64").unwrap_or_else(|| want64.iter().map(|r| r.to_vec()).collect());
    let mut m = Quadratic::new(Kind::Double);
    let mut opt = Lbfgs::new(m.params(), opts).unwrap();
    for (step, (g, w)) in m.run(&mut opt, 3).iter().zip(&want64).enumerate() {
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "f64 step {step}: got {g:?} want {w:?}");
        }
    }
    assert_eq!(m.evals, evals);
    assert_eq!(values(&m.v), V0.to_vec(), "a parameter without a gradient stays put");
    let mut m = Quadratic::new(Kind::Float);
    let mut opt = Lbfgs::new(m.params(), opts).unwrap();
    let got = m.run(&mut opt, 3);
    let want: Vec<Vec<f64>> = torch_reference::trajectory(&python, "float32")
        .unwrap_or_else(|| want32.iter().map(|r| r.iter().map(|v| *v as f64).collect()).collect());
    assert_eq!(got, want, "f32 trajectories are torch's bit for bit");
    assert_eq!(m.evals, evals);
}

#[test]
fn fixed_step_matches_torch() {
    check(fixed(), "dict(lr=0.1, max_iter=3, history_size=2)", &LBFGS_FIXED, &LBFGS_FIXED_F32, 9);
}

#[test]
fn strong_wolfe_matches_torch() {
    check(
        wolfe(),
        "dict(lr=1, max_iter=4, history_size=3, line_search_fn='strong_wolfe')",
        &LBFGS_WOLFE,
        &LBFGS_WOLFE_F32,
        11,
    );
}

#[test]
fn a_loaded_state_continues_bit_for_bit() {
    for opts in [fixed(), wolfe()] {
        let mut a = Quadratic::new(Kind::Float);
        let mut opt_a = Lbfgs::new(a.params(), opts).unwrap();
        a.run(&mut opt_a, 1);
        let dict = opt_a.state_dict().unwrap();
        assert!(
            dict.iter().any(|(k, _)| k == "state.0.old_dirs.0"),
            "{:?}",
            dict.iter().map(|(k, _)| k).collect::<Vec<_>>()
        );
        let mut b = Quadratic::new(Kind::Float);
        b.w.detach().copy_(&a.w);
        let mut opt_b = Lbfgs::new(b.params(), opts).unwrap();
        opt_b.load_state_dict(&dict).unwrap();
        let names = |d: &[(String, Tensor)]| d.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(names(&opt_b.state_dict().unwrap()), names(&dict));
        assert_eq!(a.run(&mut opt_a, 2), b.run(&mut opt_b, 2));
        // The same through torch's form (a Lightning checkpoint's).
        let torch = crate::checkpoint::lightning::optimizer_to_torch("lbfgs", &opt_a.state_dict().unwrap()).unwrap();
        let back = crate::checkpoint::lightning::optimizer_from_torch(&torch, "lbfgs").unwrap();
        let mut c = Quadratic::new(Kind::Float);
        c.w.detach().copy_(&a.w);
        let mut opt_c = Lbfgs::new(c.params(), opts).unwrap();
        opt_c.load_state_dict(&back).unwrap();
        assert_eq!(a.run(&mut opt_a, 1), c.run(&mut opt_c, 1));
    }
}

#[test]
fn a_failed_closure_keeps_the_history_and_the_parameters() {
    let mut m = Quadratic::new(Kind::Float);
    let params = m.params();
    let mut opt = Lbfgs::new(m.params(), fixed()).unwrap();
    m.run(&mut opt, 1);
    let before = opt.state_dict().unwrap();
    let weights = values(&m.w);
    let mut calls = 0;
    let err = opt
        .step_with_closure(&mut || {
            calls += 1;
            if calls == 2 {
                return Err(crate::error::Error::new(ErrorCode::Callback, "closure failed"));
            }
            m.evaluate(&params)
        })
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Callback);
    let after = opt.state_dict().unwrap();
    assert_eq!(before.len(), after.len());
    for ((k, a), (_, b)) in before.iter().zip(&after) {
        assert!(a.equal(b), "{k} changed");
    }
    assert_eq!(values(&m.w), weights, "the parameters are back where the step started");
}

#[test]
fn refusals() {
    let m = Quadratic::new(Kind::Float);
    let mut opt = Lbfgs::new(m.params(), fixed()).unwrap();
    assert_eq!(opt.step().unwrap_err().code, ErrorCode::Unsupported);
    assert!(opt.needs_closure());
    assert_eq!(opt.add_param_group(vec![], None).unwrap_err().code, ErrorCode::InvalidArgument);
    for bad in [
        LbfgsOptions { max_iter: 0, ..fixed() },
        LbfgsOptions { history_size: 0, ..fixed() },
        LbfgsOptions { history_size: MAX_HISTORY + 1, ..fixed() },
        LbfgsOptions { max_eval: Some(0), ..fixed() },
        LbfgsOptions { tolerance_grad: f64::NAN, ..fixed() },
        LbfgsOptions { lr: -1.0, ..fixed() },
    ] {
        assert_eq!(Lbfgs::new(m.params(), bad).unwrap_err().code, ErrorCode::InvalidArgument, "{bad:?}");
    }
    // Group values by torch's key, checked.
    use crate::optim::group_hyper::{get, set};
    assert_eq!(get(&opt, 0, "max_eval").unwrap(), 3.0, "torch's max_iter * 5 // 4");
    set(&mut opt, 0, "history_size", 5.0).unwrap();
    set(&mut opt, 0, "line_search_fn", 1.0).unwrap();
    for (key, bad) in [("history_size", 0.0), ("max_iter", 2.5), ("line_search_fn", 2.0), ("weight_decay", 0.1)] {
        assert_eq!(set(&mut opt, 0, key, bad).unwrap_err().code, ErrorCode::InvalidArgument, "{key} {bad}");
    }
    assert_eq!(get(&opt, 0, "history_size").unwrap(), 5.0);
}

#[test]
fn malformed_states_are_refused() {
    let mut m = Quadratic::new(Kind::Float);
    let mut opt = Lbfgs::new(m.params(), fixed()).unwrap();
    m.run(&mut opt, 1);
    let good = opt.state_dict().unwrap();
    let edited = |f: &dyn Fn(&mut Dict)| {
        let mut d: Dict = good.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
        f(&mut d);
        d
    };
    let cases: Vec<(&str, Dict)> = vec![
        ("no d", edited(&|d| d.retain(|(k, _)| k != "state.0.d"))),
        (
            "d of another size",
            edited(&|d| {
                d.iter_mut()
                    .filter(|(k, _)| k == "state.0.d")
                    .for_each(|(_, t)| *t = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu)))
            }),
        ),
        ("a gap in the history", edited(&|d| d.retain(|(k, _)| k != "state.0.old_stps.0"))),
        ("al past the pairs", edited(&|d| d.push(("state.0.al.9999999".into(), Tensor::from(1.0f32))))),
        ("an unknown key", edited(&|d| d.push(("state.0.momentum".into(), Tensor::from(1.0))))),
        ("another group", edited(&|d| d.push(("param_groups.1.lr".into(), Tensor::from(1.0))))),
        (
            "a fractional history size",
            edited(&|d| {
                d.iter_mut()
                    .filter(|(k, _)| k == "param_groups.0.history_size")
                    .for_each(|(_, t)| *t = Tensor::from(2.5f64))
            }),
        ),
    ];
    for (what, dict) in cases {
        let err = opt.load_state_dict(&dict).unwrap_err();
        assert_eq!(err.code, ErrorCode::Format, "{what}: {}", err.message);
    }
    // Nothing changed: the optimizer continues as before.
    opt.load_state_dict(&good).unwrap();
}

const LBFGS_FIXED: [[f64; 4]; 3] = [
    [0.9296832899926535, -1.782371978675958, 2.6307145836790182, 0.45583996318350495],
    [0.7779492346886704, -1.4267776165263515, 2.107845237454426, 0.3868566714243818],
    [0.6280375485374136, -1.135431272534706, 1.6871437497507344, 0.33203139505850765],
];
const LBFGS_FIXED_F32: [[f32; 4]; 3] = [
    [0.92968327, -1.7823707, 2.6307142, 0.45584002],
    [0.7779493, -1.4267764, 2.1078448, 0.3868567],
    [0.62803763, -1.1354302, 1.6871436, 0.33203143],
];
const LBFGS_WOLFE: [[f64; 4]; 3] = [
    [-0.055175921400204414, 0.1534600893695958, -0.09467329136916379, 0.12437691068761261],
    [-0.09999354877826956, 0.09999737142602372, -0.10000105307385947, 0.09999899208944328],
    [-0.09999354877826956, 0.09999737142602372, -0.10000105307385947, 0.09999899208944328],
];
const LBFGS_WOLFE_F32: [[f32; 4]; 3] = [
    [-0.055176213, 0.15346014, -0.094673514, 0.12437694],
    [-0.09999355, 0.09999737, -0.10000106, 0.099998996],
    [-0.09999355, 0.09999737, -0.10000106, 0.099998996],
];

/// Every number of an LBFGS state in torch's form (the group's
/// hyperparameters, the step length, the Hessian scale, the loss, the
/// history's scalars), set to NaN or an infinity, is refused naming it; a
/// NaN in fulmen's own form too, and the optimizer keeps its state.
#[test]
fn a_state_with_a_nan_or_an_infinity_is_refused() {
    use crate::checkpoint::lightning::{float_leaves, optimizer_from_torch, optimizer_to_torch, with_leaf};
    for opts in [fixed(), wolfe()] {
        let mut m = Quadratic::new(Kind::Float);
        let mut opt = Lbfgs::new(m.params(), opts).unwrap();
        m.run(&mut opt, 2);
        let dict = opt.state_dict().unwrap();
        let torch = optimizer_to_torch("lbfgs", &dict).unwrap();
        optimizer_from_torch(&torch, "lbfgs.ckpt").unwrap();
        let leaves = float_leaves(&torch);
        for key in ["lr", "tolerance_grad", "tolerance_change", "t", "prev_loss", "ro"] {
            assert!(
                leaves.iter().any(|l| l.key == key),
                "no {key} among {:?}",
                leaves.iter().map(|l| &l.name).collect::<Vec<_>>()
            );
        }
        for leaf in &leaves {
            for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let e = optimizer_from_torch(&with_leaf(&torch, &leaf.path, x), "lbfgs.ckpt")
                    .err()
                    .unwrap_or_else(|| panic!("{} = {x} accepted", leaf.name));
                assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
                assert!(
                    e.message.contains("lbfgs.ckpt") && e.message.contains(&leaf.key),
                    "{}: {}",
                    leaf.name,
                    e.message
                );
            }
        }
        let same =
            |a: &Dict, b: &Dict| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0 && x.1.equal(&y.1));
        for key in [
            "param_groups.0.lr",
            "param_groups.0.tolerance_change",
            "state.0.prev_loss",
            "state.0.t",
            "state.0.H_diag",
            "state.0.ro.0",
        ] {
            let bad: Dict = dict
                .iter()
                .map(|(k, t)| {
                    let t = if k == key {
                        Tensor::from_slice(&[f64::NAN]).to_kind(t.kind()).reshape(t.size())
                    } else {
                        t.shallow_clone()
                    };
                    (k.clone(), t)
                })
                .collect();
            assert!(bad.iter().any(|(k, _)| k == key), "no {key}");
            let e = opt.load_state_dict(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::Format, "{key}: {}", e.message);
            assert!(e.message.contains(key), "{}", e.message);
            assert!(same(&opt.state_dict().unwrap(), &dict), "a refused {key} changed the state");
        }
    }
}
