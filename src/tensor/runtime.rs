//! Process-wide libtorch settings reached through the C++ shim
//! (`csrc/runtime.cpp`): deterministic algorithms, autograd's anomaly mode
//! and the CPU generator's state.
use crate::error::Result;
use crate::shim::{self, call};
use libc::{c_int, c_void};
use tch::Tensor;

/// Turns libtorch's deterministic algorithms on or off (Lightning's
/// `deterministic=True`): ops without a deterministic implementation then
/// raise an error instead of running nondeterministically.
pub fn set_deterministic(on: bool) -> Result<()> {
    // SAFETY: the error buffer is valid for its length.
    call("set_deterministic", |err, len| unsafe { shim::fulmen_cxx_set_deterministic(c_int::from(on), err, len) })
}

/// Lightning's `deterministic` as libtorch's pair (on, warn_only):
/// `torch.use_deterministic_algorithms(on, warn_only=warn_only)`. With
/// `warn_only`, ops without a deterministic implementation warn and run.
pub fn set_deterministic_mode(on: bool, warn_only: bool) -> Result<()> {
    // SAFETY: the error buffer is valid for its length.
    call("set_deterministic", |err, len| unsafe {
        shim::fulmen_cxx_set_deterministic_mode(c_int::from(on), c_int::from(warn_only), err, len)
    })
}

/// The deterministic-algorithms setting as (on, warn_only).
pub fn deterministic_mode() -> (bool, bool) {
    // SAFETY: no arguments; the shim catches everything.
    unsafe { (shim::fulmen_cxx_deterministic() != 0, shim::fulmen_cxx_deterministic_warn_only() != 0) }
}

/// Sets `torch.backends.cudnn.benchmark` (process-wide): cuDNN then times
/// its convolution algorithms for each new input shape and keeps the
/// fastest. No effect on the CPU or without cuDNN.
pub fn set_cudnn_benchmark(on: bool) -> Result<()> {
    // SAFETY: the error buffer is valid for its length.
    call("set cudnn benchmark", |err, len| unsafe { shim::fulmen_cxx_set_cudnn_benchmark(c_int::from(on), err, len) })
}

/// `torch.backends.cudnn.benchmark`.
pub fn cudnn_benchmark() -> bool {
    // SAFETY: no arguments; the shim catches everything.
    unsafe { shim::fulmen_cxx_cudnn_benchmark() != 0 }
}

/// Whether autograd records operations on this thread
/// (`torch.is_grad_enabled()`: false inside no_grad).
pub fn grad_enabled() -> bool {
    // SAFETY: no arguments; the shim catches everything.
    unsafe { shim::fulmen_cxx_grad_enabled() != 0 }
}

/// The version of the libtorch headers fulmen was compiled against
/// (`TORCH_VERSION`, e.g. "2.13.0").
pub fn libtorch_version() -> &'static std::ffi::CStr {
    // SAFETY: the shim returns a pointer to a static NUL-terminated literal.
    unsafe { std::ffi::CStr::from_ptr(shim::fulmen_cxx_torch_version()) }
}

/// Whether deterministic algorithms are on.
pub fn deterministic() -> bool {
    // SAFETY: no arguments; the shim catches everything.
    unsafe { shim::fulmen_cxx_deterministic() != 0 }
}

/// Turns autograd's anomaly mode on or off (`torch.autograd.set_detect_anomaly`):
/// backward then fails on a NaN gradient, naming the function that made it
/// and where it was created. Process-wide; slows backward down.
pub fn set_anomaly(on: bool) -> Result<()> {
    // SAFETY: the error buffer is valid for its length.
    call("set_detect_anomaly", |err, len| unsafe { shim::fulmen_cxx_set_anomaly(c_int::from(on), err, len) })
}

/// Whether anomaly mode is on.
pub fn anomaly() -> bool {
    // SAFETY: no arguments; the shim catches everything.
    unsafe { shim::fulmen_cxx_anomaly() != 0 }
}

/// The state of libtorch's default CPU generator (a uint8 tensor).
pub fn cpu_rng_state() -> Result<Tensor> {
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: `out` receives a heap `at::Tensor*`, which `from_ptr` owns.
    call("get CPU RNG state", |err, len| unsafe { shim::fulmen_cxx_cpu_rng_get_state(&mut out, err, len) })?;
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

/// Restores libtorch's default CPU generator from [`cpu_rng_state`].
pub fn set_cpu_rng_state(state: &Tensor) -> Result<()> {
    // SAFETY: `as_ptr` is the `at::Tensor*` tch holds; the shim only reads it.
    call("set CPU RNG state", |err, len| unsafe { shim::fulmen_cxx_cpu_rng_set_state(state.as_ptr().cast(), err, len) })
}

/// One thread's libtorch thread-local state (grad mode, inference mode,
/// autocast, saved-tensor hooks, profiler callbacks), captured to be lent
/// to other threads, as `at::launch` does (`at::ThreadLocalState`), with
/// the FLOP counter's (a measurement's open module scopes and autograd
/// nodes, and the graph executor's optimization, off while measuring).
pub struct ThreadState {
    raw: *mut c_void,
    flops: crate::nn::flop_counter::ScopeDepth,
}

// SAFETY: the captured state is only read after capture (`apply` copies
// it), and reading it from several threads at once is what libtorch's own
// thread pools do.
unsafe impl Send for ThreadState {}
// SAFETY: as above.
unsafe impl Sync for ThreadState {}

impl ThreadState {
    /// Captures the calling thread's state.
    pub fn capture() -> Result<ThreadState> {
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: `out` receives a heap state, which `ThreadState` owns.
        call("capture the thread state", |err, len| unsafe { shim::fulmen_cxx_tls_capture(&mut out, err, len) })?;
        Ok(ThreadState { raw: out, flops: crate::nn::flop_counter::scope_depth() })
    }

    /// Makes this state the calling thread's; the returned value puts the
    /// thread's own state back.
    pub fn apply(&self) -> Result<PreviousThreadState> {
        let mut previous: *mut c_void = std::ptr::null_mut();
        // SAFETY: `self.raw` is a live captured state, only read; `previous`
        // receives a heap state owned by the returned value.
        call("lend the thread state", |err, len| unsafe {
            shim::fulmen_cxx_tls_apply(self.raw, &mut previous, err, len)
        })?;
        let flops = crate::nn::flop_counter::set_scope_depth(self.flops);
        Ok(PreviousThreadState { state: previous, flops, _not_send: std::marker::PhantomData })
    }
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        // SAFETY: made by `capture`, freed once.
        unsafe { shim::fulmen_cxx_tls_free(self.raw) };
    }
}

/// A thread's own libtorch state, saved by [`ThreadState::apply`] on that
/// thread: [`restore`](Self::restore) puts it back; dropped, it is only
/// freed (for a thread that is exiting).
pub struct PreviousThreadState {
    state: *mut c_void,
    flops: crate::nn::flop_counter::ScopeDepth,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl PreviousThreadState {
    /// Puts the saved state back on the calling thread (the one it was
    /// saved on).
    pub fn restore(mut self) -> Result<()> {
        let state = std::mem::replace(&mut self.state, std::ptr::null_mut());
        crate::nn::flop_counter::set_scope_depth(self.flops);
        // SAFETY: the heap state saved by `apply`; the shim frees it.
        call("restore the thread state", |err, len| unsafe { shim::fulmen_cxx_tls_restore(state, err, len) })
    }
}

impl Drop for PreviousThreadState {
    fn drop(&mut self) {
        // SAFETY: NULL after `restore`, else the state saved by `apply`;
        // freeing it touches no thread-local variable.
        unsafe { shim::fulmen_cxx_tls_free(self.state) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_state_round_trip_repeats_draws() {
        let _lock = crate::nn::init::test_rng_lock();
        tch::manual_seed(5);
        let state = cpu_rng_state().unwrap();
        let a = Tensor::f_rand([4], (tch::Kind::Float, tch::Device::Cpu)).unwrap();
        set_cpu_rng_state(&state).unwrap();
        let b = Tensor::f_rand([4], (tch::Kind::Float, tch::Device::Cpu)).unwrap();
        assert!(a.equal(&b));
    }

    #[test]
    fn thread_state_carries_grad_mode_to_another_thread() {
        let captured = tch::no_grad(|| ThreadState::capture().unwrap());
        assert!(grad_enabled());
        let seen = std::thread::scope(|s| {
            s.spawn(|| {
                let before = grad_enabled();
                let previous = captured.apply().unwrap();
                let lent = grad_enabled();
                previous.restore().unwrap();
                (before, lent, grad_enabled())
            })
            .join()
            .unwrap()
        });
        assert_eq!(seen, (true, false, true));
    }

    #[test]
    fn deterministic_warn_only_and_benchmark_switches() {
        let _lock = crate::trainer::run_settings::test_global_flags_lock();
        set_deterministic_mode(true, true).unwrap();
        assert_eq!(deterministic_mode(), (true, true));
        set_deterministic_mode(false, false).unwrap();
        assert_eq!(deterministic_mode(), (false, false));
        set_cudnn_benchmark(true).unwrap();
        assert!(cudnn_benchmark());
        set_cudnn_benchmark(false).unwrap();
        assert!(!cudnn_benchmark());
    }

    #[test]
    fn deterministic_switch() {
        let _lock = crate::trainer::run_settings::test_global_flags_lock();
        set_deterministic(true).unwrap();
        assert!(deterministic());
        set_deterministic(false).unwrap();
        assert!(!deterministic());
    }
}
