//! Declarations of `csrc/profiler.cpp`: libtorch's profiler (Kineto).
use libc::{c_char, c_int, c_void, size_t};

/// Receives one recorded event: (context, name, duration in ns).
pub(crate) type OnEvent = unsafe extern "C" fn(*mut c_void, *const c_char, u64);

extern "C" {
    pub(crate) fn fulmen_cxx_profiler_start(cuda: c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_profiler_scope_begin(name: *const c_char) -> *mut c_void;
    pub(crate) fn fulmen_cxx_profiler_scope_end(scope: *mut c_void);
    pub(crate) fn fulmen_cxx_profiler_stop(
        path: *const c_char,
        on_event: OnEvent,
        ctx: *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
