//! Declarations of `csrc/exported.cpp`: torch.export programs as
//! instruction lists over ATen operators, run through the dispatcher.
use libc::{c_char, c_int, c_void, size_t};

/// One argument of a node (`fulmen_cxx_ep_arg`); `kind` is an [`ArgKind`]
/// and says which fields count.
#[repr(C)]
pub(crate) struct EpArg {
    pub kind: i32,
    pub i: i64,
    pub f: f64,
    pub s: *const c_char,
    pub s_len: size_t,
    pub ints: *const i64,
    pub floats: *const f64,
    pub n: size_t,
}

/// A call of a run's hook before one instruction (`fulmen_cxx_ep_event`):
/// the slots whose tensors it is handed.
#[repr(C)]
pub(crate) struct EpEvent {
    /// The instruction the hook runs before (the number of instructions:
    /// after the last).
    pub before: i64,
    /// The slots whose tensors the hook is handed.
    pub slots: *const i64,
    /// How many.
    pub n_slots: size_t,
}

/// A run's hook (`fulmen_cxx_ep_hook`): context, event index, the tensors
/// (new `at::Tensor*` the hook owns, NULL for slots holding no tensor),
/// their count; non-zero fails the run.
pub(crate) type EpHook = extern "C" fn(*mut c_void, size_t, *mut *mut c_void, size_t) -> c_int;

/// The argument kinds of `csrc/exported.cpp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum ArgKind {
    None = 0,
    Slot = 1,
    Int = 2,
    Float = 3,
    Bool = 4,
    String = 5,
    Ints = 6,
    Floats = 7,
    Bools = 8,
    Tensors = 9,
    OptTensors = 10,
    SymInts = 11,
    Dtype = 12,
    Layout = 13,
    MemoryFormat = 14,
    Device = 15,
}

extern "C" {
    pub(crate) fn fulmen_cxx_ep_new(
        n_slots: i64,
        n_inputs: size_t,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_free(p: *mut c_void);
    pub(crate) fn fulmen_cxx_ep_op(
        p: *mut c_void,
        name: *const c_char,
        overload: *const c_char,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_builtin(
        p: *mut c_void,
        code: i32,
        name: *const c_char,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_arg(
        p: *mut c_void,
        keyword: *const c_char,
        arg: *const EpArg,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_out(
        p: *mut c_void,
        kind: i32,
        slots: *const i64,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_end(
        p: *mut c_void,
        drops: *const i64,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_outputs(
        p: *mut c_void,
        slots: *const i64,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_run(
        p: *const c_void,
        inputs: *const *const c_void,
        n_inputs: size_t,
        device_type: c_int,
        device_index: c_int,
        events: *const EpEvent,
        n_events: size_t,
        hook: Option<EpHook>,
        hook_ctx: *mut c_void,
        outputs: *mut *mut c_void,
        n_outputs: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_ep_alias(t: *const c_void) -> *mut c_void;
    pub(crate) fn fulmen_cxx_ep_aliases(p: *const c_void, index: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_ep_modules(
        p: *mut c_void,
        index: size_t,
        paths: *const *const c_char,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
