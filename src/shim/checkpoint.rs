//! Declarations of `csrc/checkpoint.cpp`: a forward run again in backward
//! (activation checkpointing).
use libc::{c_char, c_int, c_void, size_t};

/// A Rust forward the shim runs (a checkpoint's, again in backward, or
/// the one a trace records): reads the `n` borrowed `at::Tensor*` of
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

/// The `n` borrowed `at::Tensor*` a [`CheckpointForward`] reads, as
/// tensors of its own (shallow copies).
///
/// # Safety
/// `inputs` holds `n` live `at::Tensor*` (or `n` is 0).
pub(crate) unsafe fn forward_inputs(inputs: *const *const c_void, n: size_t) -> Vec<tch::Tensor> {
    if n == 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(inputs, n).iter().map(|p| tch::Tensor::clone_from_ptr(p.cast_mut().cast())).collect()
}

/// Pushes a [`CheckpointForward`]'s results on its `outputs` list.
///
/// # Safety
/// `outputs` is the list the shim handed the forward.
pub(crate) unsafe fn push_forward_outputs(outputs: *mut c_void, results: &[tch::Tensor]) -> crate::error::Result<()> {
    results.iter().try_for_each(|o| {
        super::call("a forward's output", |e, l| {
            fulmen_cxx_tensor_list_push(outputs, o.as_ptr() as *const c_void, e, l)
        })
    })
}

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
