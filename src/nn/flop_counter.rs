//! FLOP counting, as `torch.utils.flop_counter.FlopCounterMode` counts
//! (Lightning's `measure_flops`): the matrix multiplications, convolutions
//! and attention kernels a piece of code runs on the calling thread, and in
//! the backward passes it starts, each counted with torch's formula from
//! its shapes (`csrc/flops.cpp`). Tensors on the meta device are counted
//! without computing, where libtorch has meta kernels for their operators.
//! Counts are kept by module too, as the mode's ModuleTracker keeps them:
//! fulmen's module tree opens a [`ModuleScope`] per module it runs while a
//! measurement is under way on the thread. Hosts add formulas of their
//! own (`flop_formulas`).
use super::module::Module;
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::shim::{self, call};
use libc::{c_char, c_void};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use tch::Tensor;

/// What a measurement counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlopCounts {
    /// Every operator's FLOPs added up (`get_total_flops()`).
    pub total: u64,
    /// FLOPs by operator name ("aten::mm"), the operators that counted
    /// any (`get_flop_counts()["Global"]`).
    pub by_operator: BTreeMap<String, u64>,
    /// FLOPs by module, then operator, as `get_flop_counts()` keeps them
    /// without "Global": an operator counts for every module whose forward
    /// was open around it (or, in backward, around the forward operator it
    /// differentiates), named from the root's class by state_dict paths
    /// ("MLP", "MLP.net", "MLP.net.0"). Modules that counted nothing are
    /// left out.
    pub by_module: BTreeMap<String, BTreeMap<String, u64>>,
    /// The operators of each module ("Global" too) in the order they
    /// were first counted there, the order torch's dicts keep.
    pub first_counted: BTreeMap<String, Vec<String>>,
}

impl FlopCounts {
    /// The counts of `module` ("Global" for the whole measurement), if it
    /// counted any.
    fn of_module(&self, module: &str) -> Option<&BTreeMap<String, u64>> {
        match module {
            "Global" => Some(&self.by_operator),
            m => self.by_module.get(m),
        }
    }

    /// The operators of `module` ("Global" for the whole measurement) and
    /// their FLOPs, in the order they were first counted there.
    pub fn operators(&self, module: &str) -> Vec<(&str, u64)> {
        let (Some(ops), Some(order)) = (self.of_module(module), self.first_counted.get(module)) else {
            return Vec::new();
        };
        order.iter().filter_map(|op| ops.get(op).map(|n| (op.as_str(), *n))).collect()
    }

    /// The FLOPs counted for `module` ("Global" for the whole measurement,
    /// as torch names it); 0 for a module that counted none.
    pub fn module_total(&self, module: &str) -> Result<u64> {
        self.of_module(module)
            .map_or(Some(0), |ops| ops.values().try_fold(0u64, |a, &b| a.checked_add(b)))
            .ok_or_else(|| Error::new(ErrorCode::OutOfRange, "the FLOP count exceeds 2^64 - 1"))
    }
}

thread_local! {
    /// The module scopes open on this thread while it measures; `None`
    /// while it does not.
    static SCOPES: Cell<Option<usize>> = const { Cell::new(None) };
}

/// How many module scopes a measuring thread has open (`None`: it does not
/// measure), lent with the thread's state to threads attached to a callback.
pub(crate) type ScopeDepth = Option<usize>;

/// The calling thread's [`ScopeDepth`].
pub(crate) fn scope_depth() -> ScopeDepth {
    SCOPES.with(Cell::get)
}

/// Sets the calling thread's [`ScopeDepth`] (the shim's scopes are lent
/// with libtorch's state); returns the one it had.
pub(crate) fn set_scope_depth(depth: ScopeDepth) -> ScopeDepth {
    SCOPES.with(|s| s.replace(depth))
}

/// A module's forward open for FLOP counting by module, closed on drop.
/// Opens nothing unless the thread is measuring.
#[must_use]
pub(crate) struct ModuleScope {
    open: bool,
}

impl ModuleScope {
    /// The scope of a root module: its class (`class()`), when no scope is
    /// open yet. `None` opens nothing (a TorchScript module names itself).
    pub(crate) fn root(class: impl FnOnce() -> Option<String>) -> ModuleScope {
        match SCOPES.with(Cell::get) {
            Some(0) => class().map_or(ModuleScope { open: false }, |c| Self::push(&c)),
            _ => ModuleScope { open: false },
        }
    }

    /// The scope of the child at `path` (dotted) of the innermost open
    /// module.
    pub(crate) fn child(path: &str) -> ModuleScope {
        match SCOPES.with(Cell::get) {
            Some(_) => Self::push(path),
            None => ModuleScope { open: false },
        }
    }

    fn push(name: &str) -> ModuleScope {
        let Ok(name) = CString::new(name) else { return ModuleScope { open: false } };
        // SAFETY: a C string alive for the call; the shim writes at most
        // `len` bytes of message.
        let pushed = call("opening a module's FLOP scope", |err, len| unsafe {
            shim::fulmen_cxx_flops_scope_push(name.as_ptr(), err, len)
        });
        if pushed.is_err() {
            return ModuleScope { open: false };
        }
        SCOPES.with(|s| s.set(s.get().map(|n| n + 1)));
        ModuleScope { open: true }
    }
}

impl Drop for ModuleScope {
    fn drop(&mut self) {
        if self.open {
            // SAFETY: closes the scope `push` opened on this thread.
            unsafe { shim::fulmen_cxx_flops_scope_pop() };
            SCOPES.with(|s| s.set(s.get().map(|n| n.saturating_sub(1))));
        }
    }
}

/// Ends a measurement on drop, so a failing or panicking `f` leaves none
/// running.
struct Measuring {
    ended: bool,
}

impl Measuring {
    fn begin() -> Result<Measuring> {
        // SAFETY: the shim writes at most `len` bytes of message.
        call("measuring FLOPs", |err, len| unsafe { shim::fulmen_cxx_flops_begin(err, len) })?;
        SCOPES.with(|s| s.set(Some(0)));
        Ok(Measuring { ended: false })
    }

    /// Ends the measurement: its counts, and whether one left 64 bits.
    fn finish(&mut self) -> Result<(FlopCounts, bool)> {
        self.ended = true;
        SCOPES.with(|s| s.set(None));
        let mut counts = FlopCounts::default();
        let (mut overflow, mut formula_code) = (0, 0);
        let mut formula_err = [0 as c_char; 1024];
        // SAFETY: `on_count` gets `counts` back as its context, on this
        // thread, before the call returns; the shim writes at most the
        // buffers' lengths of message.
        call("measuring FLOPs", |err, len| unsafe {
            shim::fulmen_cxx_flops_end(
                on_count,
                std::ptr::from_mut(&mut counts).cast(),
                &mut overflow,
                &mut formula_code,
                formula_err.as_mut_ptr(),
                formula_err.len(),
                err,
                len,
            )
        })?;
        if formula_code != 0 {
            // SAFETY: the shim NUL-terminates what it writes into the zeroed buffer.
            let message = unsafe { CStr::from_ptr(formula_err.as_ptr()) }.to_string_lossy().into_owned();
            return Err(Error::new(ErrorCode::from_i32(formula_code).unwrap_or(ErrorCode::Callback), message));
        }
        Ok((counts, overflow != 0))
    }

    fn end(mut self) -> Result<FlopCounts> {
        let too_many = || Error::new(ErrorCode::OutOfRange, "the FLOP count exceeds 2^64 - 1");
        let (mut counts, overflow) = self.finish()?;
        if overflow {
            return Err(too_many());
        }
        counts.total = counts.module_total("Global")?;
        counts.by_operator.retain(|_, n| *n > 0);
        for ops in counts.by_module.values_mut() {
            ops.retain(|_, n| *n > 0);
        }
        counts.by_module.retain(|_, ops| !ops.is_empty());
        Ok(counts)
    }
}

impl Drop for Measuring {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.finish();
        }
    }
}

/// Receives one operator's count from the shim: the global one when
/// `module` is NULL.
unsafe extern "C" fn on_count(ctx: *mut c_void, module: *const c_char, name: *const c_char, flops: u64) {
    // SAFETY: `ctx` is the `FlopCounts` `end` passed; `module` (unless
    // NULL) and `name` C strings valid for this call.
    let counts = unsafe { &mut *ctx.cast::<FlopCounts>() };
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    let module = match module.is_null() {
        true => "Global".to_owned(),
        false => unsafe { CStr::from_ptr(module) }.to_string_lossy().into_owned(),
    };
    let ops = match module.as_str() {
        "Global" => &mut counts.by_operator,
        _ => counts.by_module.entry(module.clone()).or_default(),
    };
    if ops.insert(name.clone(), flops).is_none() && flops > 0 {
        counts.first_counted.entry(module).or_default().push(name);
    }
}

/// Runs `f` and counts the FLOPs of what it runs on this thread (and of the
/// backward passes it starts), as `FlopCounterMode` does around it.
/// Threads measure apart; a measurement inside another on the same thread
/// is `InvalidState` (torch's mode is not re-entrant either). A count past
/// 2^64 - 1 is `OutOfRange`.
pub fn measure_flops<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, FlopCounts)> {
    let measuring = Measuring::begin()?;
    let out = f()?;
    Ok((out, measuring.end()?))
}

/// Lightning's `measure_flops(model, lambda: model(x), lambda y: y.sum())`:
/// the FLOPs of one forward of `model` on `input`, and with `backward` of
/// the backward of its output's sum (to every leaf that needs a gradient:
/// the trainable parameters, and the input when it needs one). The
/// gradients of the model and the input are put back as they were (the
/// backward writes its own, then dropped), and its buffers (BatchNorm statistics) and
/// the CPU's random state are put back, so a measurement changes nothing
/// a later step computes. A CUDA generator advances as after a forward with
/// dropout.
pub fn measure_model_flops(model: &Module, input: &Tensor, backward: bool) -> Result<FlopCounts> {
    let state = Untouched::take(model, input)?;
    let (_, counts) = measure_flops(|| {
        let y = model.forward(input)?;
        if backward {
            // `.backward()`, as Lightning's loss_fn(model(x)).backward():
            // every leaf that needs a gradient gets one, those inside
            // checkpointed modules too (their node's inner backward writes
            // them); `Untouched` hands the gradients back as they were.
            let loss = y.f_sum(y.kind())?;
            if loss.requires_grad() {
                loss.f_backward()?;
            }
        }
        Ok(())
    })?;
    state.restore()?;
    Ok(counts)
}

/// A model's buffers and gradients (and the input's gradient) and the
/// CPU's random state, put back by `restore` or, on an early return or a
/// panic, when dropped. The gradients are set aside (none while measuring),
/// so a backward writes new ones and leaves them as they were.
struct Untouched {
    buffers: Vec<(Tensor, Tensor)>,
    grads: Vec<(Tensor, Option<Tensor>)>,
    rng: Tensor,
    restored: bool,
}

impl Untouched {
    fn take(model: &Module, input: &Tensor) -> Result<Untouched> {
        let buffers = model.named_buffers().into_iter().map(|(_, b)| (b.shallow_clone(), b.detach().copy())).collect();
        let rng = crate::tensor::runtime::cpu_rng_state().ctx("the random state")?;
        let mut untouched = Untouched { buffers, grads: Vec::new(), rng, restored: false };
        let leaves = model.parameters().into_iter().chain(input.requires_grad().then(|| input.shallow_clone()));
        for leaf in leaves {
            let g = leaf.grad();
            let saved = g.defined().then_some(g);
            crate::tensor::grad::set_grad(&leaf, None)?;
            untouched.grads.push((leaf, saved));
        }
        Ok(untouched)
    }

    fn put_back(&mut self) -> Result<()> {
        self.restored = true;
        tch::no_grad(|| -> Result<()> {
            for (live, saved) in &self.buffers {
                live.shallow_clone().f_copy_(saved)?;
            }
            Ok(())
        })?;
        for (leaf, saved) in &self.grads {
            crate::tensor::grad::set_grad(leaf, saved.as_ref())?;
        }
        crate::tensor::runtime::set_cpu_rng_state(&self.rng).ctx("restoring the random state")
    }

    fn restore(mut self) -> Result<()> {
        self.put_back()
    }
}

impl Drop for Untouched {
    fn drop(&mut self) {
        if !self.restored {
            let _ = self.put_back();
        }
    }
}
