//! Declarations of `csrc/flops.cpp`: FLOP counting through RecordFunction.
use libc::{c_char, c_int, c_void, size_t};

/// Receives one operator's count: (context, module name or NULL for the
/// global count, operator name, FLOPs).
pub(crate) type OnCount = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char, u64);

extern "C" {
    pub(crate) fn fulmen_cxx_flops_begin(err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_flops_end(
        on_count: OnCount,
        ctx: *mut c_void,
        overflow: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_flops_scope_push(name: *const c_char, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_flops_scope_pop();
}
