//! Declarations of `csrc/graphs.cpp` (CUDA graphs) and of the fake
//! device's graph capture (`csrc/fake_device.cpp`, section 6).
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_cuda_graph_new(
        index: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_graph_begin(graph: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_graph_end(graph: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_graph_abort(graph: *mut c_void);
    pub(crate) fn fulmen_cxx_cuda_graph_replay(graph: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_cuda_graph_free(graph: *mut c_void);
    pub(crate) fn fulmen_cxx_fake_graph_begin(err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_fake_graph_end(out: *mut *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_fake_graph_abort();
    pub(crate) fn fulmen_cxx_fake_graph_replay(graph: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_fake_graph_free(graph: *mut c_void);
}
