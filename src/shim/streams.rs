//! Declarations of `csrc/streams.cpp`: copies on a side stream.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_side_stream_enter(
        device_type: c_int,
        index: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_side_stream_leave(
        handle: *mut c_void,
        done: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_side_stream_wait(
        done: *mut c_void,
        tensors: *const *const c_void,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_side_stream_drop(done: *mut c_void);
}
