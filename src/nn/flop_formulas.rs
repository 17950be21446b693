//! FLOP formulas of the host's own, by operator: torch's
//! `register_flop_formula` and `FlopCounterMode(custom_mapping=...)`. A
//! formula counts an operator torch's formulas leave at 0 (an activation,
//! a norm, a custom operator a host's library registered with libtorch) or
//! replaces torch's formula for one of the operators it counts. It sees
//! the operator's arguments and results as torch's formulas do: tensors by
//! shape, everything else by value. The operator is then counted as the
//! built-in ones are: for the modules open around it, and nothing inside
//! it. A measurement uses the formulas registered when it begins (torch's
//! mode copies its registry when made), and an operator that decomposes
//! into others is not counted, its parts are (the mode decomposes before
//! it looks for a formula), so such an operator is refused.
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call, FlopValue};
use crate::tensor::DType;
use libc::{c_char, c_int, c_void};
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// One argument or result of an operator, as a formula sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum FlopArg {
    /// `None`, or an optional tensor left out.
    None,
    /// A tensor: its shape, and its dtype when fulmen has one for it.
    Tensor {
        /// The sizes.
        shape: Vec<i64>,
        /// The element type, `None` for one outside `fulmen_dtype`.
        dtype: Option<DType>,
    },
    /// An int (a dimension, a dtype's number, a SymInt's value).
    Int(i64),
    /// A float (`eps`, a scale).
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A string (`approximate="tanh"`).
    Str(String),
    /// A list of ints (a shape, strides, padding).
    Ints(Vec<i64>),
    /// A list or tuple of other values (tensors of `cat`, an output
    /// mask, several results).
    List(Vec<FlopArg>),
    /// Anything else (a device, a generator, a complex scalar).
    Other,
}

impl FlopArg {
    /// The shape of a tensor, `None` for any other value.
    pub fn shape(&self) -> Option<&[i64]> {
        match self {
            FlopArg::Tensor { shape, .. } => Some(shape),
            _ => None,
        }
    }
}

/// A FLOP formula: the FLOPs of one call of `op` ("aten::gelu") with
/// `inputs` (every argument of the operator's schema, in its order,
/// defaults and keyword-only ones included) that returned `outputs`. It
/// may be called from several threads at once.
pub trait FlopFormula: Send + Sync {
    /// The call's FLOPs, or an error that fails the measurement.
    fn flops(&self, op: &str, inputs: &[FlopArg], outputs: &[FlopArg]) -> Result<u64>;
}

impl<F> FlopFormula for F
where
    F: Fn(&str, &[FlopArg], &[FlopArg]) -> Result<u64> + Send + Sync,
{
    fn flops(&self, op: &str, inputs: &[FlopArg], outputs: &[FlopArg]) -> Result<u64> {
        self(op, inputs, outputs)
    }
}

/// The longest operator name taken ("namespace::name").
const MAX_OP_NAME: usize = 256;

/// Checks an operator's name as a formula's target: "namespace::name",
/// without an overload, as torch registers formulas by OpOverloadPacket.
fn op_name(op: &str) -> Result<CString> {
    let shaped = op.len() <= MAX_OP_NAME
        && op.split_once("::").is_some_and(|(ns, name)| {
            let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            word(ns) && word(name)
        });
    if !shaped {
        return Err(Error::invalid(format!(
            "a FLOP formula's operator is named \"namespace::name\" without an overload (\"aten::gelu\", as \
             torch.ops.aten.gelu), at most {MAX_OP_NAME} bytes: got {op:?}"
        )));
    }
    CString::new(op).map_err(|_| Error::invalid("operator name contains NUL"))
}

/// Registers `formula` for operator `op` ("aten::gelu", "mylib::fused"),
/// for the measurements that begin from now on (torch's
/// `register_flop_formula`); it replaces torch's formula for an operator
/// that has one. `InvalidArgument` when `op` is not so named, is no
/// operator of libtorch's (a custom operator's library is loaded first),
/// or decomposes into other operators in every overload (torch's mode
/// never counts it); `InvalidState` when a formula is registered for `op`
/// already. The formula is dropped once unregistered and no measurement
/// that began with it holds it still, on whichever thread lets go of it
/// last (autograd's threads included).
pub fn register_flop_formula(op: &str, formula: Arc<dyn FlopFormula>) -> Result<()> {
    let name = op_name(op)?;
    let ctx = Box::into_raw(Box::new(formula)).cast::<c_void>();
    // SAFETY: a C string alive for the call; `ctx` is the boxed formula
    // the trampolines expect, owned by the shim on success only.
    let registered = call("registering a FLOP formula", |err, len| unsafe {
        shim::fulmen_cxx_flops_register(name.as_ptr(), call_formula, ctx, drop_formula, err, len)
    });
    if registered.is_err() {
        // SAFETY: the shim did not take `ctx`.
        drop(unsafe { Box::from_raw(ctx.cast::<Arc<dyn FlopFormula>>()) });
    }
    registered
}

/// Unregisters the formula of operator `op`; whether there was one.
/// Measurements under way keep it to their end.
pub fn unregister_flop_formula(op: &str) -> Result<bool> {
    let name = op_name(op)?;
    let mut removed: c_int = 0;
    // SAFETY: a C string alive for the call and an int to write.
    call("unregistering a FLOP formula", |err, len| unsafe {
        shim::fulmen_cxx_flops_unregister(name.as_ptr(), &mut removed, err, len)
    })?;
    Ok(removed != 0)
}

/// Values nested deeper than this read as `Other` (the shim stops at 8).
const MAX_DEPTH: usize = 8;

/// The shim's values at `p` (`n` of them) as formula arguments.
///
/// # Safety
/// `p` is NULL or points to `n` values laid out as `FlopValue`, valid with
/// what they point to for the call.
unsafe fn args(p: *const FlopValue, n: usize, depth: usize) -> Vec<FlopArg> {
    if p.is_null() || n == 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(p, n).iter().map(|v| arg(v, depth)).collect()
}

/// # Safety
/// As [`args`], for one value.
unsafe fn arg(v: &FlopValue, depth: usize) -> FlopArg {
    let ints = |p: *const i64, n: usize| {
        if p.is_null() || n == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(p, n).to_vec()
        }
    };
    use crate::shim::flop_kind as K;
    match v.kind {
        K::NONE => FlopArg::None,
        K::TENSOR => FlopArg::Tensor { shape: ints(v.shape, v.ndim), dtype: DType::from_i32(v.dtype).ok() },
        K::INT => FlopArg::Int(v.integer),
        K::FLOAT => FlopArg::Float(v.number),
        K::BOOL => FlopArg::Bool(v.integer != 0),
        K::STRING if !v.text.is_null() => FlopArg::Str(CStr::from_ptr(v.text).to_string_lossy().into_owned()),
        K::INTS => FlopArg::Ints(ints(v.ints, v.num_ints)),
        K::LIST if depth < MAX_DEPTH => FlopArg::List(args(v.items, v.num_items, depth + 1)),
        _ => FlopArg::Other,
    }
}

/// Copies `text` into the shim's message buffer, NUL-terminated.
fn write_message(text: &str, err: *mut c_char, len: usize) {
    if err.is_null() || len == 0 {
        return;
    }
    let n = text.len().min(len - 1);
    // SAFETY: `err` holds `len` bytes; `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), err, n);
        *err.add(n) = 0;
    }
}

/// The shim's call of a registered formula: `ctx` is its boxed
/// `Arc<dyn FlopFormula>`.
unsafe extern "C" fn call_formula(
    ctx: *mut c_void,
    op: *const c_char,
    inputs: *const FlopValue,
    num_inputs: usize,
    outputs: *const FlopValue,
    num_outputs: usize,
    flops: *mut u64,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the shim passes the context it was given at
        // registration, alive while it holds the formula, and values and a
        // name valid for the call.
        let formula = unsafe { &*ctx.cast::<Arc<dyn FlopFormula>>() };
        let op = unsafe { CStr::from_ptr(op) }.to_string_lossy().into_owned();
        let ins = unsafe { args(inputs, num_inputs, 0) };
        let outs = unsafe { args(outputs, num_outputs, 0) };
        formula
            .flops(&op, &ins, &outs)
            .map_err(|e| Error::new(e.code, format!("the FLOP formula registered for {op} failed: {}", e.message)))
    }));
    let failed = match result {
        Ok(Ok(n)) => {
            // SAFETY: the shim's out slot.
            unsafe { *flops = n };
            return 0;
        }
        Ok(Err(e)) => e,
        Err(_) => Error::new(ErrorCode::Panic, "a registered FLOP formula panicked"),
    };
    write_message(&failed.message, err, err_len);
    failed.code as c_int
}

/// Drops a registered formula the shim no longer holds.
unsafe extern "C" fn drop_formula(ctx: *mut c_void) {
    // SAFETY: the box `register_flop_formula` made, dropped once.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(ctx.cast::<Arc<dyn FlopFormula>>()) })));
}
