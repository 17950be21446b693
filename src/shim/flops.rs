//! Declarations of `csrc/flops.cpp`: FLOP counting through RecordFunction.
use libc::{c_char, c_int, c_void, size_t};

/// Receives one operator's count: (context, module name or NULL for the
/// global count, operator name, FLOPs).
pub(crate) type OnCount = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char, u64);

/// The `kind`s of a [`FlopValue`], as `csrc/flops.cpp`'s
/// `FlopValueKind` numbers them (the C API's `fulmen_flop_value_kind`
/// numbers them alike).
pub(crate) mod flop_kind {
    /// None, or an optional tensor left out.
    pub const NONE: i32 = 0;
    /// A tensor: `shape`, `ndim`, `dtype` (a fulmen_dtype or -1).
    pub const TENSOR: i32 = 1;
    /// An int: `integer`.
    pub const INT: i32 = 2;
    /// A float: `number`.
    pub const FLOAT: i32 = 3;
    /// A bool: `integer` 0 or 1.
    pub const BOOL: i32 = 4;
    /// A string: `text`.
    pub const STRING: i32 = 5;
    /// A list of ints: `ints`, `num_ints`.
    pub const INTS: i32 = 6;
    /// A list or tuple: `items`, `num_items`. Any other kind (8) is
    /// anything else.
    pub const LIST: i32 = 7;
}

/// One argument or result of an operator as a host formula sees it
/// (`fulmen_cxx_flop_value`), of a [`flop_kind`].
#[repr(C)]
pub(crate) struct FlopValue {
    pub kind: i32,
    pub dtype: i32,
    pub shape: *const i64,
    pub ndim: size_t,
    pub integer: i64,
    pub number: f64,
    pub text: *const c_char,
    pub ints: *const i64,
    pub num_ints: size_t,
    pub items: *const FlopValue,
    pub num_items: size_t,
}

/// A registered formula: (context, operator, inputs, count, outputs, count,
/// FLOPs out, message buffer, its length) -> 0, or an error code with its
/// message written.
pub(crate) type FormulaFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    *const FlopValue,
    size_t,
    *const FlopValue,
    size_t,
    *mut u64,
    *mut c_char,
    size_t,
) -> c_int;

extern "C" {
    pub(crate) fn fulmen_cxx_flops_begin(err: *mut c_char, err_len: size_t) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fulmen_cxx_flops_end(
        on_count: OnCount,
        ctx: *mut c_void,
        overflow: *mut c_int,
        formula_code: *mut c_int,
        formula_err: *mut c_char,
        formula_err_len: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_flops_scope_push(name: *const c_char, err: *mut c_char, err_len: size_t) -> c_int;
    pub(crate) fn fulmen_cxx_flops_scope_pop();
    pub(crate) fn fulmen_cxx_flops_register(
        op: *const c_char,
        formula: FormulaFn,
        ctx: *mut c_void,
        drop: unsafe extern "C" fn(*mut c_void),
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_flops_unregister(
        op: *const c_char,
        removed: *mut c_int,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
