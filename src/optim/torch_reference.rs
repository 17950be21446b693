//! torch's own trajectories on this machine, for the parity tests.
//!
//! Some of torch's CPU kernels (MKL's dot products, the reductions behind
//! `.sum()`) pick their code by the processor, so torch's last bits differ
//! between CPUs, and fulmen's follow torch's on each. The constants in the
//! tests were recorded on one CPU; where `FULMEN_PYTHON` names a Python with
//! torch (`make test` sets it to its venv), the tests compare with what that
//! torch computes here instead, which is the claim they make.
use std::process::Command;

/// The Python of `test_util`'s docs: `run(cls, kw, dtype, steps)` trains
/// `w` on the quadratic and returns its values after each step.
const PRELUDE: &str = r#"
import torch
C = [0.5, 1.0, 1.5, 2.0]; D = [0.1, -0.2, 0.3, -0.4]
W0 = [1.0, -2.0, 3.0, 0.5]; V0 = [0.3, 0.7]
def model(dtype):
    w = torch.tensor(W0, dtype=dtype, requires_grad=True)
    v = torch.tensor(V0, dtype=dtype, requires_grad=True)  # never gets a grad
    return w, v, torch.tensor(C, dtype=dtype), torch.tensor(D, dtype=dtype)
def run(cls, kw, dtype, steps=5):
    w, v, c, d = model(dtype)
    opt = cls([w, v], **kw)
    out = []
    for _ in range(steps):
        loss = (c * w * w).sum() + (d * w).sum()
        loss.backward(); opt.step(); opt.zero_grad()
        out.append(w.detach().tolist())
    return out
def run_closure(cls, kw, dtype, steps=3):
    w, v, c, d = model(dtype)
    opt = cls([w, v], **kw)
    out = []
    def closure():
        opt.zero_grad()
        loss = (c * w * w).sum() + (d * w).sum()
        loss.backward(); return loss
    for _ in range(steps):
        opt.step(closure)
        out.append(w.detach().tolist())
    return out
"#;

/// torch's trajectory for the Python expression `expr` (which may use
/// `run`, `run_closure` and `DTYPE`) in `dtype` (`"float32"` or
/// `"float64"`), or None where `FULMEN_PYTHON` is not set. Panics when the
/// Python fails: a reference that was asked for must be there.
pub fn trajectory(expr: &str, dtype: &str) -> Option<Vec<Vec<f64>>> {
    let python = std::env::var_os("FULMEN_PYTHON")?;
    // repr() writes the shortest text that reads back as the same double,
    // and Rust's parse reads it exactly (a JSON reader need not).
    let script = format!(
        "{PRELUDE}\nDTYPE = torch.{dtype}\nfor row in {expr}:\n    print(' '.join(repr(float(x)) for x in row))\n"
    );
    let out = Command::new(&python)
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.to_string_lossy()));
    assert!(out.status.success(), "torch's reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("torch's reference prints text");
    let number = |x: &str| x.parse::<f64>().unwrap_or_else(|e| panic!("torch's reference printed {x:?}: {e}"));
    Some(text.lines().map(|row| row.split(' ').map(number).collect()).collect())
}
