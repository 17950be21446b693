//! A running callback lent to other threads of the host. Inside a
//! callback, `fulmen_callback_context_current` names it; a host thread
//! that calls `fulmen_callback_attach` with that context works inside the
//! callback until `fulmen_callback_detach`: the handles it makes join the
//! callback's scope (released when the callback returns), its calls count
//! as the callback's own for the re-entrancy rules, and it runs with the
//! callback thread's libtorch state (grad mode, autocast). The callback's
//! end waits for the calls attached threads are making, then refuses their
//! new calls until they detach.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, guard_while_ended};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::tensor::handle::{current_callback, scope_depth, Scoped};
use crate::tensor::runtime::{PreviousThreadState, ThreadState};
use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A running callback, as a host thread names it to attach to it. Made by
/// `fulmen_callback_context_current` inside the callback; the host owns it
/// and frees it with `fulmen_callback_context_free`, from any thread,
/// before or after the callback returns (it is not released with the
/// callback's tensors). Once the callback has returned it stays a valid
/// handle that attaches no more.
pub struct fulmen_callback_context {
    pub(crate) inner: Arc<CallbackShared>,
}

impl Handle for fulmen_callback_context {
    const C_NAME: &'static str = "fulmen_callback_context";
}

/// What a running callback shares with the threads attached to it.
pub(crate) struct CallbackShared {
    state: Mutex<SharedState>,
    /// Signalled when the last running call of an attached thread returns.
    idle: Condvar,
    /// The callback thread's token and those of the threads it works for.
    lineage: Vec<usize>,
    /// The models the callback's thread holds locked.
    models: Vec<usize>,
    /// The collectives slots the callback's thread runs inside.
    slots: usize,
    /// The callback thread's libtorch state when the context was made.
    torch: ThreadState,
}

/// The changing part of a [`CallbackShared`].
struct SharedState {
    /// The callback has returned: no attaching, no calls.
    ended: bool,
    /// Fulmen calls running on attached threads.
    busy: usize,
    /// Handles attached threads made, released with the callback's scope.
    made: Vec<Scoped>,
}

impl CallbackShared {
    /// Describes the callback running on the calling thread (called on
    /// its thread, inside it).
    pub(crate) fn here() -> Result<CallbackShared> {
        Ok(CallbackShared {
            state: Mutex::new(SharedState { ended: false, busy: 0, made: Vec::new() }),
            idle: Condvar::new(),
            lineage: crate::thread_token::lineage(),
            models: crate::ffi::nn::model::locked_models(),
            slots: crate::ffi::distributed::collectives::slots_here(),
            torch: ThreadState::capture()?,
        })
    }

    fn lock(&self) -> MutexGuard<'_, SharedState> {
        // Nothing here is left half-changed by a panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a handle an attached thread made. After the end (a call
    /// that did not pass the check of [`enter_call`]) it is not recorded:
    /// the host owns it, as one made on any thread outside callbacks.
    fn record(&self, made: Scoped) {
        let mut st = self.lock();
        if !st.ended {
            st.made.push(made);
        }
    }

    /// Drops `p` from the handles attached threads made (kept by the host).
    pub(crate) fn forget(&self, p: usize) {
        self.lock().made.retain(|(q, _, _)| *q != p);
    }

    /// Ends the callback (when its scope closes): waits for the fulmen
    /// calls attached threads are making, refuses new ones and new
    /// attachments, and returns the handles they made, to be released.
    pub(crate) fn end(&self) -> Vec<Scoped> {
        let mut st = self.lock();
        while st.busy > 0 {
            st = self.idle.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.ended = true;
        std::mem::take(&mut st.made)
    }
}

/// This thread's attachment to a callback of another thread.
struct Attachment {
    shared: Arc<CallbackShared>,
    /// The thread's own libtorch state, put back at detach (only freed if
    /// the thread exits attached).
    own_torch: Option<PreviousThreadState>,
}

thread_local! {
    static ATTACHED: RefCell<Option<Attachment>> = const { RefCell::new(None) };
}

/// The attachment's callback, if this thread is attached (and its state
/// is readable: not while the thread exits).
fn attached() -> Option<Arc<CallbackShared>> {
    ATTACHED.try_with(|a| a.try_borrow().ok().and_then(|a| a.as_ref().map(|a| a.shared.clone()))).ok().flatten()
}

/// A fulmen call running on an attached thread: the callback's end waits
/// for it.
pub(crate) struct BusyCall(Arc<CallbackShared>);

impl Drop for BusyCall {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.busy -= 1;
        if st.busy == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// Checks a fulmen call at its start: on a thread attached to a callback
/// that has returned it is refused; on one attached to a running callback
/// it is counted until the returned value drops. `None` on other threads.
pub(crate) fn enter_call() -> Result<Option<BusyCall>> {
    let Some(shared) = attached() else { return Ok(None) };
    {
        let mut st = shared.lock();
        if st.ended {
            return Err(Error::state(
                "this thread is attached to a callback that has returned; call fulmen_callback_detach \
                 (fulmen calls from it are refused until then)",
            ));
        }
        st.busy += 1;
    }
    Ok(Some(BusyCall(shared)))
}

/// Records a handle made on this thread outside its own scopes in the
/// callback it is attached to, if any.
pub(crate) fn record_attached(made: Scoped) {
    if let Some(shared) = attached() {
        shared.record(made);
    }
}

/// Drops `p` from the callback this thread is attached to, if any.
pub(crate) fn forget_attached(p: usize) {
    if let Some(shared) = attached() {
        shared.forget(p);
    }
}

/// The callback running on this thread, else the one it is attached to.
fn current() -> Result<Arc<CallbackShared>> {
    if let Some(shared) = current_callback()? {
        return Ok(shared);
    }
    attached().ok_or_else(|| {
        Error::state(
            "no fulmen callback is running on this thread: fulmen_callback_context_current is valid only \
             inside a callback, or on a thread attached to one",
        )
    })
}

/// Attaches the calling thread to `shared`'s callback.
fn attach(shared: Arc<CallbackShared>) -> Result<()> {
    if attached().is_some() {
        return Err(Error::state("this thread is attached to a callback already; call fulmen_callback_detach first"));
    }
    if scope_depth() > 0 {
        return Err(Error::state(
            "a fulmen callback is running on this thread: a callback's own thread cannot attach (it works inside \
             the callback already); attach another thread",
        ));
    }
    if shared.lock().ended {
        return Err(Error::state(
            "the callback of this fulmen_callback_context has returned: a thread can attach only while it runs",
        ));
    }
    let own_torch = shared.torch.apply()?;
    crate::thread_token::set_works_for(shared.lineage.clone());
    crate::ffi::nn::model::set_caller_locks(shared.models.clone());
    crate::ffi::distributed::collectives::set_caller_slots(shared.slots);
    ATTACHED.with(|a| *a.borrow_mut() = Some(Attachment { shared, own_torch: Some(own_torch) }));
    Ok(())
}

/// Detaches the calling thread from its callback.
fn detach() -> Result<()> {
    if attached().is_none() {
        return Err(Error::state("this thread is not attached to a callback (fulmen_callback_attach)"));
    }
    if scope_depth() > 0 {
        return Err(Error::state(
            "a fulmen callback is running on this thread: detach after it returns, not from inside it",
        ));
    }
    let Some(mut at) = ATTACHED.with(|a| a.borrow_mut().take()) else {
        return Err(Error::state("this thread is not attached to a callback (fulmen_callback_attach)"));
    };
    crate::thread_token::set_works_for(Vec::new());
    crate::ffi::nn::model::set_caller_locks(Vec::new());
    crate::ffi::distributed::collectives::set_caller_slots(0);
    match at.own_torch.take() {
        Some(own) => own.restore(),
        None => Ok(()),
    }
}

/// Writes to `*out` a new handle naming the callback running on the
/// calling thread (the innermost one), for another thread to attach to it
/// with `fulmen_callback_attach`. On a thread attached to a callback (and
/// running none of its own) it names that callback. The handle captures
/// the thread's libtorch state now (grad mode, autocast), which attached
/// threads get. The caller owns it and frees it with
/// `fulmen_callback_context_free`, from any thread, before or after the
/// callback returns; it is not released with the callback's tensors.
///
/// Errors: FULMEN_CODE_INVALID_STATE (no callback is running on this
/// thread), FULMEN_CODE_TORCH (libtorch's thread state cannot be read).
/// Thread rules: call it on the callback's own thread, inside the callback
/// (or on a thread attached to it).
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_context_current(out: *mut *mut fulmen_callback_context) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let inner = current()?;
        out.write(handle::into_raw(fulmen_callback_context { inner }));
        Ok(())
    })
}

/// Frees a callback context. NULL, or a context already freed, is a no-op.
/// A thread attached through it stays attached (detach it with
/// `fulmen_callback_detach`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_context_free(ctx: *mut fulmen_callback_context) {
    handle::free(ctx);
}

/// Attaches the calling thread (a thread of the host, running no fulmen
/// callback) to the running callback `ctx` names, until
/// `fulmen_callback_detach`: tensors and values it makes meanwhile join the
/// callback's scope (released when the callback returns, unless kept with
/// `fulmen_tensor_keep` / `fulmen_value_keep` or returned, as on the
/// callback's own thread); its fulmen calls count as calls from inside the
/// callback (a call into the object running the callback, such as the
/// data source of a `get_batch` or the model of a host forward, is refused
/// with FULMEN_CODE_INVALID_STATE instead of deadlocking; the callback's
/// `fulmen_host_call` is usable); and it runs with the libtorch state the
/// callback's thread had when `ctx` was made (no_grad in a validation step,
/// autocast under mixed precision), its own being restored at detach.
/// Devices are named by index in fulmen, so no current CUDA device is
/// lent. When the callback returns, fulmen waits for the fulmen calls
/// attached threads are making, releases what they made, and refuses their
/// later calls with FULMEN_CODE_INVALID_STATE until they detach.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the callback has returned; this
/// thread is attached already; a fulmen callback runs on this thread),
/// FULMEN_CODE_TORCH (libtorch's thread state cannot be set).
/// Thread rules: the callback's thread and the threads attached to it may
/// make fulmen calls at the same time; each handle's own rules still hold
/// (e.g. a tensor changed in place by one is kept off the others), and a
/// `fulmen_host_call` is used by one of them at a time. The callback must
/// not return while an attached thread is inside a fulmen call that waits
/// for the callback (fulmen waits for that call).
#[no_mangle]
pub unsafe extern "C" fn fulmen_callback_attach(ctx: *const fulmen_callback_context) -> *mut fulmen_error {
    guard!(|| {
        let shared = handle::borrow(ctx, "ctx")?.inner.clone();
        attach(shared)
    })
}

/// Detaches the calling thread from the callback it is attached to
/// (`fulmen_callback_attach`): it gets its own libtorch state back, and the
/// handles it makes from now on are the host's, as on any thread outside
/// callbacks. Allowed after the callback has returned.
///
/// Errors: FULMEN_CODE_INVALID_STATE (this thread is not attached; a fulmen
/// callback is running on it), FULMEN_CODE_TORCH (libtorch's thread state
/// cannot be restored; the thread is detached all the same).
/// Thread rules: call it on the attached thread.
#[no_mangle]
pub extern "C" fn fulmen_callback_detach() -> *mut fulmen_error {
    guard_while_ended!(detach)
}

#[cfg(test)]
#[path = "callback_context_tests.rs"]
mod tests;
