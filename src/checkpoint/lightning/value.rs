//! Small helpers to build and read the [`Value`] trees of Lightning
//! checkpoints, with errors that name where in the file a value was.
use crate::checkpoint::numbers::{check_len, finite, finite_or, Infinity};
use crate::checkpoint::torch_save::Value;
use crate::error::{Error, Result};
use tch::Tensor;

/// A string value.
pub fn text(s: &str) -> Value {
    Value::Str(s.to_string())
}

/// A dict with string keys, in the order given.
pub fn dict(entries: Vec<(&str, Value)>) -> Value {
    Value::Dict(entries.into_iter().map(|(k, v)| (text(k), v)).collect())
}

/// A list of floats.
pub fn floats(values: &[f64]) -> Value {
    Value::List(values.iter().map(|v| Value::Float(*v)).collect())
}

/// An integer count as Python writes it (an int).
pub fn count(v: i64) -> Value {
    Value::Int(v)
}

/// A 0-dim float32 tensor, as torch keeps optimizer steps and callback
/// scores.
pub fn scalar_f32(v: f64) -> Result<Value> {
    Ok(Value::Tensor(Tensor::f_from_slice(&[v as f32])?.f_reshape([0i64; 0])?))
}

/// The entries of a dict, or an error naming `what`.
pub fn entries<'a>(v: &'a Value, what: &str) -> Result<&'a [(Value, Value)]> {
    match v {
        Value::Dict(e) => Ok(e),
        _ => Err(Error::format(format!("{what} is not a dict"))),
    }
}

/// The items of a list or tuple, or an error naming `what`.
pub fn items<'a>(v: &'a Value, what: &str) -> Result<&'a [Value]> {
    match v {
        Value::List(i) | Value::Tuple(i) => Ok(i),
        _ => Err(Error::format(format!("{what} is not a list"))),
    }
}

/// Entry `key` of dict `v`, or an error naming `what`.
pub fn field<'a>(v: &'a Value, key: &str, what: &str) -> Result<&'a Value> {
    v.get(key).ok_or_else(|| Error::format(format!("{what} has no `{key}`")))
}

/// The number a one-element tensor holds.
pub fn tensor_number(t: &Tensor, what: &str) -> Result<f64> {
    if t.numel() != 1 {
        return Err(Error::format(format!("{what} should hold one number, it has shape {:?}", t.size())));
    }
    crate::checkpoint::numbers::one_value(t)
}

/// A number as the file holds it, NaN and infinities included: an int, a
/// float, a bool or a one-element tensor.
fn any_number(v: &Value, what: &str) -> Result<f64> {
    match v {
        Value::Int(i) => Ok(*i as f64),
        Value::Float(f) => Ok(*f),
        Value::Bool(b) => Ok(f64::from(u8::from(*b))),
        Value::Tensor(t) => tensor_number(t, what),
        _ => Err(Error::format(format!("{what} is not a number"))),
    }
}

/// A finite number (an int, a float, a bool or a one-element tensor); NaN
/// and infinities are a `Format` error naming `what`.
pub fn number(v: &Value, what: &str) -> Result<f64> {
    finite(any_number(v, what)?, what)
}

/// A number that may also be the `allowed` infinity (a best score torch
/// starts from), never NaN.
pub fn number_or(v: &Value, allowed: Infinity, what: &str) -> Result<f64> {
    finite_or(any_number(v, what)?, allowed, what)
}

/// The parameter ids of a param group's `params` list (`what` names the
/// group in errors).
pub fn param_ids(v: &Value, what: &str) -> Result<Vec<i64>> {
    items(v, &format!("{what}.params"))?
        .iter()
        .map(|i| match i {
            Value::Int(i) => Ok(*i),
            _ => Err(Error::format(format!("{what}.params holds a non-integer id"))),
        })
        .collect()
}

/// A whole number in `0..=max`.
pub fn whole(v: &Value, what: &str, max: i64) -> Result<i64> {
    let n = number(v, what)?;
    if n.fract() != 0.0 || !(0.0..=max as f64).contains(&n) {
        return Err(Error::format(format!("{what} = {n} is not a whole number in 0..={max}")));
    }
    Ok(n as i64)
}

/// Entry `key` of dict `v` as a whole number in `0..=max`.
pub fn whole_field(v: &Value, key: &str, what: &str, max: i64) -> Result<i64> {
    whole(field(v, key, what)?, &format!("{what}.{key}"), max)
}

/// A list of at most `max` finite numbers, its length checked before any
/// entry is read.
pub fn numbers(v: &Value, what: &str, max: usize) -> Result<Vec<f64>> {
    let list = items(v, what)?;
    check_len(list.len(), max, what)?;
    list.iter()
        .enumerate()
        .map(|(i, x)| match x {
            Value::Float(f) if f.is_finite() => Ok(*f),
            Value::Int(n) => Ok(*n as f64),
            x => number(x, &format!("{what}[{i}]")),
        })
        .collect()
}

/// A string value, or an error naming `what`.
pub fn string<'a>(v: &'a Value, what: &str) -> Result<&'a str> {
    match v {
        Value::Str(s) => Ok(s),
        _ => Err(Error::format(format!("{what} is not a string"))),
    }
}

/// The text of a value as fulmen keeps hyperparameters and callback
/// states: strings as they are, numbers and booleans as Rust prints them,
/// None as empty.
pub fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::None => Some(String::new()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Str(s) => Some(s.clone()),
        Value::Tensor(t) if t.numel() == 1 => any_number(v, "").ok().map(|f| f.to_string()),
        _ => None,
    }
}

/// The Python value fulmen's text stands for: an int, a float, a bool, or
/// the string itself.
pub fn from_text(s: &str) -> Value {
    if let Ok(i) = s.parse::<i64>() {
        return Value::Int(i);
    }
    if s.bytes().any(|b| b.is_ascii_digit()) {
        if let Ok(f) = s.parse::<f64>() {
            return Value::Float(f);
        }
    }
    match s {
        "true" | "True" => Value::Bool(true),
        "false" | "False" => Value::Bool(false),
        _ => text(s),
    }
}

/// Python's `repr` of a str, as Lightning's callback state keys print it.
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::new();
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c)
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A copy of a value (tensors shared).
pub fn copy_value(v: &Value) -> Value {
    match v {
        Value::None => Value::None,
        Value::Bool(b) => Value::Bool(*b),
        Value::Int(i) => Value::Int(*i),
        Value::Float(f) => Value::Float(*f),
        Value::Str(s) => Value::Str(s.clone()),
        Value::Bytes(b) => Value::Bytes(b.clone()),
        Value::Set(i) => Value::Set(i.iter().map(copy_value).collect()),
        Value::List(i) => Value::List(i.iter().map(copy_value).collect()),
        Value::Tuple(i) => Value::Tuple(i.iter().map(copy_value).collect()),
        Value::Dict(e) => Value::Dict(e.iter().map(|(k, v)| (copy_value(k), copy_value(v))).collect()),
        Value::Tensor(t) => Value::Tensor(t.shallow_clone()),
    }
}
