//! Choosing a model's sharding units (Lightning's `auto_wrap_policy`) and
//! linking every module to the unit that owns the parameters it reads.
use super::settings::FsdpOptions;
use super::unit::{FsdpUnit, UnitHook};
use crate::error::{Error, ErrorCode, Result};
use crate::nn::{param_identity, InnerUnit, Module, ModuleTree, ParamId, ShardHook, ShardLink, Slot};
use crate::tensor::device::{impl_identity, Device};
use std::collections::HashMap;
use std::sync::Arc;
use tch::Tensor;

/// A unit to make: the module's path and the parameters it owns.
pub(crate) struct PlannedUnit {
    /// Dotted path of the module ("" for the root).
    pub path: String,
    /// Its parameters, in `named_parameters` order.
    pub params: Vec<Tensor>,
}

/// The units of `model` under `opts`, innermost first, the root last:
/// every module whose class is in the wrap policy, or (size policy) whose
/// parameters not yet in a unit number at least `min_num_params`, is a
/// unit; the root owns the rest. A parameter reached under several names
/// (tied weights) belongs to the root, which stays gathered through a step.
/// Frozen parameters are sharded too (a finetuning callback may unfreeze
/// them); 0-dim ones are not sharded but returned second, to stay
/// replicated with their gradients averaged.
pub(crate) fn plan(model: &Module, opts: &FsdpOptions) -> (Vec<PlannedUnit>, Vec<Tensor>) {
    let mut seen: HashMap<_, usize> = HashMap::new();
    model.visit("", &mut |_, t, slot| {
        if slot == Slot::Param {
            if let Some(id) = param_identity(t) {
                *seen.entry(id).or_default() += 1;
            }
        }
    });
    let tied = |t: &Tensor| param_identity(t).is_some_and(|id| seen.get(&id).copied().unwrap_or(0) > 1);
    let mut planner = Planner { opts, tied: &tied, taken: Default::default(), units: Vec::new() };
    let rest = planner.walk(model, "", true);
    let mut units = planner.units;
    let mut root: Vec<Tensor> = Vec::new();
    let mut root_seen = std::collections::HashSet::new();
    model.visit("", &mut |_, t, slot| {
        if slot == Slot::Param && tied(t) {
            if let Some(id) = param_identity(t) {
                if root_seen.insert(id) {
                    root.push(t.shallow_clone());
                }
            }
        }
    });
    root.extend(rest);
    units.push(PlannedUnit { path: String::new(), params: root });
    let mut replicated = Vec::new();
    for u in units.iter_mut() {
        let (scalars, sharded): (Vec<Tensor>, Vec<Tensor>) = u.params.drain(..).partition(|t| t.dim() == 0);
        u.params = sharded;
        replicated.extend(scalars);
    }
    (units, replicated)
}

/// The state of one planning walk: the policy, which parameters are tied
/// (the root's), those a unit took already, and the units planned so far.
struct Planner<'a> {
    opts: &'a FsdpOptions,
    tied: &'a dyn Fn(&Tensor) -> bool,
    taken: std::collections::HashSet<ParamId>,
    units: Vec<PlannedUnit>,
}

impl Planner<'_> {
    /// Plans the units below `m` (at `path`) and returns its parameters
    /// that no unit took.
    fn walk(&mut self, m: &Module, path: &str, is_root: bool) -> Vec<Tensor> {
        let mut own: Vec<Tensor> = Vec::new();
        if let Some(tree) = m.inner_modules() {
            let mut params: HashMap<String, Vec<Tensor>> = HashMap::new();
            for (name, t, buffer) in m.inner_state() {
                if !buffer {
                    params.entry(crate::nn::exported_parent(&name).to_owned()).or_default().push(t);
                }
            }
            let inner = Inner { tree: &tree, params: &params, path };
            own.extend(self.walk_inner(&inner, ""));
        }
        m.visit_direct(&mut |_, t, slot| {
            if slot == Slot::Param {
                self.take(t, &mut own);
            }
        });
        for (name, child) in m.child_modules() {
            own.extend(self.walk(child, &join(path, name), false));
        }
        let by_class = self.opts.wrap_classes.iter().any(|c| c == m.type_name());
        self.unit_or_rest(path, own, by_class, !is_root)
    }

    /// [`Planner::walk`] for the module at `at` inside an exported
    /// program (the program's root, "", is the exported module's own
    /// business).
    fn walk_inner(&mut self, inner: &Inner<'_>, at: &str) -> Vec<Tensor> {
        let mut own: Vec<Tensor> = Vec::new();
        for t in inner.params.get(at).into_iter().flatten() {
            self.take(t, &mut own);
        }
        for child in inner.tree.children(at) {
            own.extend(self.walk_inner(inner, child));
        }
        let by_class = self.opts.wrap_classes.iter().any(|c| inner.tree.is_a(at, c));
        self.unit_or_rest(&join(inner.path, at), own, by_class, !at.is_empty())
    }

    /// Adds the parameter `t` to `own` unless it is tied or a unit took it
    /// already.
    fn take(&mut self, t: &Tensor, own: &mut Vec<Tensor>) {
        if (self.tied)(t) {
            return;
        }
        if let Some(id) = param_identity(t) {
            if self.taken.insert(id) {
                own.push(t.shallow_clone());
            }
        }
    }

    /// Makes `own` the unit at `path` when the module may be one and its
    /// class (`by_class`) or the size policy says so (nothing is left);
    /// else gives `own` back to the module above.
    fn unit_or_rest(&mut self, path: &str, own: Vec<Tensor>, by_class: bool, may_be_unit: bool) -> Vec<Tensor> {
        let big_enough =
            || self.opts.min_num_params.is_some_and(|n| own.iter().map(|t| t.numel() as u64).sum::<u64>() >= n);
        if may_be_unit && !own.is_empty() && (by_class || big_enough()) {
            self.units.push(PlannedUnit { path: path.to_owned(), params: own });
            return Vec::new();
        }
        own
    }
}

/// The modules inside an exported program, for planning units there.
struct Inner<'a> {
    /// The program's modules.
    tree: &'a ModuleTree,
    /// The program's parameters by the path of the module holding them.
    params: &'a HashMap<String, Vec<Tensor>>,
    /// The exported module's own path in the model.
    path: &'a str,
}

/// `path.name`, or `name` below the root.
fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// The indices into `units` in the order of their modules in a pre-order
/// walk of `model` (the root first, then each child before its own
/// children): the order FSDP2 keeps its states in, and so the order its
/// final callback reduces the units left gathered in.
pub(crate) fn pre_order(model: &Module, units: &[Arc<FsdpUnit>]) -> Vec<usize> {
    fn walk(m: &Module, path: &str, out: &mut Vec<String>) {
        out.push(path.to_owned());
        if let Some(tree) = m.inner_modules() {
            out.extend(tree.pre_order().iter().map(|p| join(path, p)));
        }
        for (name, child) in m.child_modules() {
            walk(child, &join(path, name), out);
        }
    }
    let mut paths = Vec::new();
    walk(model, "", &mut paths);
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by_key(|i| paths.iter().position(|p| *p == units[*i].path).unwrap_or(usize::MAX));
    order
}

/// Links every module of `model` to its unit: the modules under a unit's
/// own module (down to nested units) read that unit's parameters; the
/// others the root's. An exported program also gets the units planned
/// inside it, whose hooks its runs call (fails when a unit's parameters
/// cannot be told apart).
pub(crate) fn link(model: &mut Module, units: &[Arc<FsdpUnit>]) -> Result<()> {
    let by_path: HashMap<&str, Arc<dyn ShardHook>> =
        units.iter().map(|u| (u.path.as_str(), Arc::new(UnitHook(Arc::clone(u))) as Arc<dyn ShardHook>)).collect();
    let root = by_path.get("").cloned();
    link_below(model, "", root, &by_path, units)
}

fn link_below(
    m: &mut Module,
    path: &str,
    inherited: Option<Arc<dyn ShardHook>>,
    by_path: &HashMap<&str, Arc<dyn ShardHook>>,
    units: &[Arc<FsdpUnit>],
) -> Result<()> {
    let unit_module = by_path.contains_key(path);
    let (hook, owns) = match by_path.get(path) {
        Some(u) => (Some(Arc::clone(u)), !path.is_empty()),
        None => (inherited, false),
    };
    m.set_shard_link(hook.clone().map(|hook| ShardLink { hook, owns, unit_module }));
    if m.is_exported() {
        let (inner, device) = inner_units(m, path, units)?;
        m.set_inner_units(inner, device);
    }
    for (name, child) in m.child_modules_mut() {
        link_below(child, &join(path, name), hook.clone(), by_path, units)?;
    }
    Ok(())
}

/// The units whose modules are inside the exported program at `path`, with
/// the names of their parameters there, and the device they compute on.
fn inner_units(m: &Module, path: &str, units: &[Arc<FsdpUnit>]) -> Result<(Vec<InnerUnit>, Option<Device>)> {
    let mut names: HashMap<usize, String> = HashMap::new();
    for (n, t, buffer) in m.inner_state() {
        if !buffer {
            names.entry(impl_identity(&t)?).or_insert(n);
        }
    }
    let (mut out, mut device) = (Vec::new(), None);
    for u in units {
        let inner = match path.is_empty() {
            true => Some(u.path.as_str()).filter(|p| !p.is_empty()),
            false => u.path.strip_prefix(path).and_then(|p| p.strip_prefix('.')),
        };
        let Some(inner) = inner else { continue };
        let mut params = std::collections::HashSet::new();
        for p in u.lock_params().iter() {
            if let Some(n) = names.get(&impl_identity(&p.param)?) {
                params.insert(n.clone());
            }
        }
        if device.is_none() {
            device = u.compute_device()?;
        }
        let hook: Arc<dyn ShardHook> = Arc::new(UnitHook(Arc::clone(u)));
        out.push(InnerUnit { path: inner.to_owned(), hook, params });
    }
    Ok((out, device))
}

/// Removes every module's link and checkpoint.
pub(crate) fn unlink(model: &mut Module) {
    model.set_shard_link(None);
    model.set_inner_units(Vec::new(), None);
    model.checkpointed_by_strategy = false;
    for (_, child) in model.child_modules_mut() {
        unlink(child);
    }
}

/// Checkpoints every module below the root whose class is in `classes`
/// (Lightning's `activation_checkpointing_policy`). A class that names no
/// module, or a match holding a TorchScript or exported module (whose
/// copies for the second forward would be deep) or inside an exported
/// program (which runs as a whole), is refused before anything is marked.
pub(crate) fn mark_checkpointed(model: &mut Module, classes: &[String]) -> Result<()> {
    if classes.is_empty() {
        return Ok(());
    }
    let mut found = vec![0usize; classes.len()];
    let mut refused = None;
    survey(model, "", classes, &mut found, &mut refused);
    if let Some(path) = refused {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!(
                "activation_checkpointing_policy: the module at {path:?} runs inside or holds a TorchScript or \
                 exported program, which fulmen cannot run again in backward"
            ),
        ));
    }
    if let Some(i) = found.iter().position(|n| *n == 0) {
        return Err(Error::invalid(format!(
            "activation_checkpointing_policy: no module below the root is a {:?}",
            classes[i]
        )));
    }
    for (_, child) in model.child_modules_mut() {
        mark_below(child, classes);
    }
    Ok(())
}

/// Counts the matches of each class below `m`, modules inside exported
/// programs included, and notes the first match that holds a TorchScript
/// or exported module or is inside an exported program.
fn survey(m: &Module, path: &str, classes: &[String], found: &mut [usize], refused: &mut Option<String>) {
    if let Some(tree) = m.inner_modules() {
        for inner in tree.pre_order() {
            if let Some(i) = classes.iter().position(|c| tree.is_a(&inner, c)) {
                found[i] += 1;
                refused.get_or_insert_with(|| join(path, &inner));
            }
        }
    }
    for (name, child) in m.child_modules() {
        let child_path = join(path, name);
        if let Some(i) = classes.iter().position(|c| c == child.type_name()) {
            found[i] += 1;
            if refused.is_none() && child.holds_script() {
                *refused = Some(child_path.clone());
            }
        }
        survey(child, &child_path, classes, found, refused);
    }
}

fn mark_below(m: &mut Module, classes: &[String]) {
    m.checkpointed_by_strategy = classes.iter().any(|c| c == m.type_name());
    for (_, child) in m.child_modules_mut() {
        mark_below(child, classes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Activation;

    #[test]
    fn a_checkpointing_policy_marks_below_the_root_or_is_refused() {
        let _rng = crate::nn::init::test_rng_lock();
        let mut m = Module::sequential();
        m.push(Module::linear(3, 4, true).unwrap()).unwrap();
        let mut block = Module::sequential();
        block.push(Module::linear(4, 4, true).unwrap()).unwrap();
        block.push(Module::activation(Activation::Tanh)).unwrap();
        m.push(block).unwrap();
        mark_checkpointed(&mut m, &["Sequential".to_owned()]).unwrap();
        assert!(!m.is_checkpointed(), "the root is never checkpointed");
        assert!(m.child("1").unwrap().is_checkpointed());
        assert!(!m.child("0").unwrap().is_checkpointed());
        // The host's own checkpoint outlives the strategy's.
        m.set_activation_checkpointing("0", true).unwrap();
        unlink(&mut m);
        assert!(!m.child("1").unwrap().is_checkpointed());
        assert!(m.child("0").unwrap().is_checkpointed());
        m.set_activation_checkpointing("0", false).unwrap();
        let e = mark_checkpointed(&mut m, &["Linear".to_owned(), "Conv2d".to_owned()]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(e.message.contains("Conv2d"), "{e}");
        assert!(!m.child("0").unwrap().is_checkpointed(), "a refused policy marks nothing");
    }

    fn exported_blocks() -> Module {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exported_blocks.pt2");
        Module::load_exported(&path, tch::Device::Cpu).unwrap()
    }

    fn planned_paths(m: &Module, opts: &FsdpOptions) -> Vec<(String, usize)> {
        plan(m, opts).0.into_iter().map(|u| (u.path, u.params.len())).collect()
    }

    #[test]
    fn units_are_planned_inside_an_exported_program() {
        let mut m = exported_blocks();
        let by_class = FsdpOptions { wrap_classes: vec!["Block".to_owned()], ..Default::default() };
        let blocks = |root: usize| {
            let mut v: Vec<(String, usize)> = (0..3).map(|k| (format!("blocks.{k}"), 4)).collect();
            v.push((String::new(), root));
            v
        };
        // Each Block's LayerNorm and Linear; the root keeps inp and head.
        assert_eq!(planned_paths(&m, &by_class), blocks(4));
        let qualified =
            FsdpOptions { wrap_classes: vec!["make_exported_fixture.Block".to_owned()], ..by_class.clone() };
        assert_eq!(planned_paths(&m, &qualified), blocks(4), "the qualified class name");
        let by_size = FsdpOptions { min_num_params: Some(80), ..Default::default() };
        assert_eq!(planned_paths(&m, &by_size), blocks(4));
        // Inside a Sequential, the units' paths go on from the program's.
        let mut seq = Module::sequential();
        seq.push(exported_blocks()).unwrap();
        let paths: Vec<String> = planned_paths(&seq, &by_class).into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["0.blocks.0", "0.blocks.1", "0.blocks.2", ""]);
        let e = mark_checkpointed(&mut m, &["Block".to_owned()]).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
        assert!(e.message.contains("\"blocks.0\""), "{e}");
    }
}
