//! Declarations of `csrc/rank_function.cpp`: a differentiable step across
//! the ranks (SyncBatchNorm's sums, tensor parallelism's layers).
use libc::{c_char, c_int, c_void, size_t};

/// A Rust step: the forward (`backward` 0) or backward (1) of `input`,
/// written to `out` as a new `at::Tensor*`.
pub(crate) type RankFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    backward: c_int,
    input: *const c_void,
    out: *mut *mut c_void,
    err: *mut c_char,
    err_len: size_t,
) -> c_int;

extern "C" {
    pub(crate) fn fulmen_cxx_across_ranks(
        step: RankFn,
        ctx: *mut c_void,
        drop: unsafe extern "C" fn(*mut c_void),
        x: *const c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
