//! Shared set-up of the optimizer tests: the tiny model whose torch.optim
//! trajectories were recorded with Python torch 2.13.0.
//!
//! Reference numbers come from this Python (torch 2.13.0, CPU):
//!
//! ```python
//! C = [0.5, 1.0, 1.5, 2.0]; D = [0.1, -0.2, 0.3, -0.4]
//! W0 = [1.0, -2.0, 3.0, 0.5]; V0 = [0.3, 0.7]
//! def run(cls, kw, dtype, steps=5):
//!     w = torch.tensor(W0, dtype=dtype, requires_grad=True)
//!     v = torch.tensor(V0, dtype=dtype, requires_grad=True)  # never gets a grad
//!     c = torch.tensor(C, dtype=dtype); d = torch.tensor(D, dtype=dtype)
//!     opt = cls([w, v], **kw)
//!     out = []
//!     for _ in range(steps):
//!         loss = (c * w * w).sum() + (d * w).sum()
//!         loss.backward(); opt.step(); opt.zero_grad()
//!         out.append(w.detach().tolist())
//!     return out
//! ```
use super::Optimizer;
use tch::{Kind, Tensor};

const C: [f64; 4] = [0.5, 1.0, 1.5, 2.0];
const D: [f64; 4] = [0.1, -0.2, 0.3, -0.4];
const W0: [f64; 4] = [1.0, -2.0, 3.0, 0.5];
const V0: [f64; 2] = [0.3, 0.7];

/// `w` is trained; `v` is handed to the optimizer but never gets a grad.
pub struct Model {
    pub w: Tensor,
    pub v: Tensor,
    c: Tensor,
    d: Tensor,
}

fn leaf(values: &[f64], kind: Kind) -> Tensor {
    Tensor::from_slice(values).to_kind(kind).set_requires_grad(true)
}

impl Model {
    pub fn new(kind: Kind) -> Self {
        Model {
            w: leaf(&W0, kind),
            v: leaf(&V0, kind),
            c: Tensor::from_slice(&C).to_kind(kind),
            d: Tensor::from_slice(&D).to_kind(kind),
        }
    }

    pub fn params(&self) -> Vec<Tensor> {
        vec![self.w.shallow_clone(), self.v.shallow_clone()]
    }

    pub fn backward(&self) {
        let loss = (&self.c * &self.w * &self.w).sum(Kind::Double) + (&self.d * &self.w).sum(Kind::Double);
        loss.backward();
    }

    pub fn w(&self) -> Vec<f64> {
        values(&self.w)
    }

    /// One training step as in the Python reference.
    pub fn train_step(&self, opt: &mut dyn Optimizer) {
        self.backward();
        opt.step().unwrap();
        opt.zero_grad();
    }

    /// `steps` training steps, returning `w` after each.
    pub fn run(&self, opt: &mut dyn Optimizer, steps: usize) -> Vec<Vec<f64>> {
        (0..steps)
            .map(|_| {
                self.train_step(opt);
                self.w()
            })
            .collect()
    }

    /// Checks that `v` (no grad) kept its initial values exactly.
    pub fn assert_v_untouched(&self) {
        let want: Vec<f64> = values(&Tensor::from_slice(&V0).to_kind(self.v.kind()));
        assert_eq!(values(&self.v), want);
    }
}

pub fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.detach().to_kind(Kind::Double).reshape([-1])).unwrap()
}

/// Runs `make` on f64 and f32 models for 5 steps and compares with torch's
/// trajectories: f64 to 1e-12 relative, f32 to 4 ulp-ish (2e-6 relative).
/// Returns the number of f32 values that are bit-identical to torch's.
pub fn check<O: Optimizer>(
    make: impl Fn(Vec<Tensor>) -> crate::error::Result<O>,
    want64: &[[f64; 4]],
    want32: &[[f32; 4]],
) -> usize {
    let m = Model::new(Kind::Double);
    let mut opt = make(m.params()).unwrap();
    let got = m.run(&mut opt, want64.len());
    for (step, (g, w)) in got.iter().zip(want64).enumerate() {
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "f64 step {step}: got {g:?} want {w:?}");
        }
    }
    m.assert_v_untouched();
    let m = Model::new(Kind::Float);
    let mut opt = make(m.params()).unwrap();
    let got = m.run(&mut opt, want32.len());
    let mut exact = 0;
    for (step, (g, w)) in got.iter().zip(want32).enumerate() {
        for (a, b) in g.iter().zip(w) {
            let b = *b as f64;
            assert!((a - b).abs() <= 2e-6 * b.abs().max(1.0), "f32 step {step}: got {g:?} want {w:?}");
            exact += usize::from(*a == b);
        }
    }
    m.assert_v_untouched();
    exact
}

/// A state dict round trip after `before` steps: a fresh optimizer loaded
/// from the dict continues bit for bit like the original.
pub fn check_round_trip<O: Optimizer>(make: impl Fn(Vec<Tensor>) -> crate::error::Result<O>, before: usize) {
    let a = Model::new(Kind::Float);
    let b = Model::new(Kind::Float);
    let mut opt_a = make(a.params()).unwrap();
    a.run(&mut opt_a, before);
    b.w.detach().copy_(&a.w);
    let dict = opt_a.state_dict().unwrap();
    let mut opt_b = make(b.params()).unwrap();
    opt_b.load_state_dict(&dict).unwrap();
    let names = |d: &[(String, Tensor)]| d.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(names(&opt_b.state_dict().unwrap()), names(&dict));
    let ra = a.run(&mut opt_a, 3);
    let rb = b.run(&mut opt_b, 3);
    assert_eq!(ra, rb, "{} round trip", opt_a.name());
}
