//! Declarations of `csrc/fsdp.cpp`: storages freed and refilled in place,
//! gradient hooks and `.grad` for fully sharded data parallel.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_storage_resize(
        t: *const c_void,
        nbytes: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_storage_nbytes(
        t: *const c_void,
        out: *mut size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_register_grad_hook(
        t: *const c_void,
        fire: extern "C" fn(*mut c_void),
        ctx: *mut c_void,
        drop: extern "C" fn(*mut c_void),
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_set_post_accumulate_hook(
        t: *const c_void,
        fire: Option<extern "C" fn(*mut c_void)>,
        ctx: *mut c_void,
        drop: Option<extern "C" fn(*mut c_void)>,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_set_grad(
        t: *const c_void,
        grad: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
