//! Declarations of `csrc/sync_reduce.cpp`: a differentiable sum over the
//! ranks (SyncBatchNorm).
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_sum_over_ranks(
        sum: unsafe extern "C" fn(ctx: *mut c_void, t: *const c_void, err: *mut c_char, err_len: size_t) -> c_int,
        ctx: *mut c_void,
        drop: unsafe extern "C" fn(*mut c_void),
        x: *const c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
