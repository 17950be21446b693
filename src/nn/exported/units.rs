//! Sharding units inside an exported program (FSDP's units for modules the
//! program inlined): the program's module tree, recovered from its nodes'
//! `nn_module_stack` and its parameters' names, for the wrap policy; and,
//! per program, when a run calls each unit's hooks, as a module's forward
//! would: gathered before the first instruction of its modules (or reading
//! its parameters), its outputs handed over once computed, and resharded
//! after the last.
use super::graph::InputRole;
use super::program::Program;
use crate::error::{Error, Result};
use crate::nn::ShardHook;
use libc::{c_int, c_void, size_t};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tch::Tensor;

/// The module path of a dotted tensor name ("" for a top-level one).
pub(crate) fn parent(name: &str) -> &str {
    name.rsplit_once('.').map_or("", |(p, _)| p)
}

/// The deepest module path taken from an archive: deeper ones (and their
/// tensors) are left out of the module tree.
const MAX_MODULE_DEPTH: usize = 32;

/// The longest module path taken from an archive.
const MAX_MODULE_PATH: usize = 1024;

/// Whether `path` is a module path the tree takes: 1 to
/// [`MAX_MODULE_DEPTH`] non-empty parts, at most [`MAX_MODULE_PATH`]
/// bytes. Names from an archive are not trusted: an empty part would
/// make a module its own child.
pub(crate) fn is_module_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_MODULE_PATH
        && path.split('.').count() <= MAX_MODULE_DEPTH
        && path.split('.').all(|part| !part.is_empty())
}

/// The modules of an exported model: every module a program ran in and
/// every module holding a parameter, with their ancestors.
#[derive(Debug, Default)]
pub(crate) struct ModuleTree {
    /// The children of each path ("" for the root), in order of first
    /// appearance.
    children: HashMap<String, Vec<String>>,
    /// The class of each module a program ran in ("torch.nn.modules.linear.Linear").
    class: HashMap<String, String>,
}

impl ModuleTree {
    /// The tree of `classes` (path, class) and the modules of `names`;
    /// paths that are not [`is_module_path`] are left out.
    pub(crate) fn new<'a>(classes: &[(String, String)], names: impl Iterator<Item = &'a str>) -> ModuleTree {
        let mut tree = ModuleTree::default();
        let mut known: HashSet<String> = HashSet::new();
        let mut add = |path: &str, tree: &mut ModuleTree| {
            if !is_module_path(path) {
                return false;
            }
            let mut end = 0;
            for (k, part) in path.split('.').enumerate() {
                end += part.len() + usize::from(k > 0);
                let here = &path[..end];
                if known.insert(here.to_owned()) {
                    tree.children.entry(parent(here).to_owned()).or_default().push(here.to_owned());
                }
            }
            true
        };
        for (path, class) in classes {
            if add(path, &mut tree) {
                tree.class.entry(path.clone()).or_insert_with(|| class.clone());
            }
        }
        for name in names {
            add(parent(name), &mut tree);
        }
        tree
    }

    /// The children of `path`.
    pub(crate) fn children(&self, path: &str) -> &[String] {
        self.children.get(path).map_or(&[], Vec::as_slice)
    }

    /// Whether the module at `path` is of class `name`: its qualified name
    /// or the last part of it ("Block" for "model.Block").
    pub(crate) fn is_a(&self, path: &str, name: &str) -> bool {
        self.class.get(path).is_some_and(|c| c == name || c.rsplit('.').next() == Some(name))
    }

    /// Every path below the root, each before its children.
    pub(crate) fn pre_order(&self) -> Vec<String> {
        fn walk(tree: &ModuleTree, path: &str, out: &mut Vec<String>) {
            for c in tree.children(path) {
                out.push(c.clone());
                walk(tree, c, out);
            }
        }
        let mut out = Vec::new();
        walk(self, "", &mut out);
        out
    }
}

/// A sharding unit whose module is inside the program.
#[derive(Debug)]
pub(crate) struct InnerUnit {
    /// Its module's dotted path in the program ("blocks.0").
    pub path: String,
    /// The unit.
    pub hook: Arc<dyn ShardHook>,
    /// The names of the parameters it holds.
    pub params: HashSet<String>,
}

/// What an event does to its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Before the unit's first instruction: it gathers; its slots are the
    /// values flowing in (whether one requires a gradient).
    Gather,
    /// After instructions of the unit: its slots are values they made
    /// that later instructions outside the unit (or the results) read,
    /// kept for the unit's pre-backward hooks.
    Keep,
    /// After the unit's last instruction: the hooks go on the kept
    /// outputs, and the unit reshards (`false`: a result of the program
    /// shares its parameters' memory, so it stays gathered).
    Release(bool),
}

/// When a run of one program calls its inner units' hooks.
#[derive(Debug, Default)]
pub(crate) struct UnitEvents {
    /// (before instruction, unit, action, slots), sorted by instruction;
    /// at one instruction, keeps before releases before gathers.
    events: Vec<(i64, usize, Action, Vec<i64>)>,
}

impl UnitEvents {
    /// The events of `units` in `program`. A unit's instructions are those
    /// run in its module or below (down to a unit nested in it), and those
    /// reading its parameters or a value that may share their memory (the
    /// result of an aliasing instruction whose first argument does: a
    /// view, `t(weight)` read by a matrix product in the root), so the unit
    /// is not freed while anything in the run is still to read it; a unit
    /// whose memory a result of the program shares is not freed in it.
    pub(crate) fn plan(program: &Program, units: &[InnerUnit]) -> UnitEvents {
        let layout = &program.layout;
        let n = layout.reads.len();
        let by_path: HashMap<&str, usize> = units.iter().enumerate().map(|(k, u)| (u.path.as_str(), k)).collect();
        // The unit of a module: its own, or its nearest ancestor's.
        let unit_of_module = |m: &str| {
            let mut path = m;
            loop {
                if let Some(k) = by_path.get(path) {
                    return Some(*k);
                }
                path = path.rsplit_once('.')?.0;
            }
        };
        let mut params: HashSet<i64> = HashSet::new();
        // The units whose parameters' memory each slot may hold.
        let mut holds: HashMap<i64, Vec<usize>> = HashMap::new();
        for (k, role) in program.inputs.iter().enumerate() {
            if let InputRole::Parameter(name) = role {
                params.insert(k as i64);
                if let Some(u) = units.iter().position(|u| u.params.contains(name)) {
                    holds.insert(k as i64, vec![u]);
                }
            }
        }
        let mut nodes_of: Vec<Vec<usize>> = vec![Vec::new(); units.len()];
        let mut definer: HashMap<i64, usize> = HashMap::new();
        let mut readers: HashMap<i64, Vec<usize>> = HashMap::new();
        for i in 0..n {
            let mut via_memory: Vec<usize> = Vec::new();
            for s in &layout.reads[i] {
                readers.entry(*s).or_default().push(i);
                for u in holds.get(s).into_iter().flatten() {
                    if !via_memory.contains(u) {
                        via_memory.push(*u);
                    }
                }
            }
            if layout.aliases[i] {
                let shared: Vec<usize> =
                    layout.first_reads[i].iter().flat_map(|s| holds.get(s)).flatten().copied().collect();
                if !shared.is_empty() {
                    for s in &layout.defines[i] {
                        holds.insert(*s, shared.clone());
                    }
                }
            }
            for s in &layout.defines[i] {
                definer.insert(*s, i);
            }
            let mut mine = via_memory;
            if let Some(u) = unit_of_module(&layout.module[i]) {
                if !mine.contains(&u) {
                    mine.push(u);
                }
            }
            for u in mine {
                nodes_of[u].push(i);
            }
        }
        let results: HashSet<i64> = layout.results.iter().copied().collect();
        let mut events = Vec::new();
        for (u, nodes) in nodes_of.iter().enumerate() {
            let (Some(&first), Some(&last)) = (nodes.first(), nodes.last()) else { continue };
            let inside: HashSet<usize> = nodes.iter().copied().collect();
            let mut inbound = Vec::new();
            let mut seen = HashSet::new();
            for &i in nodes {
                for s in &layout.reads[i] {
                    let made_inside = definer.get(s).is_some_and(|d| inside.contains(d));
                    let memory = params.contains(s) || holds.get(s).is_some_and(|us| us.contains(&u));
                    if !made_inside && !memory && seen.insert(*s) {
                        inbound.push(*s);
                    }
                }
            }
            events.push((first as i64, u, Action::Gather, inbound));
            for &i in nodes {
                let out: Vec<i64> = layout.defines[i]
                    .iter()
                    .copied()
                    .filter(|s| {
                        results.contains(s) || readers.get(s).is_some_and(|rs| rs.iter().any(|r| !inside.contains(r)))
                    })
                    .collect();
                if !out.is_empty() {
                    events.push((i as i64 + 1, u, Action::Keep, out));
                }
            }
            let returned = results.iter().any(|s| holds.get(s).is_some_and(|us| us.contains(&u)));
            events.push((last as i64 + 1, u, Action::Release(!returned), Vec::new()));
        }
        let rank = |a: Action| match a {
            Action::Keep => 0,
            Action::Release(_) => 1,
            Action::Gather => 2,
        };
        events.sort_by_key(|(before, _, action, _)| (*before, rank(*action)));
        UnitEvents { events }
    }

    /// Runs `program` on `inputs` on `device` with the hooks of `units`.
    pub(crate) fn run(
        &self,
        program: &Program,
        inputs: &[Tensor],
        device: (i32, i32),
        units: &[InnerUnit],
    ) -> Result<Vec<(crate::nn::Value, super::graph::OutputRole)>> {
        let raw: Vec<crate::shim::EpEvent> = self
            .events
            .iter()
            .map(|(before, _, _, slots)| crate::shim::EpEvent {
                before: *before,
                slots: slots.as_ptr(),
                n_slots: slots.len(),
            })
            .collect();
        let mut state =
            RunState { events: self, units, kept: (0..units.len()).map(|_| Vec::new()).collect(), error: None };
        let ctx = &mut state as *mut RunState<'_> as *mut c_void;
        let out = program.run(inputs, device, Some((&raw, on_event, ctx)));
        match (out, state.error.take()) {
            (Ok(v), None) => Ok(v),
            (_, Some(e)) => Err(e.context(format!("exported program {}", program.name))),
            (Err(e), None) => Err(e),
        }
    }
}

/// What one run's events share.
struct RunState<'a> {
    events: &'a UnitEvents,
    units: &'a [InnerUnit],
    /// Per unit, the outputs kept until its release.
    kept: Vec<Vec<Tensor>>,
    /// The first hook's error.
    error: Option<Error>,
}

impl RunState<'_> {
    fn handle(&mut self, event: usize, tensors: Vec<Tensor>) -> Result<()> {
        let (_, u, action, _) = self.events.events.get(event).ok_or_else(|| Error::state("an unknown event"))?;
        let unit = self.units.get(*u).ok_or_else(|| Error::state("an event of an unknown unit"))?;
        match action {
            Action::Gather => {
                crate::nn::shard_hook::note_inputs(unit.hook.as_ref(), &tensors);
                unit.hook.before_forward().map_err(|e| e.context(format!("the unit at {:?}", unit.path)))
            }
            Action::Keep => {
                self.kept[*u].extend(tensors);
                Ok(())
            }
            Action::Release(reshard) => {
                let kept = std::mem::take(&mut self.kept[*u]);
                unit.hook.after_forward(&kept, *reshard).map_err(|e| e.context(format!("the unit at {:?}", unit.path)))
            }
        }
    }
}

/// The run's hook: takes the tensors, then runs the event's action; an
/// error (or a panic) is kept in the state and fails the run.
extern "C" fn on_event(ctx: *mut c_void, event: size_t, tensors: *mut *mut c_void, n: size_t) -> c_int {
    let mut owned = Vec::with_capacity(n);
    for j in 0..n {
        // SAFETY: the shim hands `n` pointers, each a new `at::Tensor*` this
        // hook owns, or NULL.
        let p = unsafe { *tensors.add(j) };
        if !p.is_null() {
            // SAFETY: as above; ownership passes to the Tensor.
            owned.push(unsafe { Tensor::from_ptr(p.cast()) });
        }
    }
    // SAFETY: `ctx` is the RunState of the run calling this hook, alive and
    // not otherwise borrowed while the run lasts.
    let state = unsafe { &mut *(ctx as *mut RunState<'_>) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| state.handle(event, owned))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            state.error.get_or_insert(e);
            1
        }
        Err(_) => {
            state.error.get_or_insert(Error::state("an FSDP hook of an exported program panicked"));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_module_paths_are_left_out_of_the_tree() {
        let deep = vec!["m"; MAX_MODULE_DEPTH + 1].join(".");
        let deep_name = format!("{deep}.w");
        let classes: Vec<(String, String)> =
            [("blocks.0", "x.Block"), (".a", "C"), ("a..b", "C"), (deep.as_str(), "C")]
                .iter()
                .map(|(p, c)| (p.to_string(), c.to_string()))
                .collect();
        let names = [".a.w", "blocks.0.fc.weight", "x..y.w", "head.bias", "top", deep_name.as_str()];
        let tree = ModuleTree::new(&classes, names.iter().copied());
        // An empty part would make a module its own child: the walks
        // below would never end.
        assert_eq!(tree.pre_order(), ["blocks", "blocks.0", "blocks.0.fc", "head"]);
        assert!(tree.is_a("blocks.0", "Block") && tree.is_a("blocks.0", "x.Block"));
        assert!(!tree.is_a("blocks", "Block") && !tree.is_a("blocks.0", "Bloc"));
        assert!(!is_module_path(&"x".repeat(MAX_MODULE_PATH + 1)));
    }
}
