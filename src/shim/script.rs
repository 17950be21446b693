//! Declarations of `csrc/script.cpp`: TorchScript modules of fulmen's own
//! and the values (`c10::IValue`) their methods take and return.
use libc::{c_char, c_int, c_void, size_t};

/// Receives one state tensor: (context, dotted name, new `at::Tensor*`, is a buffer).
pub(crate) type OnStateTensor = unsafe extern "C" fn(*mut c_void, *const c_char, *mut c_void, c_int);
/// Receives one method name: (context, name).
pub(crate) type OnName = unsafe extern "C" fn(*mut c_void, *const c_char);
/// Receives one child module: (context, dotted path, class name).
pub(crate) type OnChild = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char);

extern "C" {
    pub(crate) fn fulmen_cxx_script_load(
        fd: c_int,
        size: u64,
        device_type: c_int,
        device_index: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_free(m: *mut c_void);
    pub(crate) fn fulmen_cxx_script_state(
        m: *const c_void,
        on_tensor: OnStateTensor,
        ctx: *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_clone(
        m: *const c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_set_tensor(
        m: *mut c_void,
        name: *const c_char,
        tensor: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_set_training(m: *mut c_void, on: c_int, err: *mut c_char, err_len: size_t)
        -> c_int;
    pub(crate) fn fulmen_cxx_script_save(
        m: *const c_void,
        bytes: *mut *mut c_char,
        len: *mut size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_bytes_free(bytes: *mut c_char);
    pub(crate) fn fulmen_cxx_script_children(
        m: *const c_void,
        depth: c_int,
        on_child: OnChild,
        ctx: *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_methods(
        m: *const c_void,
        on_name: OnName,
        ctx: *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_has_method(
        m: *const c_void,
        name: *const c_char,
        found: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_num_returns(
        m: *const c_void,
        method: *const c_char,
        out: *mut size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_script_call(
        m: *mut c_void,
        method: *const c_char,
        args: *const *mut c_void,
        n: size_t,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;

    pub(crate) fn fulmen_cxx_value_none() -> *mut c_void;
    pub(crate) fn fulmen_cxx_value_bool(v: c_int) -> *mut c_void;
    pub(crate) fn fulmen_cxx_value_int(v: i64) -> *mut c_void;
    pub(crate) fn fulmen_cxx_value_double(v: f64) -> *mut c_void;
    pub(crate) fn fulmen_cxx_value_string(s: *const c_char, len: size_t) -> *mut c_void;
    pub(crate) fn fulmen_cxx_value_tensor(t: *const c_void) -> *mut c_void;
    pub(crate) fn fulmen_cxx_value_free(v: *mut c_void);
    pub(crate) fn fulmen_cxx_value_tuple(
        items: *const *mut c_void,
        n: size_t,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_value_list(
        items: *const *mut c_void,
        n: size_t,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_value_dict(
        keys: *const *mut c_void,
        values: *const *mut c_void,
        n: size_t,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_value_kind(v: *const c_void) -> c_int;
    pub(crate) fn fulmen_cxx_value_type_name(v: *const c_void, buf: *mut c_char, len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_value_to_bool(v: *const c_void) -> bool;
    pub(crate) fn fulmen_cxx_value_to_int(v: *const c_void) -> i64;
    pub(crate) fn fulmen_cxx_value_to_double(v: *const c_void) -> f64;
    pub(crate) fn fulmen_cxx_value_to_string(v: *const c_void, len: *mut size_t) -> *const c_char;
    pub(crate) fn fulmen_cxx_value_to_tensor(v: *const c_void) -> *mut c_void;
    pub(crate) fn fulmen_cxx_value_len(v: *const c_void) -> size_t;
    pub(crate) fn fulmen_cxx_value_items(
        v: *const c_void,
        out: *mut *mut c_void,
        extra: *mut *mut c_void,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    /// Traces `forward` into a new module (csrc/trace.cpp).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fulmen_cxx_script_trace(
        paths: *const *const c_char,
        classes: *const *const c_char,
        n_modules: size_t,
        names: *const *const c_char,
        tensors: *const *const c_void,
        is_buffer: *const c_int,
        n_state: size_t,
        inputs: *const *const c_void,
        n_inputs: size_t,
        forward: super::checkpoint::CheckpointForward,
        ctx: *mut c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
