//! Declarations of `csrc/pinned.cpp`: pinned host memory.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_is_pinned(t: *const c_void, out: *mut c_int, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_pin_memory(
        t: *const c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
