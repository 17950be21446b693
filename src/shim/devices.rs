//! Declarations of `csrc/devices.cpp` (tensors on any libtorch device type)
//! and `csrc/fake_device.cpp` (the fake PrivateUse1 device for tests).
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_tensor_to_device(
        t: *const c_void,
        device_type: c_int,
        index: i64,
        non_blocking: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_tensor_new_on_device_of(
        device_like: *const c_void,
        dtype_like: *const c_void,
        shape: *const i64,
        ndim: size_t,
        zeroed: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_tensor_identity(
        t: *const c_void,
        by_impl: c_int,
        out: *mut usize,
        is_data: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_tensor_assign(
        dst: *mut c_void,
        src: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_tensor_sharing(
        t: *const c_void,
        use_count: *mut size_t,
        is_view: *mut c_int,
        storage: *mut usize,
        storage_count: *mut size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_tensor_set_data_compatible(
        t: *const c_void,
        data: *const c_void,
        out: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_tensor_device(
        t: *const c_void,
        device_type: *mut c_int,
        index: *mut i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_device_type_name(
        device_type: c_int,
        buf: *mut c_char,
        buf_len: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_device_count(
        device_type: c_int,
        out: *mut i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_device_set_current(
        device_type: c_int,
        index: i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_device_synchronize(
        device_type: c_int,
        index: i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_device_rng_state(
        device_type: c_int,
        index: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_device_set_rng_state(
        device_type: c_int,
        index: i64,
        state: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_fake_device_register(
        name: *const c_char,
        count: i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_fake_device_host_reads(out: *mut u64, err: *mut c_char, err_len: size_t) -> c_int;
}
