//! Declarations of `csrc/ops.cpp`: ops with a scalar factor that tch does not expose.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_randperm(
        n: i64,
        seed: u64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_gradient(
        values: *const c_void,
        coords: *const c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_add_(
        a: *mut c_void,
        b: *const c_void,
        alpha: f64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_add(
        a: *const c_void,
        b: *const c_void,
        alpha: f64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_addcmul_(
        a: *mut c_void,
        t1: *const c_void,
        t2: *const c_void,
        value: f64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_addcdiv_(
        a: *mut c_void,
        t1: *const c_void,
        t2: *const c_void,
        value: f64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
