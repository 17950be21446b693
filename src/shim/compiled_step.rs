//! Declarations of `csrc/compiled_step.cpp`: AOTInductor packages of a
//! training step, and a loss tied to the gradients they computed.
use libc::{c_char, c_int, c_void, size_t};

/// Receives one metadata entry: (context, key, value).
pub(crate) type OnPair = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char);

extern "C" {
    pub(crate) fn fulmen_cxx_aoti_load(
        path: *const c_char,
        model_name: *const c_char,
        device_index: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_aoti_free(p: *mut c_void);
    pub(crate) fn fulmen_cxx_aoti_metadata(
        p: *mut c_void,
        on_pair: OnPair,
        ctx: *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_aoti_run(
        p: *mut c_void,
        inputs: *const *const c_void,
        n_inputs: size_t,
        outputs: *mut *mut c_void,
        n_outputs: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_loss_with_gradients(
        loss: *const c_void,
        params: *const *const c_void,
        grads: *const *const c_void,
        n: size_t,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
