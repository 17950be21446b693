//! Declarations of `csrc/autocast.cpp`: autocast state per device type.
use libc::{c_char, c_int, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_autocast_is_available(
        device_type: c_int,
        out: *mut c_int,
        err: *mut c_char,
        len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_is_enabled(
        device_type: c_int,
        out: *mut c_int,
        err: *mut c_char,
        len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_set_enabled(
        device_type: c_int,
        enabled: c_int,
        err: *mut c_char,
        len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_get_dtype(
        device_type: c_int,
        out: *mut c_int,
        err: *mut c_char,
        len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_set_dtype(
        device_type: c_int,
        dtype: c_int,
        err: *mut c_char,
        len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_increment_nesting(out: *mut c_int, err: *mut c_char, len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_decrement_nesting(out: *mut c_int, err: *mut c_char, len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_clear_cache(err: *mut c_char, len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_is_cache_enabled(out: *mut c_int, err: *mut c_char, len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_autocast_set_cache_enabled(enabled: c_int, err: *mut c_char, len: size_t) -> c_int;
}
