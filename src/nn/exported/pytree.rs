//! The pytree specs of an exported program (torch.utils._pytree's JSON
//! form): how the user's arguments flatten into the program's inputs and
//! how its outputs nest back into the value the caller gets.
use super::json::{self, Json};
use crate::error::{Error, Result};
use crate::nn::Value;

/// The most nodes a spec may hold (a spec is never larger than its program).
const MAX_SPEC_NODES: usize = 1 << 16;

/// One node of a spec.
#[derive(Debug)]
pub(crate) enum TreeSpec {
    Leaf,
    Tuple(Vec<TreeSpec>),
    List(Vec<TreeSpec>),
    /// Keys and their children, in order.
    Dict(Vec<(Key, TreeSpec)>),
}

/// A dict key of a spec.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Key {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl Key {
    fn value(&self) -> Value {
        match self {
            Key::Str(s) => Value::Str(s.clone()),
            Key::Int(i) => Value::Int(*i),
            Key::Bool(b) => Value::Bool(*b),
        }
    }

    /// Whether the host's dict key `v` is this key.
    fn is(&self, v: &Value) -> bool {
        match (self, v) {
            (Key::Str(a), Value::Str(b)) => a == b,
            (Key::Int(a), Value::Int(b)) => a == b,
            (Key::Bool(a), Value::Bool(b)) => a == b,
            _ => false,
        }
    }
}

fn key(v: &Json) -> Result<Key> {
    match v {
        Json::String(s) => Ok(Key::Str(s.clone())),
        Json::Number(n) if n.is_i64() => Ok(Key::Int(n.as_i64().unwrap_or_default())),
        Json::Bool(b) => Ok(Key::Bool(*b)),
        _ => Err(Error::unsupported(format!("a dict key {v} in a pytree spec (only strings, ints and bools)"))),
    }
}

impl TreeSpec {
    /// Parses the JSON string torch writes (`[protocol, spec]`).
    pub(crate) fn parse(text: &str) -> Result<TreeSpec> {
        let doc: Json = serde_json::from_str(text).map_err(|e| Error::format(format!("a pytree spec: {e}")))?;
        let parts = json::array(&doc, "a pytree spec")?;
        let spec = parts.get(1).ok_or_else(|| Error::format("a pytree spec without its tree"))?;
        let mut budget = MAX_SPEC_NODES;
        Self::node(spec, &mut budget)
    }

    fn node(v: &Json, budget: &mut usize) -> Result<TreeSpec> {
        *budget = budget.checked_sub(1).ok_or_else(|| Error::format("a pytree spec is too large"))?;
        let kind = json::field(v, "type")?;
        let children = json::array(json::field(v, "children_spec")?, "children_spec")?;
        let kids = |budget: &mut usize| children.iter().map(|c| Self::node(c, budget)).collect::<Result<Vec<_>>>();
        let Some(kind) = kind.as_str() else {
            return if children.is_empty() { Ok(TreeSpec::Leaf) } else { Err(Error::format("a leaf with children")) };
        };
        match kind {
            "builtins.tuple" => Ok(TreeSpec::Tuple(kids(budget)?)),
            "builtins.list" | "torch.fx.immutable_collections.immutable_list" => Ok(TreeSpec::List(kids(budget)?)),
            "builtins.dict" | "collections.OrderedDict" | "torch.fx.immutable_collections.immutable_dict" => {
                let context = json::string(json::field(v, "context")?, "a dict's context")?;
                let keys: Json =
                    serde_json::from_str(&context).map_err(|e| Error::format(format!("a dict's keys: {e}")))?;
                let keys = json::array(&keys, "a dict's keys")?;
                let values = kids(budget)?;
                if keys.len() != values.len() {
                    return Err(Error::format("a dict spec with more keys than children, or fewer"));
                }
                Ok(TreeSpec::Dict(keys.iter().map(key).zip(values).map(|(k, v)| Ok((k?, v))).collect::<Result<_>>()?))
            }
            other => Err(Error::unsupported(format!(
                "a pytree node of type {other} (only tuples, lists and dicts; flatten dataclasses and named \
                 tuples before exporting)"
            ))),
        }
    }

    /// How many leaves the spec holds.
    pub(crate) fn leaves(&self) -> usize {
        match self {
            TreeSpec::Leaf => 1,
            TreeSpec::Tuple(c) | TreeSpec::List(c) => c.iter().map(TreeSpec::leaves).sum(),
            TreeSpec::Dict(c) => c.iter().map(|(_, s)| s.leaves()).sum(),
        }
    }

    /// Appends the leaves of `value`, laid out as this spec says (a tuple
    /// and a list stand for each other; a dict is matched by keys).
    pub(crate) fn flatten<'a>(&self, value: &'a Value, out: &mut Vec<&'a Value>, at: &str) -> Result<()> {
        let mismatch = |want: &str| {
            Error::invalid(format!("argument {at}: the program takes {want} here, got a {}", value.kind_name()))
        };
        match self {
            TreeSpec::Leaf => out.push(value),
            TreeSpec::Tuple(c) | TreeSpec::List(c) => {
                let items = match value {
                    Value::Tuple(v) | Value::List(v) => v,
                    _ => return Err(mismatch(&format!("a sequence of {}", c.len()))),
                };
                if items.len() != c.len() {
                    return Err(mismatch(&format!("a sequence of {} items, not {}", c.len(), items.len())));
                }
                for (k, (s, v)) in c.iter().zip(items).enumerate() {
                    s.flatten(v, out, &format!("{at}[{k}]"))?;
                }
            }
            TreeSpec::Dict(c) => {
                let Value::Dict(items) = value else { return Err(mismatch("a dict")) };
                if items.len() != c.len() {
                    return Err(mismatch(&format!("a dict of {} keys, not {}", c.len(), items.len())));
                }
                for (k, s) in c {
                    let v = items
                        .iter()
                        .find(|(key, _)| k.is(key))
                        .map(|(_, v)| v)
                        .ok_or_else(|| mismatch(&format!("a dict with the key {k:?}")))?;
                    s.flatten(v, out, &format!("{at}[{k:?}]"))?;
                }
            }
        }
        Ok(())
    }

    /// Builds the value this spec describes from `leaves`, in order.
    pub(crate) fn unflatten(&self, leaves: &mut impl Iterator<Item = Value>) -> Result<Value> {
        let all = |c: &[TreeSpec], leaves: &mut dyn Iterator<Item = Value>| {
            c.iter().map(|s| s.unflatten_dyn(leaves)).collect::<Result<Vec<_>>>()
        };
        Ok(match self {
            TreeSpec::Leaf => leaves.next().ok_or_else(|| Error::state("the program returned too few values"))?,
            TreeSpec::Tuple(c) => Value::Tuple(all(c, leaves)?),
            TreeSpec::List(c) => Value::List(all(c, leaves)?),
            TreeSpec::Dict(c) => Value::Dict(
                c.iter().map(|(k, s)| Ok((k.value(), s.unflatten_dyn(leaves)?))).collect::<Result<Vec<_>>>()?,
            ),
        })
    }

    fn unflatten_dyn(&self, leaves: &mut dyn Iterator<Item = Value>) -> Result<Value> {
        let mut it = std::iter::from_fn(|| leaves.next());
        self.unflatten(&mut it)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARGS: &str = r#"[1, {"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.tuple", "context": "null", "children_spec": [{"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}]}, {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]"#;

    #[test]
    fn a_batch_tuple_flattens_into_its_tensors() {
        let spec = TreeSpec::parse(ARGS).unwrap();
        let TreeSpec::Tuple(parts) = &spec else { panic!("{spec:?}") };
        assert_eq!(parts[0].leaves(), 2);
        let batch = Value::List(vec![Value::Int(1), Value::Int(2)]);
        let args = Value::Tuple(vec![batch]);
        let mut out = Vec::new();
        parts[0].flatten(&args, &mut out, "args").unwrap();
        assert_eq!(out.len(), 2);
        let e = parts[0].flatten(&Value::Tuple(vec![Value::Int(3)]), &mut Vec::new(), "args").unwrap_err();
        assert!(e.message.contains("args[0]"), "{}", e.message);
    }

    #[test]
    fn a_dict_output_comes_back_with_its_keys() {
        let spec = TreeSpec::parse(
            r#"[1, {"type": "builtins.dict", "context": "[\"loss\", \"acc\"]", "children_spec": [{"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}]"#,
        )
        .unwrap();
        let v = spec.unflatten(&mut vec![Value::Int(1), Value::Int(2)].into_iter()).unwrap();
        let Value::Dict(items) = v else { panic!() };
        assert!(Key::Str("loss".into()).is(&items[0].0));
        assert!(spec.unflatten(&mut vec![Value::Int(1)].into_iter()).is_err());
        assert!(TreeSpec::parse(r#"[1, {"type": "dataclasses.X", "context": "null", "children_spec": []}]"#).is_err());
    }
}
