//! Declarations of `csrc/xla_runtime.cpp`: starting torch_xla's backend
//! and its step marker.
use libc::{c_char, c_int, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_xla_start(
        lib_dir: *const c_char,
        libpython: *const c_char,
        devices: *mut i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_xla_step_marker(index: i64, wait: c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_libtorch_dir(
        buf: *mut c_char,
        buf_len: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
