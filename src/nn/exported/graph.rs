//! The graph of one exported program, read from its `models/<name>.json`
//! (torch/_export/serde/schema.py): inputs and outputs with their roles,
//! nodes with their operator and arguments, and the pytree specs of the
//! user's inputs and outputs. Everything is checked here, before anything
//! is built: an unknown argument kind, node target or role is refused with
//! its name.
use super::json::{self, Json};
use super::pytree::TreeSpec;
use crate::error::{Error, Result};

/// A symbolic number: a named graph value or a constant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Sym {
    /// A value another node computes (`as_name`).
    Name(String),
    /// An integer known at export time.
    Int(i64),
    /// A float known at export time.
    Float(f64),
    /// A bool known at export time.
    Bool(bool),
}

/// One argument of a node, as the serializer writes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    None,
    Tensor(String),
    Tensors(Vec<String>),
    OptTensors(Vec<Option<String>>),
    Int(i64),
    Ints(Vec<i64>),
    Float(f64),
    Floats(Vec<f64>),
    Bool(bool),
    Bools(Vec<bool>),
    Str(String),
    Sym(Sym),
    SymInts(Vec<Sym>),
    /// A c10::ScalarType code.
    Dtype(i64),
    /// A c10::Layout code.
    Layout(i64),
    /// A c10::MemoryFormat code.
    MemoryFormat(i64),
    /// A device: always the one the program runs on.
    Device,
    /// A subgraph of a higher-order operator.
    Graph(Box<SubGraph>),
}

/// The graph a higher-order operator runs: its inputs (bound by position
/// to the operator's arguments after the subgraph), nodes and outputs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SubGraph {
    pub(crate) inputs: Vec<Arg>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) outputs: Vec<Arg>,
}

impl Arg {
    /// The graph values this argument reads.
    pub(crate) fn reads(&self) -> Vec<&str> {
        match self {
            Arg::Tensor(n) => vec![n],
            Arg::Tensors(ns) => ns.iter().map(String::as_str).collect(),
            Arg::OptTensors(ns) => ns.iter().flatten().map(String::as_str).collect(),
            Arg::Sym(Sym::Name(n)) => vec![n],
            Arg::SymInts(items) => {
                items.iter().filter_map(|s| if let Sym::Name(n) = s { Some(n.as_str()) } else { None }).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// Where a node's result goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Output {
    /// Not kept (`as_none`, or a value the graph never names).
    Drop,
    /// One named value.
    One(String),
    /// A returned list, item by item (`None`: an item not kept).
    List(Vec<Option<String>>),
}

/// What a node runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// An ATen (or other registered) operator: ("aten::linear", "" for default).
    Op(String, String),
    /// One of Python's operators on symbolic numbers, or a step of an
    /// inlined subgraph (a `Builtin` code of csrc/exported.cpp).
    Builtin(i32),
    /// `wrap_with_set_grad_enabled(enabled, subgraph, *args)`, inlined by
    /// [`inline_subgraphs`] before anything is built.
    SetGradEnabled,
}

/// Builtin codes of the steps an inlined subgraph takes.
pub(crate) const SET_GRAD: i32 = 16;
pub(crate) const RESTORE_GRAD: i32 = 17;
pub(crate) const IDENTITY: i32 = 18;

/// One node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) target: Target,
    /// The serialized target, for messages.
    pub(crate) name: String,
    /// (keyword name, argument); the name is `None` for positional ones.
    pub(crate) args: Vec<(Option<String>, Arg)>,
    pub(crate) outputs: Vec<Output>,
    /// The modules whose forward the node ran in (its `nn_module_stack`):
    /// (dotted path, class), outermost first, the root ("") left out;
    /// shared with the steps an inlined subgraph adds.
    pub(crate) modules: std::sync::Arc<[(String, String)]>,
}

/// The role of one graph input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum InputRole {
    Parameter(String),
    Buffer(String),
    Constant(String),
    /// A user input: a tensor value name, or `None` for one specialised at
    /// export time (an int, a float, None, a string).
    User(Option<String>),
}

/// The role of one graph output.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OutputRole {
    User,
    Loss,
    BufferMutation(String),
    UserInputMutation(String),
}

/// One program's graph.
#[derive(Debug)]
pub(crate) struct Graph {
    /// (value name, role), in the graph's input order.
    pub(crate) inputs: Vec<(String, InputRole)>,
    pub(crate) nodes: Vec<Node>,
    /// (what is returned, role), in order.
    pub(crate) outputs: Vec<(Arg, OutputRole)>,
    pub(crate) in_spec: TreeSpec,
    pub(crate) out_spec: TreeSpec,
    /// The root module's class without its Python module ("MLP" for
    /// `flops_parity.MLP`), from the nodes' `nn_module_stack`; "Module"
    /// when no node names it.
    pub(crate) root_class: String,
}

/// The c10::ScalarType code of a serialized dtype.
pub(crate) fn c10_dtype(code: i64) -> Result<i64> {
    Ok(match code {
        1..=11 => code - 1,
        12 => 11,
        13 => 15,
        _ => return Err(Error::format(format!("dtype code {code} is not supported"))),
    })
}

fn c10_layout(code: i64) -> Result<i64> {
    Ok(match code {
        7 => 0,
        1 => 1,
        2 => 2,
        6 => 3,
        3 => 4,
        4 => 5,
        5 => 6,
        _ => return Err(Error::format(format!("layout code {code} is not supported"))),
    })
}

fn c10_memory_format(code: i64) -> Result<i64> {
    Ok(match code {
        1 => 0,
        4 => 1,
        2 => 2,
        3 => 3,
        _ => return Err(Error::format(format!("memory format code {code} is not supported"))),
    })
}

fn tensor_name(v: &Json) -> Result<String> {
    Ok(json::field(v, "name")?.as_str().ok_or_else(|| Error::format("a tensor name is not a string"))?.to_owned())
}

fn sym(v: &Json, what: &str) -> Result<Sym> {
    let (kind, inner) = json::union(v, what)?;
    Ok(match kind {
        "as_name" => Sym::Name(json::string(inner, what)?),
        "as_int" => Sym::Int(json::int(inner, what)?),
        "as_float" => Sym::Float(json::float(inner, what)?),
        "as_bool" => Sym::Bool(json::boolean(inner, what)?),
        other => return Err(Error::format(format!("{what}: unknown symbolic value kind {other:?}"))),
    })
}

fn optional_tensor(v: &Json) -> Result<Option<String>> {
    let (kind, inner) = json::union(v, "an optional tensor")?;
    match kind {
        "as_tensor" => Ok(Some(tensor_name(inner)?)),
        "as_none" => Ok(None),
        other => Err(Error::format(format!("unknown optional tensor kind {other:?}"))),
    }
}

/// One serialized `Argument`.
pub(crate) fn arg(v: &Json) -> Result<Arg> {
    let (kind, inner) = json::union(v, "an argument")?;
    let what = kind;
    Ok(match kind {
        "as_none" => Arg::None,
        "as_tensor" => Arg::Tensor(tensor_name(inner)?),
        "as_tensors" => Arg::Tensors(json::array(inner, what)?.iter().map(tensor_name).collect::<Result<_>>()?),
        "as_optional_tensor" => match optional_tensor(inner)? {
            Some(n) => Arg::Tensor(n),
            None => Arg::None,
        },
        "as_optional_tensors" => {
            Arg::OptTensors(json::array(inner, what)?.iter().map(optional_tensor).collect::<Result<_>>()?)
        }
        "as_int" => Arg::Int(json::int(inner, what)?),
        "as_ints" => Arg::Ints(json::array(inner, what)?.iter().map(|x| json::int(x, what)).collect::<Result<_>>()?),
        "as_float" => Arg::Float(json::float(inner, what)?),
        "as_floats" => {
            Arg::Floats(json::array(inner, what)?.iter().map(|x| json::float(x, what)).collect::<Result<_>>()?)
        }
        "as_bool" => Arg::Bool(json::boolean(inner, what)?),
        "as_bools" => {
            Arg::Bools(json::array(inner, what)?.iter().map(|x| json::boolean(x, what)).collect::<Result<_>>()?)
        }
        "as_string" => Arg::Str(json::string(inner, what)?),
        "as_sym_int" | "as_sym_float" | "as_sym_bool" => match sym(inner, what)? {
            Sym::Int(i) => Arg::Int(i),
            Sym::Float(f) => Arg::Float(f),
            Sym::Bool(b) => Arg::Bool(b),
            named => Arg::Sym(named),
        },
        "as_sym_ints" => Arg::SymInts(json::array(inner, what)?.iter().map(|x| sym(x, what)).collect::<Result<_>>()?),
        "as_scalar_type" => Arg::Dtype(c10_dtype(json::int(inner, what)?)?),
        "as_layout" => Arg::Layout(c10_layout(json::int(inner, what)?)?),
        "as_memory_format" => Arg::MemoryFormat(c10_memory_format(json::int(inner, what)?)?),
        "as_device" => Arg::Device,
        "as_graph" => Arg::Graph(Box::new(sub_graph(json::field(inner, "graph")?)?)),
        other => {
            return Err(Error::unsupported(format!(
                "argument kind {other:?} is not supported (script objects, operators as values, \
                 complex numbers, strings lists)"
            )))
        }
    })
}

/// Operators a program may not call: they read or write files, or view
/// memory without checking it lies inside the tensor's storage.
const REFUSED_OPS: &[&str] = &[
    "aten::from_file",
    "aten::_reshape_alias",
    "aten::_reshape_alias_copy",
    "aten::set_",
    "aten::_unsafe_masked_index",
    "aten::_unsafe_masked_index_put_accumulate",
    "aten::_mkldnn_reshape",
];

/// The operator a serialized target names.
pub(crate) fn target(name: &str) -> Result<Target> {
    if let Some(rest) = name.strip_prefix("torch.ops.") {
        let parts: Vec<&str> = rest.split('.').collect();
        if parts.len() == 3 && parts[0] != "higher_order" && parts.iter().all(|p| !p.is_empty()) {
            let overload = if parts[2] == "default" { "" } else { parts[2] };
            let op = format!("{}::{}", parts[0], parts[1]);
            if REFUSED_OPS.contains(&op.as_str()) {
                return Err(Error::unsupported(format!(
                    "node target {name}: {op} reaches outside tensors (files) or skips bounds checks; \
                     a program may not call it"
                )));
            }
            // The unchecked indexing that decompositions emit runs as its
            // checked twin: a program's indices are input like any other.
            let op = match op.as_str() {
                "aten::_unsafe_index" => "aten::index".to_owned(),
                "aten::_unsafe_index_put" => "aten::index_put".to_owned(),
                _ => op,
            };
            return Ok(Target::Op(op, overload.to_owned()));
        }
        if rest == "higher_order.wrap_with_set_grad_enabled" {
            return Ok(Target::SetGradEnabled);
        }
        if parts.first() == Some(&"higher_order") {
            return Err(Error::unsupported(format!(
                "node target {name}: higher-order operators other than torch.no_grad / enable_grad regions \
                 (autocast regions, control flow) are not supported; export without them"
            )));
        }
    }
    let code = match name {
        "_operator.add" | "operator.add" => 0,
        "_operator.sub" | "operator.sub" => 1,
        "_operator.mul" | "operator.mul" => 2,
        "_operator.floordiv" | "operator.floordiv" => 3,
        "_operator.truediv" | "operator.truediv" => 4,
        "_operator.mod" | "operator.mod" => 5,
        "_operator.neg" | "operator.neg" => 6,
        "_operator.eq" | "operator.eq" => 7,
        "_operator.ne" | "operator.ne" => 8,
        "_operator.lt" | "operator.lt" => 9,
        "_operator.le" | "operator.le" => 10,
        "_operator.gt" | "operator.gt" => 11,
        "_operator.ge" | "operator.ge" => 12,
        "torch.sym_max" => 13,
        "torch.sym_min" => 14,
        "torch.sym_not" | "_operator.not_" | "operator.not_" => 15,
        _ => {
            return Err(Error::unsupported(format!(
                "node target {name} is not an operator fulmen can run (only registered ATen and custom \
                 operators, and Python's arithmetic on sizes)"
            )))
        }
    };
    Ok(Target::Builtin(code))
}

fn output(v: &Json) -> Result<Output> {
    let (kind, inner) = json::union(v, "a node output")?;
    Ok(match kind {
        "as_none" => Output::Drop,
        "as_tensor" => Output::One(tensor_name(inner)?),
        "as_sym_int" | "as_sym_float" | "as_sym_bool" => match sym(inner, kind)? {
            Sym::Name(n) => Output::One(n),
            _ => Output::Drop,
        },
        "as_tensors" => {
            Output::List(json::array(inner, kind)?.iter().map(|t| tensor_name(t).map(Some)).collect::<Result<_>>()?)
        }
        "as_optional_tensors" => {
            Output::List(json::array(inner, kind)?.iter().map(optional_tensor).collect::<Result<_>>()?)
        }
        "as_int" | "as_float" | "as_bool" => Output::Drop,
        other => return Err(Error::unsupported(format!("node output kind {other:?} is not supported"))),
    })
}

fn node(v: &Json) -> Result<Node> {
    let name = json::string(json::field(v, "target")?, "a node target")?;
    let target = target(&name)?;
    let mut args = Vec::new();
    for input in json::array(json::field(v, "inputs")?, "node inputs")? {
        let a = arg(json::field(input, "arg")?).map_err(|e| e.context(format!("node {name}")))?;
        // kind 1: positional, 2: keyword (schema.py ArgumentKind).
        let keyword = match json::int(json::field(input, "kind")?, "an argument kind")? {
            2 => Some(json::string(json::field(input, "name")?, "an argument name")?),
            _ => None,
        };
        args.push((keyword, a));
    }
    let outputs = json::array(json::field(v, "outputs")?, "node outputs")?
        .iter()
        .map(output)
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.context(format!("node {name}")))?;
    Ok(Node { target, name, args, outputs, modules: module_stack(v).into() })
}

/// The items of a node's `nn_module_stack` (torch/_export/serde/serialize.py
/// writes "key,path,class" items joined by ";") as (state_dict path, class),
/// from the outermost module in, the root's path empty. Dynamo's paths
/// (`L['self'].a[0]`) become state_dict paths (`a.0`).
fn stack_items(v: &Json) -> Vec<(String, String)> {
    let Some(text) = v.get("metadata").and_then(|m| m.get("nn_module_stack")).and_then(Json::as_str) else {
        return Vec::new();
    };
    text.split(';')
        .filter_map(|item| {
            let (_, rest) = item.split_once(',')?;
            let (path, class) = rest.rsplit_once(',')?;
            Some((state_dict_path(path), class.to_owned()))
        })
        .collect()
}

/// A node's `nn_module_stack` as (path, class) from the outermost module
/// in, the root left out. A node without it ran in the root.
fn module_stack(v: &Json) -> Vec<(String, String)> {
    stack_items(v).into_iter().filter(|(path, _)| super::units::is_module_path(path)).collect()
}

/// The class of the root module in a node's `nn_module_stack` (the item
/// whose path is empty), without its Python module.
fn root_class(v: &Json) -> Option<String> {
    stack_items(v).into_iter().find_map(|(path, class)| {
        let name = class.rsplit('.').next()?;
        (path.is_empty() && !name.is_empty()).then(|| name.to_owned())
    })
}

/// A module path as state_dict names it: `L['self'].blocks[0]` and
/// `L__self__.blocks.0` become `blocks.0`.
fn state_dict_path(path: &str) -> String {
    let path = ["L['self']", "L__self__"].iter().find_map(|p| path.strip_prefix(p)).unwrap_or(path);
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '[' => out.push('.'),
            ']' | '\'' | '"' => {}
            c => out.push(c),
        }
    }
    out.trim_start_matches('.').to_owned()
}

fn sub_graph(v: &Json) -> Result<SubGraph> {
    let args = |key: &str| json::array(json::field(v, key)?, key)?.iter().map(arg).collect::<Result<Vec<_>>>();
    let nodes = json::array(json::field(v, "nodes")?, "nodes")?.iter().map(node).collect::<Result<Vec<_>>>()?;
    Ok(SubGraph { inputs: args("inputs")?, nodes, outputs: args("outputs")? })
}

/// `a` with every graph value name it reads passed through `f`.
fn renamed_arg(a: &Arg, f: &dyn Fn(&str) -> String) -> Arg {
    let sym = |s: &Sym| match s {
        Sym::Name(n) => Sym::Name(f(n)),
        other => other.clone(),
    };
    match a {
        Arg::Tensor(n) => Arg::Tensor(f(n)),
        Arg::Tensors(ns) => Arg::Tensors(ns.iter().map(|n| f(n)).collect()),
        Arg::OptTensors(ns) => Arg::OptTensors(ns.iter().map(|n| n.as_deref().map(f)).collect()),
        Arg::Sym(s) => Arg::Sym(sym(s)),
        Arg::SymInts(items) => Arg::SymInts(items.iter().map(sym).collect()),
        other => other.clone(),
    }
}

fn renamed_output(o: &Output, f: &dyn Fn(&str) -> String) -> Output {
    match o {
        Output::Drop => Output::Drop,
        Output::One(n) => Output::One(f(n)),
        Output::List(items) => Output::List(items.iter().map(|n| n.as_deref().map(f)).collect()),
    }
}

fn builtin(
    code: i32,
    name: &str,
    args: Vec<Arg>,
    outputs: Vec<Output>,
    modules: &std::sync::Arc<[(String, String)]>,
) -> Node {
    Node {
        target: Target::Builtin(code),
        name: name.to_owned(),
        args: args.into_iter().map(|a| (None, a)).collect(),
        outputs,
        modules: std::sync::Arc::clone(modules),
    }
}

/// Replaces each `wrap_with_set_grad_enabled` node by its subgraph, under
/// its own names (`<n>#name`), between a step that sets the grad mode and
/// one that restores it; its inputs and results pass through identities.
pub(crate) fn inline_subgraphs(nodes: Vec<Node>, fresh: &mut usize) -> Result<Vec<Node>> {
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        if n.target != Target::SetGradEnabled {
            if n.args.iter().any(|(_, a)| matches!(a, Arg::Graph(_))) {
                return Err(Error::unsupported(format!("node {}: a subgraph argument", n.name)));
            }
            out.push(n);
            continue;
        }
        let what = n.name.clone();
        let mut args = n.args.into_iter().map(|(_, a)| a);
        let (Some(Arg::Bool(enabled)), Some(Arg::Graph(sub))) = (args.next(), args.next()) else {
            return Err(Error::format(format!("{what}: expects (enabled, subgraph, inputs...)")));
        };
        let outer: Vec<Arg> = args.collect();
        if outer.len() != sub.inputs.len() {
            return Err(Error::format(format!(
                "{what}: {} inputs for a subgraph of {}",
                outer.len(),
                sub.inputs.len()
            )));
        }
        *fresh += 1;
        let prefix = format!("{fresh}#");
        let inner = |name: &str| format!("{prefix}{name}");
        for (param, given) in sub.inputs.iter().zip(outer) {
            let [name] = param.reads()[..] else {
                return Err(Error::format(format!("{what}: a subgraph input is not one named value")));
            };
            out.push(builtin(IDENTITY, &what, vec![given], vec![Output::One(inner(name))], &n.modules));
        }
        out.push(builtin(SET_GRAD, &what, vec![Arg::Bool(enabled)], Vec::new(), &n.modules));
        for node in inline_subgraphs(sub.nodes, fresh)? {
            out.push(Node {
                args: node.args.iter().map(|(k, a)| (k.clone(), renamed_arg(a, &inner))).collect(),
                outputs: node.outputs.iter().map(|o| renamed_output(o, &inner)).collect(),
                ..node
            });
        }
        out.push(builtin(RESTORE_GRAD, &what, Vec::new(), Vec::new(), &n.modules));
        let results: Vec<Option<String>> = n
            .outputs
            .iter()
            .flat_map(|o| match o {
                Output::Drop => vec![None],
                Output::One(x) => vec![Some(x.clone())],
                Output::List(items) => items.clone(),
            })
            .collect();
        if results.len() != sub.outputs.len() {
            return Err(Error::format(format!(
                "{what}: {} results for a subgraph returning {}",
                results.len(),
                sub.outputs.len()
            )));
        }
        for (name, value) in results.into_iter().zip(&sub.outputs) {
            if let Some(name) = name {
                out.push(builtin(
                    IDENTITY,
                    &what,
                    vec![renamed_arg(value, &inner)],
                    vec![Output::One(name)],
                    &n.modules,
                ));
            }
        }
    }
    Ok(out)
}

fn input_role(spec: &Json) -> Result<(String, InputRole)> {
    let (kind, inner) = json::union(spec, "an input spec")?;
    let arg_name = || tensor_name(json::field(inner, "arg")?);
    let text = |key: &str| json::string(json::field(inner, key)?, key);
    Ok(match kind {
        "parameter" => (arg_name()?, InputRole::Parameter(text("parameter_name")?)),
        "buffer" => (arg_name()?, InputRole::Buffer(text("buffer_name")?)),
        "tensor_constant" => (arg_name()?, InputRole::Constant(text("tensor_constant_name")?)),
        "user_input" => match arg(json::field(inner, "arg")?)? {
            Arg::Tensor(n) => (n.clone(), InputRole::User(Some(n))),
            _ => (String::new(), InputRole::User(None)),
        },
        "constant_input" => (String::new(), InputRole::User(None)),
        other => {
            return Err(Error::unsupported(format!(
                "input kind {other:?} is not supported (script objects and effect tokens)"
            )))
        }
    })
}

fn output_role(spec: &Json) -> Result<(Arg, OutputRole)> {
    let (kind, inner) = json::union(spec, "an output spec")?;
    let tensor = || Ok::<_, Error>(Arg::Tensor(tensor_name(json::field(inner, "arg")?)?));
    let text = |key: &str| json::string(json::field(inner, key)?, key);
    Ok(match kind {
        "user_output" => (arg(json::field(inner, "arg")?)?, OutputRole::User),
        "loss_output" => (tensor()?, OutputRole::Loss),
        "buffer_mutation" => (tensor()?, OutputRole::BufferMutation(text("buffer_name")?)),
        "user_input_mutation" => (tensor()?, OutputRole::UserInputMutation(text("user_input_name")?)),
        other => {
            return Err(Error::unsupported(format!(
                "output kind {other:?} is not supported (gradients of joint graphs, parameter mutations, \
                 effect tokens)"
            )))
        }
    })
}

/// Reads a program's graph from the parsed `models/<name>.json`.
pub(crate) fn read(doc: &Json) -> Result<Graph> {
    let module = json::field(doc, "graph_module")?;
    let graph = json::field(module, "graph")?;
    let signature = json::field(module, "signature")?;
    let inputs = json::array(json::field(signature, "input_specs")?, "input specs")?
        .iter()
        .map(input_role)
        .collect::<Result<Vec<_>>>()?;
    let outputs = json::array(json::field(signature, "output_specs")?, "output specs")?
        .iter()
        .map(output_role)
        .collect::<Result<Vec<_>>>()?;
    let raw_nodes = json::array(json::field(graph, "nodes")?, "nodes")?;
    let root_class = raw_nodes.iter().find_map(root_class).unwrap_or_else(|| "Module".to_owned());
    let nodes = raw_nodes.iter().map(node).collect::<Result<Vec<_>>>()?;
    let nodes = inline_subgraphs(nodes, &mut 0)?;
    let calls = json::array(json::field(module, "module_call_graph")?, "the module call graph")?;
    let top = calls.first().ok_or_else(|| Error::format("the module call graph is empty"))?;
    let call_sig = json::field(top, "signature")?;
    let in_spec = TreeSpec::parse(&json::string(json::field(call_sig, "in_spec")?, "in_spec")?)?;
    let out_spec = TreeSpec::parse(&json::string(json::field(call_sig, "out_spec")?, "out_spec")?)?;
    Ok(Graph { inputs, nodes, outputs, in_spec, out_spec, root_class })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_or_are_refused_by_name() {
        assert_eq!(target("torch.ops.aten.linear.default").unwrap(), Target::Op("aten::linear".into(), "".into()));
        assert_eq!(target("torch.ops.aten.add.Tensor").unwrap(), Target::Op("aten::add".into(), "Tensor".into()));
        assert_eq!(target("_operator.mul").unwrap(), Target::Builtin(2));
        assert_eq!(target("torch.ops.higher_order.wrap_with_set_grad_enabled").unwrap(), Target::SetGradEnabled);
        let e = target("torch.ops.higher_order.cond").unwrap_err();
        assert!(e.message.contains("higher-order"), "{}", e.message);
        let e = target("builtins.print").unwrap_err();
        assert!(e.message.contains("builtins.print"), "{}", e.message);
        assert!(target("torch.ops.aten..default").is_err());
        assert!(target("torch.ops.aten.from_file.default").unwrap_err().message.contains("outside tensors"));
        assert_eq!(
            target("torch.ops.aten._unsafe_index.Tensor").unwrap(),
            Target::Op("aten::index".into(), "Tensor".into())
        );
    }

    #[test]
    fn module_stacks_read_as_state_dict_paths() {
        let node = |stack: &str| serde_json::json!({"metadata": {"nn_module_stack": stack}});
        let s = module_stack(&node(
            "L__self__,,m.Net;L__self__blocks.0,blocks.0,m.Block;L__self___b,L['self'].b[1]['x'],torch.nn.Linear",
        ));
        assert_eq!(
            s,
            [("blocks.0".to_owned(), "m.Block".to_owned()), ("b.1.x".to_owned(), "torch.nn.Linear".to_owned())]
        );
        assert!(module_stack(&serde_json::json!({})).is_empty(), "no metadata: the root");
        assert!(module_stack(&node("garbage;;,")).is_empty());
        let stack = "L__self__,,flops_parity.MLP;L__self__net,net,torch.nn.modules.container.Sequential";
        assert_eq!(root_class(&node(stack)).as_deref(), Some("MLP"));
        assert_eq!(root_class(&node("L__self__net,net,Sequential")), None, "no root item");
    }

    #[test]
    fn arguments_of_every_kind_parse() {
        let p = |s: &str| arg(&serde_json::from_str(s).unwrap());
        assert_eq!(p(r#"{"as_tensor": {"name": "x"}}"#).unwrap(), Arg::Tensor("x".into()));
        assert_eq!(p(r#"{"as_float": "-Infinity"}"#).unwrap(), Arg::Float(f64::NEG_INFINITY));
        assert_eq!(p(r#"{"as_scalar_type": 13}"#).unwrap(), Arg::Dtype(15));
        assert_eq!(
            p(r#"{"as_sym_ints": [{"as_name": "s0"}, {"as_int": 4}]}"#).unwrap(),
            Arg::SymInts(vec![Sym::Name("s0".into()), Sym::Int(4)])
        );
        assert_eq!(
            p(r#"{"as_optional_tensors": [{"as_tensor": {"name": "a"}}, {"as_none": true}]}"#).unwrap(),
            Arg::OptTensors(vec![Some("a".into()), None])
        );
        assert!(p(r#"{"as_graph": {}}"#).is_err());
        assert!(p(r#"{"as_custom_obj": {}}"#).unwrap_err().message.contains("as_custom_obj"));
        assert!(p(r#"{"as_int": 1, "as_float": 2}"#).is_err());
        assert!(p(r#"{"as_int": 1.5}"#).is_err());
    }
}
