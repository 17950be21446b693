//! Declarations of `csrc/distributed.cpp`: c10d stores, process groups, collectives and the Reducer.
use libc::{c_char, c_int, c_void, size_t};

/// A host collectives group handed to `fulmen_cxx_pg_new`
/// (`fulmen_cxx_collectives` of csrc/fulmen_cxx.h).
#[repr(C)]
pub(crate) struct CxxCollectives {
    pub ctx: *mut c_void,
    pub all_reduce: unsafe extern "C" fn(*mut c_void, *const *mut c_void, size_t, c_int, *mut c_char, size_t) -> c_int,
    pub broadcast: unsafe extern "C" fn(*mut c_void, *const *mut c_void, size_t, c_int, *mut c_char, size_t) -> c_int,
    pub all_gather:
        unsafe extern "C" fn(*mut c_void, *const c_void, *const *mut c_void, size_t, *mut c_char, size_t) -> c_int,
    pub barrier: unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> c_int,
    /// The shim's UNSUPPORTED status when the library has no reduce-scatter.
    pub reduce_scatter:
        unsafe extern "C" fn(*mut c_void, *const c_void, *mut c_void, c_int, *mut c_char, size_t) -> c_int,
    pub release: unsafe extern "C" fn(*mut c_void),
}

extern "C" {
    pub(crate) fn fulmen_cxx_dist_backends() -> c_int;
    pub(crate) fn fulmen_cxx_store_new(
        addr: *const c_char,
        port: c_int,
        rank: c_int,
        world: c_int,
        all_clients: c_int,
        connect_ms: i64,
        timeout_ms: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_store_joined(
        store: *mut c_void,
        out: *mut i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_store_free(store: *mut c_void);
    pub(crate) fn fulmen_cxx_store_prefixed(
        store: *mut c_void,
        prefix: *const c_char,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_store_set(
        store: *mut c_void,
        key: *const c_char,
        data: *const u8,
        len: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_store_get(
        store: *mut c_void,
        key: *const c_char,
        buf: *mut u8,
        capacity: size_t,
        len: *mut size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_store_check(
        store: *mut c_void,
        key: *const c_char,
        present: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_store_add(
        store: *mut c_void,
        key: *const c_char,
        delta: i64,
        out: *mut i64,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_store_delete(
        store: *mut c_void,
        key: *const c_char,
        deleted: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_new(
        store: *mut c_void,
        rank: c_int,
        world: c_int,
        timeout_ms: i64,
        addr: *const c_char,
        backend: *const c_char,
        device_index: c_int,
        device_type: c_int,
        hooks: *const CxxCollectives,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_free(group: *mut c_void);
    pub(crate) fn fulmen_cxx_pg_subgroup(
        parent: *mut c_void,
        name: *const c_char,
        rank: c_int,
        world: c_int,
        backend: *const c_char,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_allreduce(
        group: *mut c_void,
        tensors: *const *mut c_void,
        n: size_t,
        op: c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_broadcast(
        group: *mut c_void,
        tensors: *const *mut c_void,
        n: size_t,
        root: c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_broadcast_coalesced(
        group: *mut c_void,
        tensors: *const *mut c_void,
        n: size_t,
        root: c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_allgather(
        group: *mut c_void,
        input: *const c_void,
        outputs: *const *mut c_void,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_allgather_flat_start(
        group: *mut c_void,
        input: *const c_void,
        output: *mut c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_work_wait(work: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_work_is_completed(
        work: *mut c_void,
        done: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_work_free(work: *mut c_void);
    pub(crate) fn fulmen_cxx_pg_reduce_scatter_flat(
        group: *mut c_void,
        input: *const c_void,
        output: *mut c_void,
        op: c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_pg_barrier(group: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_pg_verify_params(
        group: *mut c_void,
        params: *const *mut c_void,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_reducer_new(
        group: *mut c_void,
        params: *const *mut c_void,
        n: size_t,
        find_unused: c_int,
        bucket_limits: *const i64,
        n_limits: size_t,
        bucket_cap_bytes: i64,
        first_bucket_bytes: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_reducer_free(reducer: *mut c_void);
    pub(crate) fn fulmen_cxx_reducer_prepare_forward(reducer: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_reducer_rebuild_buckets(
        reducer: *mut c_void,
        rebuilt: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_reducer_prepare_backward(
        reducer: *mut c_void,
        outputs: *const *mut c_void,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
