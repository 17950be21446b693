//! Declarations of `csrc/xla_runtime.cpp` (starting torch_xla's backend
//! and its step marker) and `csrc/xla_collectives.cpp` (XLA's all-reduce).
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_xla_start(
        lib_dir: *const c_char,
        libpython: *const c_char,
        devices: *mut i64,
        global_devices: *mut i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_xla_step_marker(index: i64, wait: c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_xla_all_reduce(
        t: *mut c_void,
        op: *const c_char,
        scale: f64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_libtorch_dir(
        buf: *mut c_char,
        buf_len: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
