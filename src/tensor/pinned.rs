//! Pinned (page-locked) host memory, through the C++ shim
//! (`csrc/pinned.cpp`): batches copied there reach a GPU with an
//! asynchronous copy.
use crate::error::Result;
use crate::shim::{self, call};
use libc::{c_int, c_void};
use tch::Tensor;

/// Whether `t` is in pinned host memory (false on a device, and wherever
/// CUDA is not available).
pub fn is_pinned(t: &Tensor) -> Result<bool> {
    if t.device() != tch::Device::Cpu || !tch::Cuda::is_available() {
        return Ok(false);
    }
    let mut out: c_int = 0;
    // SAFETY: a live `at::Tensor*`; `out` and the error buffer are valid.
    call("is_pinned", |err, len| unsafe { shim::fulmen_cxx_is_pinned(t.as_ptr().cast(), &mut out, err, len) })?;
    Ok(out != 0)
}

/// `t` in pinned memory (`t.pin_memory()`): itself when already there or
/// not on the CPU; a copy otherwise. Needs CUDA.
pub fn pin(t: Tensor) -> Result<Tensor> {
    if t.device() != tch::Device::Cpu || is_pinned(&t)? {
        return Ok(t);
    }
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live `at::Tensor*`; `out` receives a heap `at::Tensor*` that
    // `from_ptr` owns.
    call("pin_memory", |err, len| unsafe { shim::fulmen_cxx_pin_memory(t.as_ptr().cast(), &mut out, err, len) })?;
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}
