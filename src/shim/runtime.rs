//! Declarations of `csrc/runtime.cpp`: deterministic algorithms, cuDNN benchmark, anomaly mode, CPU generator state,
//! a thread's libtorch thread-local state.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_set_deterministic(on: c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_deterministic() -> c_int;
    pub(crate) fn fulmen_cxx_set_deterministic_mode(
        on: c_int,
        warn_only: c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_deterministic_warn_only() -> c_int;
    pub(crate) fn fulmen_cxx_set_cudnn_benchmark(on: c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cudnn_benchmark() -> c_int;
    pub(crate) fn fulmen_cxx_set_anomaly(on: c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_anomaly() -> c_int;
    pub(crate) fn fulmen_cxx_grad_enabled() -> c_int;
    pub(crate) fn fulmen_cxx_torch_version() -> *const c_char;
    pub(crate) fn fulmen_cxx_cpu_rng_get_state(out: *mut *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cpu_rng_set_state(state: *const c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_tls_capture(out: *mut *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_tls_free(state: *mut c_void);
    pub(crate) fn fulmen_cxx_tls_apply(
        state: *const c_void,
        previous: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_tls_restore(previous: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
}
