//! Choosing a model's sharding units (Lightning's `auto_wrap_policy`) and
//! linking every module to the unit that owns the parameters it reads.
use super::settings::FsdpOptions;
use super::unit::{FsdpUnit, UnitHook};
use crate::error::{Error, ErrorCode, Result};
use crate::nn::{param_identity, Module, ParamId, ShardHook, ShardLink, Slot};
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
    let mut units = Vec::new();
    let mut taken = std::collections::HashSet::new();
    let rest = walk(model, "", true, opts, &tied, &mut taken, &mut units);
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

/// Plans the units below `m` (at `path`) and returns its parameters that
/// no unit took.
fn walk(
    m: &Module,
    path: &str,
    is_root: bool,
    opts: &FsdpOptions,
    tied: &dyn Fn(&Tensor) -> bool,
    taken: &mut std::collections::HashSet<ParamId>,
    units: &mut Vec<PlannedUnit>,
) -> Vec<Tensor> {
    let mut own: Vec<Tensor> = Vec::new();
    m.visit_direct(&mut |_, t, slot| {
        if slot == Slot::Param && !tied(t) {
            if let Some(id) = param_identity(t) {
                if taken.insert(id) {
                    own.push(t.shallow_clone());
                }
            }
        }
    });
    for (name, child) in m.child_modules() {
        let child_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        own.extend(walk(child, &child_path, false, opts, tied, taken, units));
    }
    let by_class = opts.wrap_classes.iter().any(|c| c == m.type_name());
    let by_size = opts.min_num_params.is_some_and(|n| own.iter().map(|t| t.numel() as u64).sum::<u64>() >= n);
    if !is_root && !own.is_empty() && (by_class || by_size) {
        units.push(PlannedUnit { path: path.to_owned(), params: own });
        return Vec::new();
    }
    own
}

/// The indices into `units` in the order of their modules in a pre-order
/// walk of `model` (the root first, then each child before its own
/// children): the order FSDP2 keeps its states in, and so the order its
/// final callback reduces the units left gathered in.
pub(crate) fn pre_order(model: &Module, units: &[Arc<FsdpUnit>]) -> Vec<usize> {
    fn walk(m: &Module, path: &str, out: &mut Vec<String>) {
        out.push(path.to_owned());
        for (name, child) in m.child_modules() {
            walk(child, &if path.is_empty() { name.clone() } else { format!("{path}.{name}") }, out);
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
/// others the root's.
pub(crate) fn link(model: &mut Module, units: &[Arc<FsdpUnit>]) {
    let by_path: HashMap<&str, Arc<dyn ShardHook>> =
        units.iter().map(|u| (u.path.as_str(), Arc::new(UnitHook(Arc::clone(u))) as Arc<dyn ShardHook>)).collect();
    let root = by_path.get("").cloned();
    link_below(model, "", root, &by_path);
}

fn link_below(
    m: &mut Module,
    path: &str,
    inherited: Option<Arc<dyn ShardHook>>,
    by_path: &HashMap<&str, Arc<dyn ShardHook>>,
) {
    let unit_module = by_path.contains_key(path);
    let (hook, owns) = match by_path.get(path) {
        Some(u) => (Some(Arc::clone(u)), !path.is_empty()),
        None => (inherited, false),
    };
    m.set_shard_link(hook.clone().map(|hook| ShardLink { hook, owns, unit_module }));
    for (name, child) in m.child_modules_mut() {
        let child_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        link_below(child, &child_path, hook.clone(), by_path);
    }
}

/// Removes every module's link and checkpoint.
pub(crate) fn unlink(model: &mut Module) {
    model.set_shard_link(None);
    model.checkpointed_by_strategy = false;
    for (_, child) in model.child_modules_mut() {
        unlink(child);
    }
}

/// Checkpoints every module below the root whose class is in `classes`
/// (Lightning's `activation_checkpointing_policy`). A class that names no
/// module, or a match holding a TorchScript or exported module (whose
/// copies for the second forward would be deep), is refused before
/// anything is marked.
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
                "activation_checkpointing_policy: the module at {path:?} holds a TorchScript or exported module,                  which fulmen cannot run again in backward"
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

/// Counts the matches of each class below `m` and notes the first match
/// that holds a TorchScript or exported module.
fn survey(m: &Module, path: &str, classes: &[String], found: &mut [usize], refused: &mut Option<String>) {
    for (name, child) in m.child_modules() {
        let child_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
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
}
