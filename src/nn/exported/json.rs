//! Checked reads of the parsed JSON of an exported program: every field
//! that is missing or of the wrong kind is a FORMAT error naming it.
use crate::error::{Error, Result};

pub(crate) type Json = serde_json::Value;

/// `v[key]`.
pub(crate) fn field<'a>(v: &'a Json, key: &str) -> Result<&'a Json> {
    v.get(key).ok_or_else(|| Error::format(format!("the field {key:?} is missing")))
}

/// The one (kind, value) of a serialized union: an object with exactly one
/// key that is not null (the serializer writes the chosen member only).
pub(crate) fn union<'a>(v: &'a Json, what: &str) -> Result<(&'a str, &'a Json)> {
    let obj = v.as_object().ok_or_else(|| Error::format(format!("{what} is not an object")))?;
    let mut set = obj.iter().filter(|(_, x)| !x.is_null());
    match (set.next(), set.next()) {
        (Some((k, x)), None) => Ok((k.as_str(), x)),
        (None, _) if obj.len() == 1 => {
            Ok((obj.keys().next().map(String::as_str).unwrap_or(""), obj.values().next().unwrap_or(&Json::Null)))
        }
        _ => Err(Error::format(format!("{what} does not hold exactly one kind"))),
    }
}

pub(crate) fn array<'a>(v: &'a Json, what: &str) -> Result<&'a Vec<Json>> {
    v.as_array().ok_or_else(|| Error::format(format!("{what} is not a list")))
}

pub(crate) fn string(v: &Json, what: &str) -> Result<String> {
    v.as_str().map(str::to_owned).ok_or_else(|| Error::format(format!("{what} is not a string")))
}

pub(crate) fn int(v: &Json, what: &str) -> Result<i64> {
    v.as_i64().ok_or_else(|| Error::format(format!("{what} is not a 64-bit integer")))
}

pub(crate) fn boolean(v: &Json, what: &str) -> Result<bool> {
    v.as_bool().ok_or_else(|| Error::format(format!("{what} is not a bool")))
}

/// A float, including the serializer's "Infinity", "-Infinity" and "NaN".
pub(crate) fn float(v: &Json, what: &str) -> Result<f64> {
    match v {
        Json::Number(n) => n.as_f64().ok_or_else(|| Error::format(format!("{what} is not a float"))),
        Json::String(s) if s == "Infinity" => Ok(f64::INFINITY),
        Json::String(s) if s == "-Infinity" => Ok(f64::NEG_INFINITY),
        Json::String(s) if s == "NaN" => Ok(f64::NAN),
        _ => Err(Error::format(format!("{what} is not a float"))),
    }
}
