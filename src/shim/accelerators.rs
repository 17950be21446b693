//! Declarations of `csrc/accelerators.cpp`: CUDA queries.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_cuda_compiled() -> c_int;
    pub(crate) fn fulmen_cxx_cuda_set_device(index: i64, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_empty_cache(err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_set_sync_debug_mode(mode: c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_memory_stats(
        index: i64,
        buf: *mut c_char,
        buf_len: size_t,
        needed: *mut size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_rng_get_state(
        index: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_rng_set_state(
        index: i64,
        state: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
