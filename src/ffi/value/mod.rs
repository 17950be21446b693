//! `fulmen_value`: what TorchScript methods take and return (tensors, None,
//! bools, ints, floats, strings, tuples, lists and dicts), built and read
//! by the host.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle, Shared};
use crate::ffi::data::batch::fulmen_batch;
use crate::ffi::nn::model::copy_str;
use crate::ffi::tensor::handle::{emit, fulmen_tensor, keep, new_scoped, tensor_arg};
use crate::nn::{NodeBudget, Value, MAX_VALUE_DEPTH, MAX_VALUE_NODES};
use std::ffi::c_char;

/// The deepest nesting of values passed to or returned by a method.
pub const FULMEN_MAX_VALUE_DEPTH: usize = 64;
const _: () = assert!(FULMEN_MAX_VALUE_DEPTH == MAX_VALUE_DEPTH);

/// The most values one tree holds (containers and leaves, counted along
/// every path: a list holding the same list twice counts it twice).
pub const FULMEN_MAX_VALUE_NODES: usize = 1048576;
const _: () = assert!(FULMEN_MAX_VALUE_NODES == MAX_VALUE_NODES);

/// A TorchScript value: a tensor, None, bool, int (64-bit), float
/// (64-bit), string, or a tuple, list or dict of values. Immutable once
/// made. Free with `fulmen_value_free`; values made inside a step or hook
/// callback are released when it returns unless kept with
/// `fulmen_value_keep`, like tensors.
pub struct fulmen_value {
    pub(crate) value: Value,
}

impl Handle for fulmen_value {
    const C_NAME: &'static str = "fulmen_value";
}

/// Borrows the value behind a handle.
pub(crate) unsafe fn value_arg<'a>(p: *const fulmen_value, arg: &str) -> Result<Shared<'a, Value>> {
    Ok(handle::borrow(p, arg)?.map(|h| &h.value))
}

/// Writes a new value handle through `out`.
pub(crate) unsafe fn emit_value(out: *mut *mut fulmen_value, value: Value) -> Result<()> {
    check_out(out, "out")?;
    out.write(new_scoped(fulmen_value { value }));
    Ok(())
}

/// Copies the values behind an array of `n` handles. Nothing is copied
/// before every handle checked out and the items, counted along every
/// path, stay within FULMEN_MAX_VALUE_NODES, so neither a wrong `n` nor a
/// doubling chain of lists allocates in proportion to an untrusted number.
pub(crate) unsafe fn value_list(items: *const *const fulmen_value, n: usize, arg: &str) -> Result<Vec<Value>> {
    if n > 0 && items.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    let mut held = Vec::new();
    let mut budget = NodeBudget::for_host();
    for i in 0..n {
        let v = value_arg(*items.add(i), &format!("{arg}[{i}]"))?;
        v.count_into(&mut budget)?;
        held.push(v);
    }
    Ok(held.iter().map(|v| v.shallow_clone()).collect())
}

/// Items of a new container, refused when it would nest deeper than
/// FULMEN_MAX_VALUE_DEPTH (so no value is ever too deep to copy or free).
fn container(items: Vec<Value>) -> Result<Vec<Value>> {
    let depth = items.iter().map(Value::depth).max().map_or(1, |d| d + 1);
    if depth > MAX_VALUE_DEPTH {
        return Err(Error::invalid(format!("a value nested deeper than FULMEN_MAX_VALUE_DEPTH ({MAX_VALUE_DEPTH})")));
    }
    Ok(items)
}

/// A dict key as something to compare: its kind and its bits.
fn key_id(k: &Value) -> Result<(u8, Vec<u8>)> {
    Ok(match k {
        Value::Str(s) => (0, s.as_bytes().to_vec()),
        Value::Int(i) => (1, i.to_le_bytes().to_vec()),
        Value::Double(d) => (2, d.to_bits().to_le_bytes().to_vec()),
        Value::Bool(b) => (3, vec![*b as u8]),
        other => {
            return Err(Error::invalid(format!(
                "dict keys must be strings, ints, floats or bools, got a {}",
                other.kind_name()
            )))
        }
    })
}

/// Makes the value `None`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_none(out: *mut *mut fulmen_value) -> *mut fulmen_error {
    guard!(|| emit_value(out, Value::None))
}

/// Makes a bool value.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_bool(v: bool, out: *mut *mut fulmen_value) -> *mut fulmen_error {
    guard!(|| emit_value(out, Value::Bool(v)))
}

/// Makes an int value (TorchScript's `int` is 64-bit).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_int(v: i64, out: *mut *mut fulmen_value) -> *mut fulmen_error {
    guard!(|| emit_value(out, Value::Int(v)))
}

/// Makes a float value (TorchScript's `float` is 64-bit).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_double(v: f64, out: *mut *mut fulmen_value) -> *mut fulmen_error {
    guard!(|| emit_value(out, Value::Double(v)))
}

/// Makes a string value from a NUL-terminated UTF-8 string (copied).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`s` is not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_string(s: *const c_char, out: *mut *mut fulmen_value) -> *mut fulmen_error {
    guard!(|| emit_value(out, Value::Str(str_arg(s, "s")?.to_owned())))
}

/// Makes a tensor value sharing `tensor`'s storage (and autograd history);
/// `tensor` stays the caller's.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_tensor(
    tensor: *const fulmen_tensor,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let t = tensor_arg(tensor, "tensor")?.shallow_clone();
        emit_value(out, Value::Tensor(t))
    })
}

/// Makes a tuple of `items[0..n]` (copied: the item handles stay the
/// caller's). `items` may be NULL when `n` is 0.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (it would nest deeper than
/// FULMEN_MAX_VALUE_DEPTH or hold more than FULMEN_MAX_VALUE_NODES values).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_tuple(
    items: *const *const fulmen_value,
    n: usize,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        emit_value(out, Value::Tuple(container(value_list(items, n, "items")?)?))
    })
}

/// Makes a tuple of a batch's tensors, in order (sharing their storage):
/// the `batch` argument of a scripted `training_step(batch, batch_idx)`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_from_batch(
    batch: *const fulmen_batch,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let b = handle::borrow(batch, "batch")?;
        emit_value(out, Value::Tuple(b.tensors.iter().map(|t| Value::Tensor(t.shallow_clone())).collect()))
    })
}

/// Makes a list of `items[0..n]` (copied), typed by the items' common type
/// (`List[Tensor]`, `List[int]`, ...) as TorchScript methods expect.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (it would nest deeper than
/// FULMEN_MAX_VALUE_DEPTH or hold more than FULMEN_MAX_VALUE_NODES values).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_list(
    items: *const *const fulmen_value,
    n: usize,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        emit_value(out, Value::List(container(value_list(items, n, "items")?)?))
    })
}

/// Makes a dict `{keys[i]: values[i]}` in that order (copied). Keys must
/// all be strings, all ints, all floats or all bools; a repeated key keeps
/// its first place and its last value, as in Python.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (keys of other or mixed kinds; it
/// would nest deeper than FULMEN_MAX_VALUE_DEPTH or hold more than
/// FULMEN_MAX_VALUE_NODES values).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_dict(
    keys: *const *const fulmen_value,
    values: *const *const fulmen_value,
    n: usize,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let k = container(value_list(keys, n, "keys")?)?;
        let v = container(value_list(values, n, "values")?)?;
        let mut budget = NodeBudget::for_host();
        k.iter().chain(&v).try_for_each(|x| x.count_into(&mut budget))?;
        let mut entries: Vec<(Value, Value)> = Vec::new();
        let mut seen: std::collections::HashMap<(u8, Vec<u8>), usize> = std::collections::HashMap::new();
        for (key, value) in k.into_iter().zip(v) {
            match seen.entry(key_id(&key)?) {
                std::collections::hash_map::Entry::Occupied(at) => entries[*at.get()].1 = value,
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(entries.len());
                    entries.push((key, value));
                }
            }
        }
        if entries.first().is_some_and(|(k0, _)| entries.iter().any(|(k, _)| k.kind() != k0.kind())) {
            return Err(Error::invalid("dict keys must all be strings, all ints, all floats or all bools"));
        }
        emit_value(out, Value::Dict(entries))
    })
}

/// Writes the value's kind, a `fulmen_value_kind`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_get_kind(value: *const fulmen_value, out: *mut i32) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", value_arg(value, "value")?.kind() as i32))
}

fn wrong_kind(want: &str, v: &Value) -> Error {
    Error::dtype(format!("the value is a {}, not {want}", v.kind_name()))
}

/// Writes a bool value.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not a bool).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_get_bool(value: *const fulmen_value, out: *mut bool) -> *mut fulmen_error {
    guard!(|| match &*value_arg(value, "value")? {
        Value::Bool(b) => write_out(out, "out", *b),
        v => Err(wrong_kind("a bool", v)),
    })
}

/// Writes an int value.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not an int).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_get_int(value: *const fulmen_value, out: *mut i64) -> *mut fulmen_error {
    guard!(|| match &*value_arg(value, "value")? {
        Value::Int(i) => write_out(out, "out", *i),
        v => Err(wrong_kind("an int", v)),
    })
}

/// Writes a float value; an int value is converted.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (neither a float nor an int).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_get_double(value: *const fulmen_value, out: *mut f64) -> *mut fulmen_error {
    guard!(|| match &*value_arg(value, "value")? {
        Value::Double(d) => write_out(out, "out", *d),
        Value::Int(i) => write_out(out, "out", *i as f64),
        v => Err(wrong_kind("a float", v)),
    })
}

/// Copies a string value NUL-terminated into `buf` of `capacity` bytes and
/// writes its length (without the NUL) to `*len_out`; when `capacity` is
/// too small, fails with FULMEN_CODE_OUT_OF_RANGE after writing only
/// `*len_out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not a string),
/// FULMEN_CODE_OUT_OF_RANGE (see above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_get_string(
    value: *const fulmen_value,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| match &*value_arg(value, "value")? {
        Value::Str(s) => copy_str(s, buf, capacity, len_out),
        v => Err(wrong_kind("a string", v)),
    })
}

/// Writes a new handle to a tensor value's tensor (sharing storage and
/// autograd history).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not a tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_get_tensor(
    value: *const fulmen_value,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        match &*value_arg(value, "value")? {
            Value::Tensor(t) => emit(out, t.shallow_clone()),
            v => Err(wrong_kind("a tensor", v)),
        }
    })
}

/// Writes the number of elements of a tuple or list, or of entries of a dict.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not a tuple, list or dict).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_len(value: *const fulmen_value, out: *mut usize) -> *mut fulmen_error {
    guard!(|| match &*value_arg(value, "value")? {
        Value::Tuple(v) | Value::List(v) => write_out(out, "out", v.len()),
        Value::Dict(v) => write_out(out, "out", v.len()),
        v => Err(wrong_kind("a tuple, list or dict", v)),
    })
}

fn out_of_range(index: usize, len: usize) -> Error {
    Error::new(ErrorCode::OutOfRange, format!("index {index} >= length {len}"))
}

/// Writes a new handle to element `index` of a tuple or list.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not a tuple or list),
/// FULMEN_CODE_OUT_OF_RANGE (`index` past the end).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_item(
    value: *const fulmen_value,
    index: usize,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        match &*value_arg(value, "value")? {
            Value::Tuple(v) | Value::List(v) => {
                let item = v.get(index).ok_or_else(|| out_of_range(index, v.len()))?;
                emit_value(out, item.shallow_clone())
            }
            v => Err(wrong_kind("a tuple or list", v)),
        }
    })
}

/// Writes new handles to the key and the value of entry `index` of a dict
/// (in the dict's order). Either out pointer may be NULL.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not a dict),
/// FULMEN_CODE_OUT_OF_RANGE (`index` past the end),
/// FULMEN_CODE_INVALID_ARGUMENT (both out pointers the same).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_dict_entry(
    value: *const fulmen_value,
    index: usize,
    key_out: *mut *mut fulmen_value,
    value_out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| match &*value_arg(value, "value")? {
        Value::Dict(_) if !key_out.is_null() && std::ptr::eq(key_out, value_out) => {
            Err(Error::invalid("outputs `key_out` and `value_out` are the same pointer"))
        }
        Value::Dict(v) => {
            let (k, x) = v.get(index).ok_or_else(|| out_of_range(index, v.len()))?;
            if !key_out.is_null() {
                key_out.write(new_scoped(fulmen_value { value: k.shallow_clone() }));
            }
            if !value_out.is_null() {
                value_out.write(new_scoped(fulmen_value { value: x.shallow_clone() }));
            }
            Ok(())
        }
        v => Err(wrong_kind("a dict", v)),
    })
}

/// Writes a new handle to the value of a dict's string key `key`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`key` is not UTF-8, or the dict
/// has no such key; the message lists its keys), FULMEN_CODE_DTYPE_MISMATCH
/// (not a dict).
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_dict_get(
    value: *const fulmen_value,
    key: *const c_char,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let key = str_arg(key, "key")?;
        match &*value_arg(value, "value")? {
            Value::Dict(v) => {
                let found = v.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key));
                match found {
                    Some((_, x)) => emit_value(out, x.shallow_clone()),
                    None => {
                        let keys: Vec<String> = v
                            .iter()
                            .map(|(k, _)| match k {
                                Value::Str(s) => format!("{s:?}"),
                                other => other.kind_name().to_owned(),
                            })
                            .collect();
                        Err(Error::invalid(format!("the dict has no key {key:?}; its keys: [{}]", keys.join(", "))))
                    }
                }
            }
            v => Err(wrong_kind("a dict", v)),
        }
    })
}

/// Takes a value made inside a step or hook callback out of the callback's
/// scope: the caller frees it with `fulmen_value_free`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_keep(value: *mut fulmen_value) -> *mut fulmen_error {
    guard!(|| {
        handle::check(value, "value")?;
        keep(value);
        Ok(())
    })
}

/// Frees a value handle (the tensors it holds live on where still used).
/// NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_value_free(value: *mut fulmen_value) {
    handle::free(value);
}
