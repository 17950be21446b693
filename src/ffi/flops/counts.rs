//! `fulmen_flop_counts`: what a FLOP measurement counted, by module and
//! operator (`FlopCounterMode.get_flop_counts()` and `get_table()`).
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, opt_str};
use crate::ffi::base::handle::{self, check_out, write_out, Handle};
use crate::ffi::nn::model::copy_str;
use crate::nn::FlopCounts;
use libc::c_char;

/// The FLOPs a measurement counted, as PyTorch's `FlopCounterMode` keeps
/// them: in total, by operator, and by module. Read-only; any thread may
/// read it. Free with `fulmen_flop_counts_free`.
pub struct fulmen_flop_counts {
    counts: FlopCounts,
    /// "Global", then the modules in name order.
    modules: Vec<String>,
}

impl Handle for fulmen_flop_counts {
    const C_NAME: &'static str = "fulmen_flop_counts";
}

/// Hands `counts` to C as a new `fulmen_flop_counts` in `*out`.
pub(crate) unsafe fn emit_counts(out: *mut *mut fulmen_flop_counts, counts: FlopCounts) -> Result<()> {
    let modules = std::iter::once("Global".to_owned()).chain(counts.by_module.keys().cloned()).collect();
    write_out(out, "out", handle::into_raw(fulmen_flop_counts { counts, modules }))
}

/// The module a `module` argument names: NULL is "Global", the whole
/// measurement.
unsafe fn module_arg(module: *const c_char) -> Result<String> {
    Ok(opt_str(module, "module")?.unwrap_or_else(|| "Global".to_owned()))
}

/// The operators of `module` (NULL: "Global") in the order first counted;
/// none for a module that counted nothing.
unsafe fn operators(c: &fulmen_flop_counts, module: *const c_char) -> Result<Vec<(&str, u64)>> {
    Ok(c.counts.operators(&module_arg(module)?))
}

/// Writes to `*out` the FLOPs counted for `module` (its name as
/// `fulmen_flop_counts_module_name` gives it; NULL or "Global" for the whole
/// measurement, `get_total_flops()`): 0 for a module that counted none.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_INVALID_ARGUMENT (`module` not UTF-8).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flop_counts_total(
    counts: *const fulmen_flop_counts,
    module: *const c_char,
    out: *mut u64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let c = handle::borrow(counts, "counts")?;
        write_out(out, "out", c.counts.module_total(&module_arg(module)?)?)
    })
}

/// Writes to `*out` how many modules have counts: "Global" (index 0) and
/// every module that counted FLOPs.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE.
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flop_counts_num_modules(
    counts: *const fulmen_flop_counts,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        write_out(out, "out", handle::borrow(counts, "counts")?.modules.len())
    })
}

/// Copies the name of module `index` NUL-terminated into `buf` as
/// `fulmen_model_state_dict_name` does: "Global" at 0, then the modules in
/// name order, each named as FlopCounterMode names it: the root module's
/// class ("MLP"; a TorchScript module's class, an exported program's root
/// class, or fulmen's type name, "Sequential"), then the state_dict path
/// of each module below it ("MLP.net.0").
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_OUT_OF_RANGE (`index` past the modules, or `capacity` too
/// small: `*len_out` is written).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flop_counts_module_name(
    counts: *const fulmen_flop_counts,
    index: usize,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let c = handle::borrow(counts, "counts")?;
        let name = c
            .modules
            .get(index)
            .ok_or_else(|| Error::new(ErrorCode::OutOfRange, format!("module {index} of {}", c.modules.len())))?;
        copy_str(name, buf, capacity, len_out)
    })
}

/// Writes to `*out` how many operators counted FLOPs in `module` (NULL or
/// "Global": in the whole measurement); 0 for a module that counted none.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_INVALID_ARGUMENT (`module` not UTF-8).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flop_counts_num_operators(
    counts: *const fulmen_flop_counts,
    module: *const c_char,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let c = handle::borrow(counts, "counts")?;
        write_out(out, "out", operators(&c, module)?.len())
    })
}

/// Copies the name of operator `index` of `module` (NULL or "Global": of
/// the whole measurement; operators in the order they were first counted
/// there, as torch's dicts keep them; "aten::mm") into `buf`
/// as `fulmen_model_state_dict_name` does, and writes its FLOPs in that
/// module to `*flops`.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_INVALID_ARGUMENT (`module` not UTF-8),
/// FULMEN_CODE_OUT_OF_RANGE (`index` past the module's operators, or
/// `capacity` too small: `*len_out` is written, `*flops` is not).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flop_counts_operator(
    counts: *const fulmen_flop_counts,
    module: *const c_char,
    index: usize,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
    flops: *mut u64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(flops, "flops")?;
        let c = handle::borrow(counts, "counts")?;
        let ops = operators(&c, module)?;
        let (name, count) = ops
            .get(index)
            .ok_or_else(|| Error::new(ErrorCode::OutOfRange, format!("operator {index} of {}", ops.len())))?;
        copy_str(name, buf, capacity, len_out)?;
        write_out(flops, "flops", *count)
    })
}

/// Copies the table PyTorch's `FlopCounterMode.get_table(depth)` prints
/// into `buf` as `fulmen_model_state_dict_name` does: the modules at most
/// `depth` names deep (2 is torch's default; SIZE_MAX for all) with their
/// FLOPs, their operators' and their shares of the total, "Global" first
/// when FLOPs fall outside the modules shown. Lines end in "\n", the last
/// one without.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_OUT_OF_RANGE (`capacity` too small: `*len_out` is written).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flop_counts_table(
    counts: *const fulmen_flop_counts,
    depth: usize,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let c = handle::borrow(counts, "counts")?;
        copy_str(&c.counts.table(depth)?, buf, capacity, len_out)
    })
}

/// Frees counts. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_flop_counts_free(counts: *mut fulmen_flop_counts) {
    handle::free(counts);
}
