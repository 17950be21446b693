//! One exported program compiled for `csrc/exported.cpp`: every graph value
//! gets a slot, every node becomes an instruction whose arguments point at
//! slots or hold constants, and each instruction frees the slots no later
//! one reads. Running flattens the caller's arguments into the program's
//! inputs, runs the instructions and nests the results back.
use super::graph::{Arg, Graph, InputRole, Node, Output, OutputRole, Sym, Target};
use super::pytree::TreeSpec;
use crate::error::{Error, Result};
use crate::nn::script_value::CxxValue;
use crate::nn::Value;
use crate::shim::{self, call, ArgKind, EpArg};
use libc::{c_char, c_void};
use std::collections::HashMap;
use std::ffi::CString;
use tch::Tensor;

/// An owned program of the shim, shared by every replica of a model.
struct RawProgram(*mut c_void);

// SAFETY: a built program is read-only; runs only read it.
unsafe impl Send for RawProgram {}
// SAFETY: as above.
unsafe impl Sync for RawProgram {}

impl Drop for RawProgram {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { shim::fulmen_cxx_ep_free(self.0) }
    }
}

/// Where one returned value comes from.
#[derive(Debug)]
enum Source {
    /// The program's output at this index.
    Output(usize),
    /// A value known at export time.
    Constant(ConstValue),
}

#[derive(Debug, Clone)]
enum ConstValue {
    None,
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl ConstValue {
    fn value(&self) -> Value {
        match self {
            ConstValue::None => Value::None,
            ConstValue::Int(i) => Value::Int(*i),
            ConstValue::Float(f) => Value::Double(*f),
            ConstValue::Bool(b) => Value::Bool(*b),
        }
    }
}

/// A compiled program.
pub(crate) struct Program {
    pub(crate) name: String,
    raw: std::sync::Arc<RawProgram>,
    /// The tensor inputs, in order, and where each comes from.
    pub(crate) inputs: Vec<InputRole>,
    /// The graph's outputs, in order: where from, and what they are for.
    outputs: Vec<(Source, OutputRole)>,
    n_raw_outputs: usize,
    /// How positional arguments nest (the args part of the in_spec).
    args_spec: TreeSpec,
    /// Which user inputs (in leaf order) are tensors the program reads.
    user_leaves: Vec<Option<String>>,
    out_spec: TreeSpec,
    /// Which instruction reads and defines which slot, and in which module
    /// it runs: what FSDP units inside the program are planned from.
    pub(crate) layout: Layout,
    /// The root module's class (FLOP counts by module name modules from it).
    pub(crate) root_class: String,
}

/// The data flow of a compiled program, instruction by instruction.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    /// The slots each instruction reads.
    pub(crate) reads: Vec<Vec<i64>>,
    /// The slots each instruction defines.
    pub(crate) defines: Vec<Vec<i64>>,
    /// The innermost module each instruction ran in ("" for the root).
    pub(crate) module: Vec<String>,
    /// Whether each instruction may return a value sharing memory with
    /// an argument (a view, an identity).
    pub(crate) aliases: Vec<bool>,
    /// The slots each instruction's first argument reads: the one a view,
    /// an in-place operator or an identity shares memory with.
    pub(crate) first_reads: Vec<Vec<i64>>,
    /// The slots the program returns.
    pub(crate) results: Vec<i64>,
    /// Every module the program ran in: (dotted path, class), in order of
    /// first appearance.
    pub(crate) classes: Vec<(String, String)>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program").field("name", &self.name).field("inputs", &self.inputs.len()).finish()
    }
}

/// Slots of named graph values.
struct Slots {
    of: HashMap<String, i64>,
    next: i64,
}

impl Slots {
    fn define(&mut self, name: &str, node: &str) -> Result<i64> {
        if self.of.contains_key(name) {
            return Err(Error::format(format!("{node}: the value {name:?} is defined twice")));
        }
        let s = self.next;
        self.of.insert(name.to_owned(), s);
        self.next += 1;
        Ok(s)
    }

    fn read(&self, name: &str, node: &str) -> Result<i64> {
        self.of
            .get(name)
            .copied()
            .ok_or_else(|| Error::format(format!("{node}: reads the value {name:?} before anything defines it")))
    }
}

/// The C strings and lists one argument points at while it is handed over.
struct HeldArg {
    arg: EpArg,
    _ints: Vec<i64>,
    _floats: Vec<f64>,
    _text: Option<CString>,
}

fn held(kind: ArgKind, i: i64, f: f64, ints: Vec<i64>, floats: Vec<f64>, text: Option<CString>) -> HeldArg {
    let (s, s_len) = text.as_ref().map_or((std::ptr::null(), 0), |t| (t.as_ptr(), t.as_bytes().len()));
    let n = if kind == ArgKind::Floats {
        floats.len()
    } else if kind == ArgKind::SymInts {
        ints.len() / 2
    } else {
        ints.len()
    };
    HeldArg {
        arg: EpArg { kind: kind as i32, i, f, s, s_len, ints: ints.as_ptr(), floats: floats.as_ptr(), n },
        _ints: ints,
        _floats: floats,
        _text: text,
    }
}

fn lower(arg: &Arg, slots: &Slots, node: &str) -> Result<HeldArg> {
    let slot = |n: &str| slots.read(n, node);
    Ok(match arg {
        Arg::None => held(ArgKind::None, 0, 0.0, Vec::new(), Vec::new(), None),
        Arg::Tensor(n) | Arg::Sym(Sym::Name(n)) => held(ArgKind::Slot, slot(n)?, 0.0, Vec::new(), Vec::new(), None),
        Arg::Sym(Sym::Int(i)) | Arg::Int(i) => held(ArgKind::Int, *i, 0.0, Vec::new(), Vec::new(), None),
        Arg::Sym(Sym::Float(f)) | Arg::Float(f) => held(ArgKind::Float, 0, *f, Vec::new(), Vec::new(), None),
        Arg::Sym(Sym::Bool(b)) | Arg::Bool(b) => held(ArgKind::Bool, i64::from(*b), 0.0, Vec::new(), Vec::new(), None),
        Arg::Tensors(ns) => {
            held(ArgKind::Tensors, 0, 0.0, ns.iter().map(|n| slot(n)).collect::<Result<_>>()?, Vec::new(), None)
        }
        Arg::OptTensors(ns) => {
            let items = ns.iter().map(|n| n.as_deref().map_or(Ok(-1), slot)).collect::<Result<_>>()?;
            held(ArgKind::OptTensors, 0, 0.0, items, Vec::new(), None)
        }
        Arg::Ints(v) => held(ArgKind::Ints, 0, 0.0, v.clone(), Vec::new(), None),
        Arg::Floats(v) => held(ArgKind::Floats, 0, 0.0, Vec::new(), v.clone(), None),
        Arg::Bools(v) => held(ArgKind::Bools, 0, 0.0, v.iter().map(|b| i64::from(*b)).collect(), Vec::new(), None),
        Arg::Str(s) => {
            let text = CString::new(s.as_str()).map_err(|_| Error::format(format!("{node}: a string with a NUL")))?;
            held(ArgKind::String, 0, 0.0, Vec::new(), Vec::new(), Some(text))
        }
        Arg::SymInts(items) => {
            let mut pairs = Vec::with_capacity(items.len() * 2);
            for s in items {
                match s {
                    Sym::Name(n) => pairs.extend([1, slot(n)?]),
                    Sym::Int(i) => pairs.extend([0, *i]),
                    other => return Err(Error::format(format!("{node}: {other:?} in a list of sizes"))),
                }
            }
            held(ArgKind::SymInts, 0, 0.0, pairs, Vec::new(), None)
        }
        Arg::Dtype(c) => held(ArgKind::Dtype, *c, 0.0, Vec::new(), Vec::new(), None),
        Arg::Layout(c) => held(ArgKind::Layout, *c, 0.0, Vec::new(), Vec::new(), None),
        Arg::MemoryFormat(c) => held(ArgKind::MemoryFormat, *c, 0.0, Vec::new(), Vec::new(), None),
        Arg::Device => held(ArgKind::Device, 0, 0.0, Vec::new(), Vec::new(), None),
        Arg::Graph(_) => return Err(Error::format(format!("{node}: a subgraph outside a higher-order operator"))),
    })
}

/// The last node (index) that reads each slot; outputs are read "after"
/// every node.
fn last_reads(graph: &Graph, slots: &Slots) -> HashMap<i64, usize> {
    let mut last = HashMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        for (_, a) in &node.args {
            for n in a.reads() {
                if let Some(s) = slots.of.get(n) {
                    last.insert(*s, i);
                }
            }
        }
    }
    for (a, _) in &graph.outputs {
        for n in a.reads() {
            if let Some(s) = slots.of.get(n) {
                last.insert(*s, usize::MAX);
            }
        }
    }
    last
}

fn out_slots(o: &Output, slots: &mut Slots, node: &str) -> Result<(i32, Vec<i64>)> {
    Ok(match o {
        Output::Drop => (0, Vec::new()),
        Output::One(n) => (1, vec![slots.define(n, node)?]),
        Output::List(items) => {
            (2, items.iter().map(|n| n.as_deref().map_or(Ok(-1), |n| slots.define(n, node))).collect::<Result<_>>()?)
        }
    })
}

impl Program {
    /// Compiles `graph`, named `name` in messages.
    pub(crate) fn compile(name: &str, graph: Graph) -> Result<Program> {
        let mut slots = Slots { of: HashMap::new(), next: 0 };
        let mut inputs = Vec::new();
        let mut user_leaves = Vec::new();
        for (value, role) in &graph.inputs {
            if let InputRole::User(t) = role {
                user_leaves.push(t.clone());
                if t.is_none() {
                    continue;
                }
            }
            slots.define(value, "the inputs")?;
            inputs.push(role.clone());
        }
        // Slots are counted before the shim's program is made.
        let mut defined = slots.next;
        for node in &graph.nodes {
            for o in &node.outputs {
                defined += match o {
                    Output::Drop => 0,
                    Output::One(_) => 1,
                    Output::List(items) => items.len() as i64,
                };
            }
        }
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: an out pointer.
        call("building an exported program", |err, len| unsafe {
            shim::fulmen_cxx_ep_new(defined, inputs.len(), &mut raw, err, len)
        })?;
        let raw = RawProgram(raw);
        // Names first, so liveness knows every slot.
        let mut node_outs = Vec::with_capacity(graph.nodes.len());
        for (i, node) in graph.nodes.iter().enumerate() {
            let what = format!("node {i} ({})", node.name);
            for (_, a) in &node.args {
                for n in a.reads() {
                    slots.read(n, &what)?;
                }
            }
            node_outs.push(node.outputs.iter().map(|o| out_slots(o, &mut slots, &what)).collect::<Result<Vec<_>>>()?);
        }
        let last = last_reads(&graph, &slots);
        let mut drops: Vec<Vec<i64>> = vec![Vec::new(); graph.nodes.len()];
        for (s, i) in &last {
            if *i != usize::MAX {
                drops[*i].push(*s);
            }
        }
        for (i, outs) in node_outs.iter().enumerate() {
            for s in outs.iter().flat_map(|(_, v)| v.iter()).filter(|s| **s >= 0) {
                if !last.contains_key(s) {
                    drops[i].push(*s);
                }
            }
        }
        for (i, node) in graph.nodes.iter().enumerate() {
            let what = format!("{name}: node {i} ({})", node.name);
            Self::add_node(&raw, node, &node_outs[i], &drops[i], &slots, &what)?;
            Self::name_modules(&raw, i, node, &what)?;
        }
        let mut layout = Layout::default();
        let mut seen_modules = std::collections::HashSet::new();
        for (i, (node, outs)) in graph.nodes.iter().zip(&node_outs).enumerate() {
            // SAFETY: a live program; `i` is one of its instructions.
            layout.aliases.push(unsafe { shim::fulmen_cxx_ep_aliases(raw.0, i) } == 1);
            let first = node.args.first().map(|(_, a)| a.reads()).unwrap_or_default();
            layout.first_reads.push(first.into_iter().filter_map(|n| slots.of.get(n).copied()).collect());
            let reads = node.args.iter().flat_map(|(_, a)| a.reads()).filter_map(|n| slots.of.get(n).copied());
            layout.reads.push(reads.collect());
            layout.defines.push(outs.iter().flat_map(|(_, v)| v.iter().copied()).filter(|s| *s >= 0).collect());
            layout.module.push(node.modules.last().map(|(p, _)| p.clone()).unwrap_or_default());
            for (path, class) in node.modules.iter() {
                if seen_modules.insert(path.clone()) {
                    layout.classes.push((path.clone(), class.clone()));
                }
            }
        }
        let mut raw_outputs = Vec::new();
        let mut outputs = Vec::new();
        for (a, role) in &graph.outputs {
            let source = match a {
                Arg::Tensor(n) | Arg::Sym(Sym::Name(n)) => {
                    raw_outputs.push(slots.read(n, "the outputs")?);
                    Source::Output(raw_outputs.len() - 1)
                }
                Arg::None => Source::Constant(ConstValue::None),
                Arg::Int(i) => Source::Constant(ConstValue::Int(*i)),
                Arg::Float(f) => Source::Constant(ConstValue::Float(*f)),
                Arg::Bool(b) => Source::Constant(ConstValue::Bool(*b)),
                other => return Err(Error::unsupported(format!("{name}: an output of kind {other:?}"))),
            };
            outputs.push((source, role.clone()));
        }
        layout.results = raw_outputs.clone();
        // SAFETY: a live program and a slice of slots.
        call("naming the program's outputs", |err, len| unsafe {
            shim::fulmen_cxx_ep_outputs(raw.0, raw_outputs.as_ptr(), raw_outputs.len(), err, len)
        })?;
        let TreeSpec::Tuple(mut parts) = graph.in_spec else {
            return Err(Error::format(format!("{name}: the input spec is not (args, kwargs)")));
        };
        if parts.len() != 2 || parts[1].leaves() != 0 {
            return Err(Error::unsupported(format!(
                "{name}: the program takes keyword arguments; export it with positional ones only"
            )));
        }
        let args_spec = parts.swap_remove(0);
        if args_spec.leaves() != user_leaves.len() {
            return Err(Error::format(format!(
                "{name}: the input spec has {} leaves, the program {} user inputs",
                args_spec.leaves(),
                user_leaves.len()
            )));
        }
        let n_user_out = outputs.iter().filter(|(_, r)| matches!(r, OutputRole::User | OutputRole::Loss)).count();
        if graph.out_spec.leaves() != n_user_out {
            return Err(Error::format(format!(
                "{name}: the output spec has {} leaves, the program {n_user_out} user outputs",
                graph.out_spec.leaves()
            )));
        }
        Ok(Program {
            root_class: graph.root_class.clone(),
            name: name.to_owned(),
            raw: std::sync::Arc::new(raw),
            inputs,
            outputs,
            n_raw_outputs: raw_outputs.len(),
            args_spec,
            user_leaves,
            out_spec: graph.out_spec,
            layout,
        })
    }

    fn add_node(
        raw: &RawProgram,
        node: &super::graph::Node,
        outs: &[(i32, Vec<i64>)],
        drops: &[i64],
        slots: &Slots,
        what: &str,
    ) -> Result<()> {
        let refused = |e: Error| Error::unsupported(format!("{what}: {}", e.message));
        match &node.target {
            Target::Op(op, overload) => {
                let op = CString::new(op.as_str()).map_err(|_| Error::format(format!("{what}: a NUL in the name")))?;
                let overload = CString::new(overload.as_str())
                    .map_err(|_| Error::format(format!("{what}: a NUL in the overload")))?;
                // SAFETY: a live program and NUL-terminated names.
                call("resolving an operator", |err, len| unsafe {
                    shim::fulmen_cxx_ep_op(raw.0, op.as_ptr(), overload.as_ptr(), err, len)
                })
                .map_err(refused)?;
            }
            Target::SetGradEnabled => {
                return Err(Error::format(format!("{what}: a higher-order operator left after inlining")))
            }
            Target::Builtin(code) => {
                let name = CString::new(node.name.as_str()).unwrap_or_default();
                // SAFETY: a live program and a NUL-terminated name.
                call("an operator on numbers", |err, len| unsafe {
                    shim::fulmen_cxx_ep_builtin(raw.0, *code, name.as_ptr(), err, len)
                })
                .map_err(refused)?;
            }
        }
        for (keyword, a) in &node.args {
            let h = lower(a, slots, what)?;
            let kw = keyword
                .as_deref()
                .map(CString::new)
                .transpose()
                .map_err(|_| Error::format(format!("{what}: a NUL in an argument name")))?;
            let kw_ptr = kw.as_ref().map_or(std::ptr::null(), |k| k.as_ptr());
            // SAFETY: a live program; `h` keeps what the argument points at.
            call("an argument", |err, len| unsafe { shim::fulmen_cxx_ep_arg(raw.0, kw_ptr, &h.arg, err, len) })
                .map_err(refused)?;
        }
        for (kind, s) in outs {
            // SAFETY: a live program and a slice of slots.
            call("a result", |err, len| unsafe {
                shim::fulmen_cxx_ep_out(raw.0, *kind, s.as_ptr(), s.len(), err, len)
            })
            .map_err(refused)?;
        }
        // SAFETY: a live program and a slice of slots.
        call("ending a node", |err, len| unsafe {
            shim::fulmen_cxx_ep_end(raw.0, drops.as_ptr(), drops.len(), err, len)
        })
        .map_err(refused)
    }

    /// Flattens the caller's positional `args` into the program's user
    /// inputs (by graph value name): the tensors the program reads.
    pub(crate) fn user_inputs(&self, args: &[Value]) -> Result<HashMap<String, Tensor>> {
        let all = Value::Tuple(args.iter().map(Value::shallow_clone).collect());
        let mut leaves = Vec::new();
        self.args_spec.flatten(&all, &mut leaves, "args")?;
        let mut out = HashMap::new();
        for (k, (leaf, name)) in leaves.iter().zip(&self.user_leaves).enumerate() {
            if let Some(name) = name {
                let Value::Tensor(t) = leaf else {
                    return Err(Error::invalid(format!(
                        "{}: input {k} ({name}) is a tensor, got a {}",
                        self.name,
                        leaf.kind_name()
                    )));
                };
                out.insert(name.clone(), t.shallow_clone());
            }
        }
        Ok(out)
    }

    /// Names the modules instruction `i` ran in (its `nn_module_stack`'s
    /// paths), for FLOP counts by module.
    fn name_modules(raw: &RawProgram, i: usize, node: &Node, what: &str) -> Result<()> {
        if node.modules.is_empty() {
            return Ok(());
        }
        let paths = node
            .modules
            .iter()
            .map(|(p, _)| {
                CString::new(p.as_str()).map_err(|_| Error::format(format!("{what}: a module path holds NUL")))
            })
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const c_char> = paths.iter().map(|p| p.as_ptr()).collect();
        // SAFETY: a live program, `i` one of its instructions, and C strings
        // alive for the call.
        call(what, |err, len| unsafe { shim::fulmen_cxx_ep_modules(raw.0, i, ptrs.as_ptr(), ptrs.len(), err, len) })
    }

    /// Runs the program on `inputs` (one tensor per entry of
    /// [`Program::inputs`]) on `device`, calling `hooks`' function at its
    /// events; returns the outputs with their roles.
    pub(crate) fn run(
        &self,
        inputs: &[Tensor],
        device: (i32, i32),
        hooks: Option<(&[shim::EpEvent], shim::EpHook, *mut c_void)>,
    ) -> Result<Vec<(Value, OutputRole)>> {
        let (events, hook, ctx): (&[shim::EpEvent], _, _) = match hooks {
            Some((e, h, c)) => (e, Some(h), c),
            None => (&[], None, std::ptr::null_mut()),
        };
        let ptrs: Vec<*const c_void> = inputs.iter().map(|t| t.as_ptr() as *const c_void).collect();
        let mut raw_out: Vec<*mut c_void> = vec![std::ptr::null_mut(); self.n_raw_outputs];
        // SAFETY: a live program, live input tensors and room for each output.
        call(&format!("exported program {}", self.name), |err, len| unsafe {
            shim::fulmen_cxx_ep_run(
                self.raw.0,
                ptrs.as_ptr(),
                ptrs.len(),
                device.0,
                device.1,
                events.as_ptr(),
                events.len(),
                hook,
                ctx,
                raw_out.as_mut_ptr(),
                raw_out.len(),
                err,
                len,
            )
        })?;
        let held: Vec<CxxValue> = raw_out.into_iter().map(CxxValue).collect();
        self.outputs
            .iter()
            .map(|(source, role)| {
                let v = match source {
                    Source::Output(k) => Value::from_cxx(&held[*k])?,
                    Source::Constant(c) => c.value(),
                };
                Ok((v, role.clone()))
            })
            .collect()
    }

    /// Nests the user outputs (in order) as the program's output spec says.
    pub(crate) fn nest(&self, user: Vec<Value>) -> Result<Value> {
        let mut it = user.into_iter();
        let v = self.out_spec.unflatten(&mut it)?;
        if it.next().is_some() {
            return Err(Error::state(format!("{}: more outputs than its output spec holds", self.name)));
        }
        Ok(v)
    }

    /// How many values the output spec holds at its top: a tuple's items, else 1.
    pub(crate) fn num_returns(&self) -> usize {
        match &self.out_spec {
            TreeSpec::Tuple(c) | TreeSpec::List(c) => c.len(),
            _ => 1,
        }
    }
}
