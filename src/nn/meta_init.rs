//! Models built on the meta device and given their values later:
//! PyTorch's `with torch.device("meta")` followed by `to_empty` and
//! `reset_parameters`, Lightning's `init_module(empty_init=True)`.
//!
//! Inside a scope ([`MetaInitScope`], `fulmen_meta_init_begin`) fulmen's
//! layers make their parameters and buffers on the meta device, which holds
//! no data. Each change that gives such a tensor its values (the layer's
//! own initialisation, `fulmen_init_*`, the in-place tensor operations) is
//! recorded with the CPU generator's state it started from, and run on a
//! scratch CPU tensor as it is recorded, so the generator advances exactly
//! as an eager build would advance it. [`materialize`] replays a tensor's
//! changes from those states: the values are those of the eager build, bit
//! for bit, whatever the order tensors are materialized in (FSDP makes one
//! unit's at a time, right before sharding it).
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::{impl_identity, sharing, Device, DeviceType};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use tch::{Kind, Tensor};

/// Most scopes one thread may hold open at once.
const MAX_DEPTH: u32 = 1024;

thread_local! {
    /// Open scopes on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Opens a scope on this thread: fulmen's layers made until the matching
/// [`end`] live on the meta device. Scopes nest.
pub fn begin() -> Result<()> {
    DEPTH.with(|d| {
        if d.get() >= MAX_DEPTH {
            return Err(Error::state(format!("more than {MAX_DEPTH} meta-init scopes open on this thread")));
        }
        d.set(d.get() + 1);
        Ok(())
    })
}

/// Closes the innermost scope of this thread.
pub fn end() -> Result<()> {
    DEPTH.with(|d| {
        if d.get() == 0 {
            return Err(Error::state("no meta-init scope is open on this thread (fulmen_meta_init_begin)"));
        }
        d.set(d.get() - 1);
        Ok(())
    })
}

/// Whether a scope is open on this thread.
pub fn active() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// A scope for Rust code, closed when dropped.
pub struct MetaInitScope(());

impl MetaInitScope {
    /// Opens a scope on this thread.
    pub fn new() -> Result<MetaInitScope> {
        begin()?;
        Ok(MetaInitScope(()))
    }
}

impl Drop for MetaInitScope {
    fn drop(&mut self) {
        let _ = end();
    }
}

/// A change of a tensor's values, run on CPU tensors.
type Change = Box<dyn Fn(&Tensor) -> Result<()> + Send>;

/// One recorded change: the generator's state before it (for changes that
/// draw), the dtype the tensor had, and the change.
struct Step {
    rng: Option<Tensor>,
    kind: Kind,
    change: Change,
}

/// A meta tensor's recorded changes, the tensor itself held so its
/// storage's address names no other tensor while the entry lives. Detached
/// copies of the tensor (a host module's registered parameter) share the
/// storage, and so the entry.
struct Entry {
    tensor: Tensor,
    steps: Vec<Step>,
}

/// The recorded tensors by StorageImpl, and the size at the last sweep.
struct Registry {
    entries: HashMap<usize, Entry>,
    swept_at: usize,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `t` lives on the meta device.
pub(crate) fn is_meta(t: &Tensor) -> bool {
    t.defined() && matches!(Device::of(t), Ok(Device::Other(DeviceType::Meta, _)))
}

/// Refuses to read the values of `t` when it lives on the meta device,
/// where it has none (saving a model built there before materializing it).
pub(crate) fn refuse_meta(t: &Tensor, what: &str) -> Result<()> {
    if is_meta(t) {
        return Err(Error::state(format!(
            "{what}: a tensor on the meta device holds no values: materialize the model first \
             (fulmen_model_materialize), or let the trainer do it when it places the model"
        )));
    }
    Ok(())
}

/// Drops the entries whose storage only the registry's handle still holds.
fn drop_unused(reg: &mut Registry) {
    reg.entries.retain(|_, e| sharing(&e.tensor).map(|s| s.storage_holders > 1 || s.handles > 1).unwrap_or(true));
    reg.swept_at = reg.entries.len();
}

/// [`drop_unused`] once the registry has doubled since the last sweep.
fn sweep(reg: &mut Registry) {
    if reg.entries.len() >= 2 * reg.swept_at.max(32) {
        drop_unused(reg);
    }
}

/// The registry's key of the meta tensor `t`: its storage.
fn key_of(t: &Tensor) -> Result<usize> {
    let s = sharing(t)?;
    Ok(if s.storage != 0 { s.storage } else { impl_identity(t)? })
}

/// The meta tensor `t` changed storage in place (a cast, `set_data`): its
/// recorded changes, filed under `before` (its old [`storage_key`]), follow
/// it.
pub(crate) fn follow(before: usize, t: &Tensor) -> Result<()> {
    let now = key_of(t)?;
    if now != before {
        let mut guard = registry();
        if let Some(reg) = guard.as_mut() {
            if let Some(mut e) = reg.entries.remove(&before) {
                e.tensor = t.shallow_clone();
                reg.entries.insert(now, e);
            }
        }
    }
    Ok(())
}

/// The key [`follow`] takes: `t`'s storage now.
pub(crate) fn storage_key(t: &Tensor) -> Result<usize> {
    key_of(t)
}

/// Runs `change` on `t`, or where `t` is a meta tensor records it:
/// `overwrites` says it sets every element (an initialisation, `fill_`,
/// `copy_`), `draws` that it takes numbers from the CPU generator, which
/// then advances now as if `t` held data. A change that keeps some of the
/// old values needs recorded ones; views cannot be recorded.
pub(crate) fn change(
    t: &Tensor,
    what: &str,
    overwrites: bool,
    draws: bool,
    change: impl Fn(&Tensor) -> Result<()> + Send + 'static,
) -> Result<()> {
    if !is_meta(t) {
        return change(t);
    }
    if sharing(t)?.view {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!(
                "{what}: a view of a meta tensor cannot record a change (its base would not see it): change the \
                 whole parameter"
            ),
        ));
    }
    let key = key_of(t)?;
    let kind = t.f_kind()?;
    let mut guard = registry();
    let reg = guard.get_or_insert_with(|| Registry { entries: HashMap::new(), swept_at: 0 });
    if !overwrites && !reg.entries.contains_key(&key) {
        return Err(Error::state(format!(
            "{what}: this meta tensor has no values to change (it was not made by fulmen's layers or init \
             functions inside a meta-init scope): give it values first (fulmen_init_*, fill_, copy_)"
        )));
    }
    let rng = if draws {
        let state = crate::tensor::runtime::cpu_rng_state()?;
        // The eager build's draws, on a scratch tensor.
        let scratch = Tensor::f_zeros(t.size(), (kind, tch::Device::Cpu))?;
        change(&scratch).map_err(|e| e.context(what))?;
        Some(state)
    } else {
        None
    };
    let step = Step { rng, kind, change: Box::new(change) };
    let entry = reg.entries.entry(key).or_insert_with(|| Entry { tensor: t.shallow_clone(), steps: Vec::new() });
    if overwrites {
        entry.steps.clear();
    }
    entry.steps.push(step);
    sweep(reg);
    Ok(())
}

/// A new leaf tensor of `shape` and `kind` given its values by `init`
/// (which sets every element): on the CPU, or inside a scope on the meta
/// device with `init` recorded.
pub(crate) fn create(
    shape: &[i64],
    kind: Kind,
    requires_grad: bool,
    draws: bool,
    init: impl Fn(&Tensor) -> Result<()> + Send + 'static,
) -> Result<Tensor> {
    if !active() {
        let t = Tensor::f_empty(shape, (kind, tch::Device::Cpu))?;
        tch::no_grad(|| init(&t))?;
        return Ok(t.f_detach()?.f_set_requires_grad(requires_grad)?);
    }
    let meta = Device::Other(DeviceType::Meta, 0);
    let like = crate::tensor::device::to_device(&Tensor::f_empty([0], (kind, tch::Device::Cpu))?, meta, false)?;
    let t = crate::tensor::device::empty_on_device_of(shape, kind, &like)?;
    let t = t.f_detach()?.f_set_requires_grad(requires_grad)?;
    change(&t, "initialising a parameter", true, draws, move |x| tch::no_grad(|| init(x)))?;
    Ok(t)
}

/// The CPU tensor the meta tensor `t` (named `name`) stands for: its
/// recorded changes run again from their generator states (the generator
/// is left as it was), cast to `t`'s dtype now, a leaf requiring a
/// gradient as `t` does.
pub(crate) fn materialize(t: &Tensor, name: &str) -> Result<Tensor> {
    let key = key_of(t)?;
    let guard = registry();
    let steps = guard.as_ref().and_then(|r| r.entries.get(&key)).map(|e| e.steps.as_slice()).unwrap_or_default();
    let Some(first) = steps.first() else {
        return Err(Error::state(format!(
            "{name}: a meta tensor with no recorded values (made on the meta device outside a meta-init scope, or \
             moved there): give it values with fulmen_init_* or an in-place fill or copy, or load weights into it"
        )));
    };
    let saved = crate::tensor::runtime::cpu_rng_state()?;
    let replay = || -> Result<Tensor> {
        // The first step sets every element.
        let mut x = Tensor::f_empty(t.size(), (first.kind, tch::Device::Cpu))?;
        for step in steps {
            if x.f_kind()? != step.kind {
                x = x.f_to_kind(step.kind)?;
            }
            if let Some(state) = &step.rng {
                crate::tensor::runtime::set_cpu_rng_state(state)?;
            }
            tch::no_grad(|| (step.change)(&x))?;
        }
        Ok(x)
    };
    let made = replay();
    drop(guard);
    crate::tensor::runtime::set_cpu_rng_state(&saved)?;
    let x = made.map_err(|e| e.context(name))?;
    let kind = t.f_kind()?;
    let x = if x.f_kind()? == kind { x } else { x.f_to_kind(kind)? };
    Ok(x.f_detach()?.f_set_requires_grad(t.requires_grad())?)
}

/// Forgets the recorded tensors no handle but the record holds any more
/// (after a model's meta tensors were replaced by real ones).
pub(crate) fn forget_unused() {
    if let Some(reg) = registry().as_mut() {
        drop_unused(reg);
    }
}

/// How many meta tensors have recorded values (for tests).
#[cfg(test)]
pub(crate) fn recorded() -> usize {
    registry().as_ref().map_or(0, |r| r.entries.len())
}
