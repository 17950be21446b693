//! Declarations of `csrc/checkpoint.cpp`: a forward run again in backward
//! (activation checkpointing).
use libc::{c_char, c_int, c_void, size_t};

/// The forward a checkpoint runs: reads the `n` borrowed `at::Tensor*` of
/// `inputs`, pushes its outputs on `outputs` with
/// [`fulmen_cxx_tensor_list_push`]; 0 or a message in `err`.
pub(crate) type CheckpointForward = unsafe extern "C" fn(
    ctx: *mut c_void,
    inputs: *const *const c_void,
    n: size_t,
    outputs: *mut c_void,
    err: *mut c_char,
    err_len: size_t,
) -> c_int;

extern "C" {
    pub(crate) fn fulmen_cxx_tensor_list_push(
        list: *mut c_void,
        t: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fulmen_cxx_checkpoint(
        forward: CheckpointForward,
        ctx: *mut c_void,
        drop: unsafe extern "C" fn(*mut c_void),
        inputs: *const *const c_void,
        n: size_t,
        emit: unsafe extern "C" fn(sink: *mut c_void, output: *const c_void),
        sink: *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
