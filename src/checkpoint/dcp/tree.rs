//! A checkpoint's nested state as `torch.distributed.checkpoint` stores it:
//! flattened into leaves named by their path (`"optimizer_0.state.w.step"`),
//! each path kept as its keys and list indices (the `.metadata` file's
//! `planner_data`), and put back together from those paths.
use crate::checkpoint::torch_save::Value;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap};

/// One step of a leaf's path: a dict key or a list index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PathItem {
    Key(String),
    Index(u64),
}

/// A leaf of the state: its flat name, its path and its value.
pub(crate) struct Leaf<'a> {
    pub fqn: String,
    pub path: Vec<PathItem>,
    pub value: &'a Value,
}

/// The flat name of `path`: its items joined by dots.
pub(crate) fn fqn_of(path: &[PathItem]) -> String {
    let parts: Vec<String> = path
        .iter()
        .map(|p| match p {
            PathItem::Key(k) => k.clone(),
            PathItem::Index(i) => i.to_string(),
        })
        .collect();
    parts.join(".")
}

/// Whether a list is a leaf (torch's `_is_terminal`): it holds no tensor
/// and no container that is not itself a leaf. Dicts are never leaves.
fn is_terminal(v: &Value) -> bool {
    match v {
        Value::Dict(_) => false,
        Value::List(items) => items.iter().all(|x| match x {
            Value::Tensor(_) | Value::Dict(_) => false,
            Value::List(_) => is_terminal(x),
            _ => true,
        }),
        _ => true,
    }
}

/// The leaves of `state` (a dict), in order, as torch's
/// `traverse_state_dict` visits them: dicts are walked (an empty one
/// leaves nothing), lists only when they hold tensors or dicts, anything
/// else is a leaf. A dict key that is not a string or an integer, or two
/// leaves with one flat name, is an error.
pub(crate) fn flatten(state: &Value) -> Result<Vec<Leaf<'_>>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    walk(state, &mut Vec::new(), &mut out, &mut seen, 0)?;
    Ok(out)
}

/// Deepest path flattened (what the pickle reader nests at most).
const MAX_DEPTH: usize = 64;

fn walk<'a>(
    v: &'a Value,
    path: &mut Vec<PathItem>,
    out: &mut Vec<Leaf<'a>>,
    seen: &mut std::collections::HashSet<String>,
    depth: usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::format("a checkpoint's state nests deeper than 64 levels"));
    }
    match v {
        Value::Dict(entries) => {
            for (k, x) in entries {
                let key = match k {
                    Value::Str(s) => s.clone(),
                    Value::Int(i) => i.to_string(),
                    other => {
                        return Err(Error::format(format!(
                            "a dict key {other:?} at {} is neither a string nor an integer",
                            fqn_of(path)
                        )))
                    }
                };
                path.push(PathItem::Key(key));
                walk(x, path, out, seen, depth + 1)?;
                path.pop();
            }
        }
        Value::List(items) if !is_terminal(v) => {
            for (i, x) in items.iter().enumerate() {
                path.push(PathItem::Index(i as u64));
                walk(x, path, out, seen, depth + 1)?;
                path.pop();
            }
        }
        _ => {
            let fqn = fqn_of(path);
            if !seen.insert(fqn.clone()) {
                return Err(Error::format(format!("two entries of a checkpoint's state are both named {fqn:?}")));
            }
            out.push(Leaf { fqn, path: path.clone(), value: v });
        }
    }
    Ok(())
}

/// A tree being put back together.
enum Node {
    Leaf(Value),
    /// Entries in the order they came, and each key's place.
    Dict(Vec<(String, Node)>, HashMap<String, usize>),
    List(BTreeMap<u64, Node>),
}

impl Node {
    fn into_value(self, at: &str) -> Result<Value> {
        Ok(match self {
            Node::Leaf(v) => v,
            Node::Dict(entries, _) => Value::Dict(
                entries
                    .into_iter()
                    .map(|(k, n)| {
                        let v = n.into_value(&format!("{at}.{k}"))?;
                        Ok((Value::Str(k), v))
                    })
                    .collect::<Result<_>>()?,
            ),
            Node::List(items) => {
                let n = items.len() as u64;
                if items.keys().next_back().is_some_and(|last| *last + 1 != n) {
                    return Err(Error::format(format!("the list at {at} has gaps among its indices")));
                }
                Value::List(items.into_values().map(|n| n.into_value(at)).collect::<Result<_>>()?)
            }
        })
    }
}

/// The nested state whose leaves are `leaves` (each path and value, in
/// any order): dict keys keep the order they first came in, list items
/// their indices, which must leave no gap. A path that goes through a
/// leaf, or uses one container as both dict and list, is an error.
pub(crate) fn unflatten(leaves: Vec<(Vec<PathItem>, Value)>) -> Result<Value> {
    let mut root = Node::Dict(Vec::new(), HashMap::new());
    for (path, value) in leaves {
        let name = fqn_of(&path);
        let mut node = &mut root;
        let Some((last, parents)) = path.split_last() else {
            return Err(Error::format("an entry of a sharded checkpoint has an empty path"));
        };
        for (i, item) in parents.iter().enumerate() {
            let next_is_index = matches!(path.get(i + 1), Some(PathItem::Index(_)));
            let fresh =
                || if next_is_index { Node::List(BTreeMap::new()) } else { Node::Dict(Vec::new(), HashMap::new()) };
            node = child(node, item, fresh, &name)?;
        }
        let slot = child(node, last, || Node::Leaf(Value::None), &name)?;
        if !matches!(slot, Node::Leaf(Value::None)) {
            return Err(Error::format(format!("the sharded checkpoint names {name:?} twice")));
        }
        *slot = Node::Leaf(value);
    }
    root.into_value("")
}

/// The child `item` of `node`, made by `fresh` when missing.
fn child<'n>(node: &'n mut Node, item: &PathItem, fresh: impl FnOnce() -> Node, name: &str) -> Result<&'n mut Node> {
    let clash = || Error::format(format!("the sharded checkpoint's entry {name:?} does not fit the others' layout"));
    match (node, item) {
        (Node::Dict(entries, places), PathItem::Key(k)) => {
            let at = match places.get(k) {
                Some(at) => *at,
                None => {
                    entries.push((k.clone(), fresh()));
                    places.insert(k.clone(), entries.len() - 1);
                    entries.len() - 1
                }
            };
            Ok(&mut entries[at].1)
        }
        (Node::List(items), PathItem::Index(i)) => Ok(items.entry(*i).or_insert_with(fresh)),
        _ => Err(clash()),
    }
}
