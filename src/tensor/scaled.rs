//! Ops tch does not expose, through the C++ shim (`csrc/ops.cpp`): those
//! with a scalar factor, one libtorch kernel each as torch.optim uses them,
//! `torch.gradient` over coordinates, and a seeded `torch.randperm`.
use crate::error::Result;
use crate::shim::{self, call};
use libc::c_void;
use tch::Tensor;

fn ptr(t: &Tensor) -> *mut c_void {
    t.as_ptr() as *mut c_void
}

/// In place `a += alpha * b` (torch's `a.add_(b, alpha=alpha)`).
pub fn add_(a: &mut Tensor, b: &Tensor, alpha: f64) -> Result<()> {
    // SAFETY: both pointers are live `at::Tensor*`; the shim catches exceptions.
    call("add_", |err, len| unsafe { shim::fulmen_cxx_add_(ptr(a), ptr(b), alpha, err, len) })
}

/// `a + alpha * b` (torch's `a.add(b, alpha=alpha)`).
pub fn add(a: &Tensor, b: &Tensor, alpha: f64) -> Result<Tensor> {
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: as above; `out` receives a heap `at::Tensor*` that `from_ptr` owns.
    call("add", |err, len| unsafe { shim::fulmen_cxx_add(ptr(a), ptr(b), alpha, &mut out, err, len) })?;
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

/// `torch.gradient(values, spacing=[coords])[0]` of 1-D tensors: central
/// differences over uneven coordinates inside, one-sided at the ends.
pub fn gradient(values: &Tensor, coords: &Tensor) -> Result<Tensor> {
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: live tensors; `out` receives a heap `at::Tensor*` that `from_ptr` owns.
    call("gradient", |err, len| unsafe { shim::fulmen_cxx_gradient(ptr(values), ptr(coords), &mut out, err, len) })?;
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

/// `torch.randperm(n, generator=torch.Generator().manual_seed(seed))`: the
/// same permutation torch draws for that seed.
pub fn randperm(n: i64, seed: u64) -> Result<Tensor> {
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: `out` receives a heap `at::Tensor*` that `from_ptr` owns.
    call("randperm", |err, len| unsafe { shim::fulmen_cxx_randperm(n, seed, &mut out, err, len) })?;
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

/// In place `a += value * t1 * t2` (torch's `addcmul_`).
pub fn addcmul_(a: &mut Tensor, t1: &Tensor, t2: &Tensor, value: f64) -> Result<()> {
    // SAFETY: live tensors; the shim catches exceptions.
    call("addcmul_", |err, len| unsafe { shim::fulmen_cxx_addcmul_(ptr(a), ptr(t1), ptr(t2), value, err, len) })
}

/// In place `a += value * t1 / t2` (torch's `addcdiv_`).
pub fn addcdiv_(a: &mut Tensor, t1: &Tensor, t2: &Tensor, value: f64) -> Result<()> {
    // SAFETY: live tensors; the shim catches exceptions.
    call("addcdiv_", |err, len| unsafe { shim::fulmen_cxx_addcdiv_(ptr(a), ptr(t1), ptr(t2), value, err, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_ops_match_plain_arithmetic() {
        let mut a = Tensor::from_slice(&[1.0f32, 2.0]);
        let b = Tensor::from_slice(&[10.0f32, 20.0]);
        add_(&mut a, &b, -0.5).unwrap();
        assert_eq!(Vec::<f32>::try_from(&a).unwrap(), vec![-4.0, -8.0]);
        assert_eq!(Vec::<f32>::try_from(&add(&a, &b, 2.0).unwrap()).unwrap(), vec![16.0, 32.0]);
        addcmul_(&mut a, &b, &b, 0.01).unwrap();
        assert_eq!(Vec::<f32>::try_from(&a).unwrap(), vec![-3.0, -4.0]);
        addcdiv_(&mut a, &b, &b, 3.0).unwrap();
        assert_eq!(Vec::<f32>::try_from(&a).unwrap(), vec![0.0, -1.0]);
        let wrong = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        assert!(add_(&mut a, &wrong, 1.0).is_err());
    }
}
