//! FLOP formulas of the host's own (`fulmen_flops_register_formula`):
//! torch's `register_flop_formula`, FlopCounterMode's `custom_mapping`.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{error_from_raw, fulmen_error, guard, str_arg};
use crate::ffi::tensor::TensorScope;
use crate::nn::{FlopArg, FlopFormula};
use libc::{c_char, c_void};
use std::ffi::CString;
use std::sync::{Arc, Mutex};

/// What a `fulmen_flop_value` holds.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum fulmen_flop_value_kind {
    /// `None`, or an optional tensor left out.
    None = 0,
    /// A tensor: `shape` (`ndim` sizes) and `dtype`.
    Tensor = 1,
    /// An int (a dimension, a dtype's number): `integer`.
    Int = 2,
    /// A float (`eps`, a scale): `number`.
    Float = 3,
    /// A bool: `integer`, 0 or 1.
    Bool = 4,
    /// A string (`approximate`): `text`, NUL-terminated UTF-8.
    String = 5,
    /// A list of ints (a shape, strides, padding): `ints` (`num_ints`).
    Ints = 6,
    /// A list or tuple of other values (the tensors of `cat`, an output
    /// mask): `items` (`num_items`).
    List = 7,
    /// Anything else (a device, a generator, a complex scalar).
    Other = 8,
}

/// One argument or result of an operator, as a FLOP formula sees it:
/// tensors by shape, as torch's formulas see them, everything else by
/// value. Only the fields of its `kind` are set (the others are 0 or NULL).
/// It and everything it points to are valid during the formula's call
/// only.
#[repr(C)]
pub struct fulmen_flop_value {
    /// What the value holds.
    pub kind: fulmen_flop_value_kind,
    /// FULMEN_FLOP_VALUE_KIND_TENSOR: its `fulmen_dtype`, or -1 for a dtype
    /// outside `fulmen_dtype` (complex, float8).
    pub dtype: i32,
    /// FULMEN_FLOP_VALUE_KIND_TENSOR: its sizes.
    pub shape: *const i64,
    /// FULMEN_FLOP_VALUE_KIND_TENSOR: how many sizes `shape` holds.
    pub ndim: usize,
    /// FULMEN_FLOP_VALUE_KIND_INT: the int; FULMEN_FLOP_VALUE_KIND_BOOL: 0 or 1.
    pub integer: i64,
    /// FULMEN_FLOP_VALUE_KIND_FLOAT: the float.
    pub number: f64,
    /// FULMEN_FLOP_VALUE_KIND_STRING: the string.
    pub text: *const c_char,
    /// FULMEN_FLOP_VALUE_KIND_INTS: the ints.
    pub ints: *const i64,
    /// FULMEN_FLOP_VALUE_KIND_INTS: how many ints `ints` holds.
    pub num_ints: usize,
    /// FULMEN_FLOP_VALUE_KIND_LIST: the elements.
    pub items: *const fulmen_flop_value,
    /// FULMEN_FLOP_VALUE_KIND_LIST: how many elements `items` holds.
    pub num_items: usize,
}

impl fulmen_flop_value {
    fn of(kind: fulmen_flop_value_kind) -> Self {
        fulmen_flop_value {
            kind,
            dtype: -1,
            shape: std::ptr::null(),
            ndim: 0,
            integer: 0,
            number: 0.0,
            text: std::ptr::null(),
            ints: std::ptr::null(),
            num_ints: 0,
            items: std::ptr::null(),
            num_items: 0,
        }
    }
}

/// A FLOP formula of the host's: writes to `*flops` the FLOPs of one call
/// of operator `op` ("aten::gelu") with `inputs` (every argument of the
/// operator's schema in its order, defaults and keyword-only arguments
/// included; `num_inputs` of them) that returned `outputs` (`num_outputs`),
/// and returns NULL; or returns an error, which fails the measurement with
/// its code (FULMEN_CODE_CALLBACK for an invalid one) and message. `op`,
/// `inputs` and `outputs` are valid during the call only. It may be called
/// from several threads at once (threads measure apart; a backward's
/// operators run on autograd's threads), while an operator returns, with
/// libtorch's operators it calls itself not counted. A model another
/// call holds, such as the model being measured, is refused to it with
/// FULMEN_CODE_INVALID_STATE rather than waited for (from autograd's
/// threads the measurement could never end). It must not throw or unwind
/// through fulmen. An operator whose schema returns nothing (`_fused_adam_`) is
/// called with no outputs.
pub type fulmen_flop_formula_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        op: *const c_char,
        inputs: *const fulmen_flop_value,
        num_inputs: usize,
        outputs: *const fulmen_flop_value,
        num_outputs: usize,
        flops: *mut u64,
    ) -> *mut fulmen_error,
>;

type FormulaFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    *const fulmen_flop_value,
    usize,
    *const fulmen_flop_value,
    usize,
    *mut u64,
) -> *mut fulmen_error;

/// The host's formula and its userdata, freed once when fulmen drops it.
struct HostFormula {
    formula: FormulaFn,
    userdata: *mut c_void,
    /// Armed once the formula is registered: a failed registration leaves
    /// the userdata the host's.
    free: Mutex<Option<unsafe extern "C" fn(*mut c_void)>>,
}

// SAFETY: the header tells the host that its formula and userdata are used
// from any thread, several at once; fulmen touches the pointer only to
// pass it back.
unsafe impl Send for HostFormula {}
unsafe impl Sync for HostFormula {}

impl Drop for HostFormula {
    fn drop(&mut self) {
        let free = self.free.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(f) = free {
            // SAFETY: the host's destructor for its own pointer, called once.
            unsafe { f(self.userdata) };
        }
    }
}

/// The storage behind the values handed to one formula call.
#[derive(Default)]
struct Laid {
    lists: Vec<Vec<fulmen_flop_value>>,
    texts: Vec<CString>,
}

/// The start of `v`, NULL when it is empty (as the header promises).
fn ptr_or_null<T>(v: &[T]) -> *const T {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr()
    }
}

/// `args` as C values; they point into `args` and `laid`.
fn lay_out(args: &[FlopArg], laid: &mut Laid) -> Vec<fulmen_flop_value> {
    use fulmen_flop_value_kind as K;
    args.iter()
        .map(|a| match a {
            FlopArg::None => fulmen_flop_value::of(K::None),
            FlopArg::Tensor { shape, dtype } => fulmen_flop_value {
                dtype: dtype.map_or(-1, |d| d as i32),
                shape: ptr_or_null(shape),
                ndim: shape.len(),
                ..fulmen_flop_value::of(K::Tensor)
            },
            FlopArg::Int(v) => fulmen_flop_value { integer: *v, ..fulmen_flop_value::of(K::Int) },
            FlopArg::Float(v) => fulmen_flop_value { number: *v, ..fulmen_flop_value::of(K::Float) },
            FlopArg::Bool(v) => fulmen_flop_value { integer: i64::from(*v), ..fulmen_flop_value::of(K::Bool) },
            FlopArg::Str(s) => match CString::new(s.as_str()) {
                Ok(c) => {
                    let text = c.as_ptr();
                    laid.texts.push(c);
                    fulmen_flop_value { text, ..fulmen_flop_value::of(K::String) }
                }
                Err(_) => fulmen_flop_value::of(K::Other),
            },
            FlopArg::Ints(v) => {
                fulmen_flop_value { ints: ptr_or_null(v), num_ints: v.len(), ..fulmen_flop_value::of(K::Ints) }
            }
            FlopArg::List(items) => {
                let items = lay_out(items, laid);
                let (ptr, len) = (ptr_or_null(&items), items.len());
                laid.lists.push(items);
                fulmen_flop_value { items: ptr, num_items: len, ..fulmen_flop_value::of(K::List) }
            }
            FlopArg::Other => fulmen_flop_value::of(K::Other),
        })
        .collect()
}

impl FlopFormula for HostFormula {
    fn flops(&self, op: &str, inputs: &[FlopArg], outputs: &[FlopArg]) -> Result<u64> {
        let mut laid = Laid::default();
        let ins = lay_out(inputs, &mut laid);
        let outs = lay_out(outputs, &mut laid);
        let name = CString::new(op).map_err(|_| Error::invalid("operator name contains NUL"))?;
        let mut flops = 0u64;
        let _scope = TensorScope::enter();
        let _in_formula = crate::ffi::nn::model::InFlopFormula::enter();
        // SAFETY: the host's formula with its userdata; the values and the
        // name live until it returns.
        let err = unsafe {
            (self.formula)(self.userdata, name.as_ptr(), ins.as_ptr(), ins.len(), outs.as_ptr(), outs.len(), &mut flops)
        };
        // SAFETY: NULL or an error handle the host handed over.
        match unsafe { error_from_raw(err) } {
            None => Ok(flops),
            Some(e) => {
                let code = if e.code == ErrorCode::InvalidHandle { ErrorCode::Callback } else { e.code };
                Err(Error::new(code, e.message))
            }
        }
    }
}

/// Registers `formula` as the FLOP formula of operator `op`
/// ("namespace::name" without an overload, as torch's
/// `register_flop_formula(torch.ops.aten.gelu)`): FLOP measurements that
/// begin from now on (`fulmen_measure_flops`,
/// `fulmen_model_measure_flops`, their `_by_module` forms, the FlopsTable
/// callback) call it for every call of `op` torch's FlopCounterMode would
/// see, and count what it returns for the modules open around the call, as
/// they count matrix products. It replaces torch's formula for an operator
/// that has one (`aten::mm`), as the mode's `custom_mapping` does. The
/// operators `op` runs inside are not counted (the mode does not see them).
/// A measurement under way keeps the formulas it began with.
///
/// Ownership: `userdata` is passed to every call; on success fulmen calls
/// `userdata_free(userdata)` (when not NULL) once, after the formula is
/// unregistered and no measurement that began with it holds it still: on
/// any thread (the one unregistering, the one ending such a measurement,
/// or one of autograd's, possibly just after the measurement returned);
/// never at the process's exit. On failure neither is used.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`op` or `formula` NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (`op` not "namespace::name", no operator
/// of libtorch's (load a custom operator's library first), or an operator
/// that decomposes into others in all its overloads but `out=` ones, such
/// as `aten::linear`: torch's mode never counts those, register the
/// operators it runs), FULMEN_CODE_INVALID_STATE (a formula is registered
/// for `op` already: unregister it first).
///
/// Thread rules: any thread; the registry is process-wide.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flops_register_formula(
    op: *const c_char,
    formula: fulmen_flop_formula_fn,
    userdata: *mut c_void,
    userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut fulmen_error {
    guard!(|| {
        let op = str_arg(op, "op")?;
        let formula = formula.ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `formula` is NULL"))?;
        let host = Arc::new(HostFormula { formula, userdata, free: Mutex::new(None) });
        crate::nn::register_flop_formula(op, host.clone())?;
        *host.free.lock().unwrap_or_else(|p| p.into_inner()) = userdata_free;
        Ok(())
    })
}

/// Unregisters the FLOP formula of operator `op` registered by
/// `fulmen_flops_register_formula`; writes to `*removed` (when not NULL)
/// whether one was registered. Measurements under way keep it to their
/// end; later ones count `op` as torch does again.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`op` NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (`op` not "namespace::name").
///
/// Thread rules: any thread, a formula's own call included.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flops_unregister_formula(op: *const c_char, removed: *mut bool) -> *mut fulmen_error {
    guard!(|| {
        let op = str_arg(op, "op")?;
        let was = crate::nn::unregister_flop_formula(op)?;
        if !removed.is_null() {
            // SAFETY: the caller's out slot, checked non-NULL.
            unsafe { *removed = was };
        }
        Ok(())
    })
}
