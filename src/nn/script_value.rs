//! What TorchScript methods take and return, as a Rust tree: tensors,
//! `None`, bools, ints, floats, strings, tuples, lists and dicts, converted
//! to and from libtorch's `IValue` through the C++ shim.
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use libc::{c_char, c_void};
use tch::Tensor;

/// Deepest nesting converted (deeper trees fail instead of recursing on).
pub const MAX_VALUE_DEPTH: usize = 64;

/// Most values (containers and leaves, counted along every path) in one
/// tree a host builds or a method returns: copies stay bounded however the
/// host or the script nests.
pub const MAX_VALUE_NODES: usize = 1 << 20;

/// The values of one tree (or of one call's arguments) counted so far
/// against [`MAX_VALUE_NODES`]: every count goes through [`NodeBudget::take`],
/// so a caller stops before copying or converting past the bound.
#[derive(Debug)]
pub(crate) struct NodeBudget {
    used: usize,
    code: ErrorCode,
    what: &'static str,
}

impl NodeBudget {
    /// For values a host builds or passes: past the bound is
    /// `InvalidArgument`.
    pub(crate) fn for_host() -> Self {
        NodeBudget { used: 0, code: ErrorCode::InvalidArgument, what: "a value" }
    }

    /// For a method's result: past the bound is `OutOfRange`.
    pub(crate) fn for_result() -> Self {
        NodeBudget { used: 0, code: ErrorCode::OutOfRange, what: "a method result" }
    }

    /// Counts `n` more values; fails, counting none of them, when the
    /// total would pass [`MAX_VALUE_NODES`].
    pub(crate) fn take(&mut self, n: usize) -> Result<()> {
        match self.used.checked_add(n) {
            Some(total) if total <= MAX_VALUE_NODES => {
                self.used = total;
                Ok(())
            }
            _ => Err(Error::new(
                self.code,
                format!("{} holding more than FULMEN_MAX_VALUE_NODES ({MAX_VALUE_NODES}) values", self.what),
            )),
        }
    }
}

/// The kind of a [`Value`] (`fulmen_value_kind`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// `None`.
    None = 0,
    /// `bool`.
    Bool = 1,
    /// `int` (64-bit).
    Int = 2,
    /// `float` (64-bit).
    Double = 3,
    /// `str` (UTF-8).
    String = 4,
    /// A tensor.
    Tensor = 5,
    /// A tuple.
    Tuple = 6,
    /// A list.
    List = 7,
    /// A dict.
    Dict = 8,
}

/// A TorchScript value (`IValue`) on the host side.
#[derive(Debug)]
pub enum Value {
    /// `None`.
    None,
    /// `bool`.
    Bool(bool),
    /// `int` (64-bit).
    Int(i64),
    /// `float` (64-bit).
    Double(f64),
    /// `str`.
    Str(String),
    /// A tensor (shares storage with the tensor it came from).
    Tensor(Tensor),
    /// `Tuple[...]`.
    Tuple(Vec<Value>),
    /// `List[T]`: typed by the elements' common type (`List[Tensor]`, ...).
    List(Vec<Value>),
    /// `Dict[K, V]` in insertion order; keys are all str, int, float or bool.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// A copy sharing every tensor (`shallow_clone`).
    pub fn shallow_clone(&self) -> Value {
        let all = |v: &[Value]| v.iter().map(Value::shallow_clone).collect();
        match self {
            Value::None => Value::None,
            Value::Bool(b) => Value::Bool(*b),
            Value::Int(i) => Value::Int(*i),
            Value::Double(d) => Value::Double(*d),
            Value::Str(s) => Value::Str(s.clone()),
            Value::Tensor(t) => Value::Tensor(t.shallow_clone()),
            Value::Tuple(v) => Value::Tuple(all(v)),
            Value::List(v) => Value::List(all(v)),
            Value::Dict(v) => Value::Dict(v.iter().map(|(k, x)| (k.shallow_clone(), x.shallow_clone())).collect()),
        }
    }

    /// The kind of value.
    pub fn kind(&self) -> ValueKind {
        match self {
            Value::None => ValueKind::None,
            Value::Bool(_) => ValueKind::Bool,
            Value::Int(_) => ValueKind::Int,
            Value::Double(_) => ValueKind::Double,
            Value::Str(_) => ValueKind::String,
            Value::Tensor(_) => ValueKind::Tensor,
            Value::Tuple(_) => ValueKind::Tuple,
            Value::List(_) => ValueKind::List,
            Value::Dict(_) => ValueKind::Dict,
        }
    }

    /// Counts the tree's values (itself included, along every path) into
    /// `budget`, stopping with its error at the first one past the bound.
    pub(crate) fn count_into(&self, budget: &mut NodeBudget) -> Result<()> {
        budget.take(1)?;
        match self {
            Value::Tuple(v) | Value::List(v) => v.iter().try_for_each(|x| x.count_into(budget)),
            Value::Dict(v) => v.iter().try_for_each(|(k, x)| {
                k.count_into(budget)?;
                x.count_into(budget)
            }),
            _ => Ok(()),
        }
    }

    /// How deeply containers nest: 0 for a scalar or tensor, 1 for a list
    /// of them, ...
    pub fn depth(&self) -> usize {
        let deepest = |v: &mut dyn Iterator<Item = &Value>| v.map(Value::depth).max().map_or(1, |d| d + 1);
        match self {
            Value::Tuple(v) | Value::List(v) => deepest(&mut v.iter()),
            Value::Dict(v) => deepest(&mut v.iter().flat_map(|(k, x)| [k, x])),
            _ => 0,
        }
    }

    /// TorchScript's name for the kind of value ("Tensor", "Tuple", ...).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Double(_) => "float",
            Value::Str(_) => "str",
            Value::Tensor(_) => "Tensor",
            Value::Tuple(_) => "Tuple",
            Value::List(_) => "List",
            Value::Dict(_) => "Dict",
        }
    }

    /// The tensor of a `Tensor` value; any other kind fails with `what`.
    pub fn into_tensor(self, what: &str) -> Result<Tensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(Error::dtype(format!("{what}: expected a Tensor, got a {}", other.kind_name()))),
        }
    }

    /// Converts to a new libtorch value.
    pub(crate) fn to_cxx(&self) -> Result<CxxValue> {
        self.to_cxx_at(0)
    }

    fn to_cxx_at(&self, depth: usize) -> Result<CxxValue> {
        check_depth(depth)?;
        // SAFETY: the constructors copy their argument; tensors are live.
        let leaf = |p: *mut c_void| {
            if p.is_null() {
                return Err(Error::new(ErrorCode::OutOfMemory, "out of memory building a TorchScript value"));
            }
            Ok(CxxValue(p))
        };
        match self {
            Value::None => leaf(unsafe { shim::fulmen_cxx_value_none() }),
            Value::Bool(b) => leaf(unsafe { shim::fulmen_cxx_value_bool(*b as libc::c_int) }),
            Value::Int(i) => leaf(unsafe { shim::fulmen_cxx_value_int(*i) }),
            Value::Double(d) => leaf(unsafe { shim::fulmen_cxx_value_double(*d) }),
            Value::Str(s) => leaf(unsafe { shim::fulmen_cxx_value_string(s.as_ptr() as *const c_char, s.len()) }),
            Value::Tensor(t) => leaf(unsafe { shim::fulmen_cxx_value_tensor(t.as_ptr() as *const c_void) }),
            Value::Tuple(items) | Value::List(items) => {
                let held = items.iter().map(|v| v.to_cxx_at(depth + 1)).collect::<Result<Vec<_>>>()?;
                let ptrs: Vec<*mut c_void> = held.iter().map(|v| v.0).collect();
                let mut out = CxxValue(std::ptr::null_mut());
                let tuple = matches!(self, Value::Tuple(_));
                call("building a TorchScript value", |err, len| unsafe {
                    if tuple {
                        shim::fulmen_cxx_value_tuple(ptrs.as_ptr(), ptrs.len(), &mut out.0, err, len)
                    } else {
                        shim::fulmen_cxx_value_list(ptrs.as_ptr(), ptrs.len(), &mut out.0, err, len)
                    }
                })
                .map_err(invalid)?;
                Ok(out)
            }
            Value::Dict(entries) => {
                let keys = entries.iter().map(|(k, _)| k.to_cxx_at(depth + 1)).collect::<Result<Vec<_>>>()?;
                let values = entries.iter().map(|(_, v)| v.to_cxx_at(depth + 1)).collect::<Result<Vec<_>>>()?;
                let kp: Vec<*mut c_void> = keys.iter().map(|v| v.0).collect();
                let vp: Vec<*mut c_void> = values.iter().map(|v| v.0).collect();
                let mut out = CxxValue(std::ptr::null_mut());
                call("building a TorchScript dict", |err, len| unsafe {
                    shim::fulmen_cxx_value_dict(kp.as_ptr(), vp.as_ptr(), kp.len(), &mut out.0, err, len)
                })
                .map_err(invalid)?;
                Ok(out)
            }
        }
    }

    /// Converts a libtorch value (a method's result) to the host tree.
    /// Its values are counted as they are met, a container's elements
    /// before they are copied out, so a result past [`MAX_VALUE_NODES`]
    /// fails with `OutOfRange` before anything in proportion to it is made.
    pub(crate) fn from_cxx(v: &CxxValue) -> Result<Value> {
        let mut budget = NodeBudget::for_result();
        budget.take(1)?;
        Value::from_cxx_at(v, 0, &mut budget)
    }

    /// Converts `v`, already counted in `budget`, and counts its elements.
    fn from_cxx_at(v: &CxxValue, depth: usize, budget: &mut NodeBudget) -> Result<Value> {
        check_depth(depth)?;
        let p = v.0 as *const c_void;
        // SAFETY: `p` is a live value; each reader is called on its own kind.
        unsafe {
            Ok(match shim::fulmen_cxx_value_kind(p) {
                0 => Value::None,
                1 => {
                    let t = shim::fulmen_cxx_value_to_tensor(p);
                    if t.is_null() {
                        return Err(Error::new(ErrorCode::OutOfMemory, "out of memory reading a TorchScript value"));
                    }
                    Value::Tensor(Tensor::from_ptr(t.cast()))
                }
                2 => Value::Double(shim::fulmen_cxx_value_to_double(p)),
                3 => Value::Int(shim::fulmen_cxx_value_to_int(p)),
                4 => Value::Bool(shim::fulmen_cxx_value_to_bool(p)),
                5 => {
                    let mut len = 0usize;
                    let s = shim::fulmen_cxx_value_to_string(p, &mut len);
                    Value::Str(String::from_utf8_lossy(std::slice::from_raw_parts(s as *const u8, len)).into_owned())
                }
                kind @ (6 | 7) => {
                    let (items, _) = v.items(false, budget)?;
                    let items =
                        items.iter().map(|x| Value::from_cxx_at(x, depth + 1, budget)).collect::<Result<Vec<_>>>()?;
                    if kind == 6 {
                        Value::Tuple(items)
                    } else {
                        Value::List(items)
                    }
                }
                8 => {
                    let (keys, values) = v.items(true, budget)?;
                    let mut entries = Vec::with_capacity(keys.len());
                    for (k, x) in keys.iter().zip(&values) {
                        entries.push((
                            Value::from_cxx_at(k, depth + 1, budget)?,
                            Value::from_cxx_at(x, depth + 1, budget)?,
                        ));
                    }
                    Value::Dict(entries)
                }
                _ => {
                    let mut name = [0 as c_char; 64];
                    shim::fulmen_cxx_value_type_name(p, name.as_mut_ptr(), name.len());
                    let name = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
                    return Err(Error::new(
                        ErrorCode::Unsupported,
                        format!("a TorchScript value of kind {name} has no host form (tensors, None, bool, int, float, str, tuples, lists and dicts do)"),
                    ));
                }
            })
        }
    }
}

fn check_depth(depth: usize) -> Result<()> {
    if depth > MAX_VALUE_DEPTH {
        return Err(Error::invalid(format!("a value nested deeper than {MAX_VALUE_DEPTH} levels")));
    }
    Ok(())
}

fn invalid(e: Error) -> Error {
    Error::invalid(e.message)
}

/// An owned libtorch `IValue*`, freed on drop.
pub(crate) struct CxxValue(pub(crate) *mut c_void);

impl CxxValue {
    /// The elements of a tuple or list (`dict` false), or the keys and
    /// values of a dict (`dict` true), as new values; counted in `budget`
    /// first, so nothing is allocated for a container past the bound.
    fn items(&self, dict: bool, budget: &mut NodeBudget) -> Result<(Vec<CxxValue>, Vec<CxxValue>)> {
        // SAFETY: a live value; the length is that of an object in memory.
        let n = unsafe { shim::fulmen_cxx_value_len(self.0) };
        budget.take(if dict { n.saturating_mul(2) } else { n })?;
        let mut out = vec![std::ptr::null_mut::<c_void>(); n];
        let mut extra = vec![std::ptr::null_mut::<c_void>(); if dict { n } else { 0 }];
        let extra_ptr = if dict { extra.as_mut_ptr() } else { std::ptr::null_mut() };
        let status = call("reading a TorchScript value", |err, len| unsafe {
            shim::fulmen_cxx_value_items(self.0, out.as_mut_ptr(), extra_ptr, n, err, len)
        });
        // Own whatever was written, also on failure, so nothing leaks.
        let own = |v: Vec<*mut c_void>| v.into_iter().map(CxxValue).collect::<Vec<_>>();
        let (out, extra) = (own(out), own(extra));
        status?;
        Ok((out, extra))
    }
}

impl Drop for CxxValue {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: owned, freed once.
            unsafe { shim::fulmen_cxx_value_free(self.0) }
        }
    }
}
