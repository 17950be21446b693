use super::*;
use crate::error::ErrorCode;
use crate::ffi::base::callback::HostLock;
use crate::ffi::base::error::error_from_raw;
use crate::ffi::tensor::handle::{keep, new_scoped};
use crate::ffi::tensor::TensorScope;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A handle type that counts its drops.
struct Probe(Arc<AtomicUsize>);

impl Handle for Probe {
    const C_NAME: &'static str = "probe";
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The code and message of a C result (`None` for success).
fn outcome(e: *mut fulmen_error) -> Option<(ErrorCode, String)> {
    // SAFETY: `e` is NULL or an error a fulmen function returned.
    unsafe { error_from_raw(e) }.map(|e| (e.code, e.message))
}

/// A new context of the callback running here, as an address (to cross
/// threads).
fn context_here() -> usize {
    let mut ctx: *mut fulmen_callback_context = std::ptr::null_mut();
    // SAFETY: `ctx` is valid for a write.
    assert!(outcome(unsafe { fulmen_callback_context_current(&mut ctx) }).is_none());
    ctx as usize
}

fn attach_to(ctx: usize) -> Option<(ErrorCode, String)> {
    // SAFETY: `ctx` is a handle address; fulmen checks it.
    outcome(unsafe { fulmen_callback_attach(ctx as *const fulmen_callback_context) })
}

fn free_context(ctx: usize) {
    // SAFETY: as above.
    unsafe { fulmen_callback_context_free(ctx as *mut fulmen_callback_context) };
}

#[test]
fn handles_made_on_an_attached_thread_are_released_with_the_callback() {
    let drops = Arc::new(AtomicUsize::new(0));
    let scope = TensorScope::enter();
    let ctx = context_here();
    let kept = std::thread::scope(|s| {
        s.spawn(|| {
            assert!(attach_to(ctx).is_none());
            for _ in 0..3 {
                new_scoped(Probe(Arc::clone(&drops)));
            }
            let kept = new_scoped(Probe(Arc::clone(&drops)));
            keep(kept);
            assert!(outcome(fulmen_callback_detach()).is_none());
            // Detached: the thread's handles are the host's again.
            let own = new_scoped(Probe(Arc::clone(&drops)));
            // SAFETY: made just above.
            drop(unsafe { handle::take(own) });
            kept as usize
        })
        .join()
        .unwrap()
    });
    assert_eq!(drops.load(Ordering::SeqCst), 1, "only the thread's own handle is gone before the callback ends");
    drop(scope);
    assert_eq!(drops.load(Ordering::SeqCst), 4, "the 3 scoped handles go with the callback");
    // SAFETY: the kept handle is live and the host's.
    drop(unsafe { handle::take(kept as *mut Probe) });
    assert_eq!(drops.load(Ordering::SeqCst), 5);
    // The context stays a valid handle that attaches no more.
    let (code, message) = std::thread::scope(|s| s.spawn(|| attach_to(ctx)).join().unwrap()).unwrap();
    assert_eq!(code, ErrorCode::InvalidState);
    assert!(message.contains("has returned"), "{message}");
    free_context(ctx);
}

#[test]
fn calls_of_an_attached_thread_are_refused_once_the_callback_returns() {
    let scope = TensorScope::enter();
    let ctx = context_here();
    let (attached_tx, attached_rx) = std::sync::mpsc::channel();
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let helper = s.spawn(move || {
            assert!(attach_to(ctx).is_none());
            attached_tx.send(()).unwrap();
            ended_rx.recv().unwrap();
            let mut again: *mut fulmen_callback_context = std::ptr::null_mut();
            // SAFETY: `again` is valid for a write.
            let refused = outcome(unsafe { fulmen_callback_context_current(&mut again) });
            let detached = outcome(fulmen_callback_detach());
            (refused, detached)
        });
        attached_rx.recv().unwrap();
        drop(scope);
        ended_tx.send(()).unwrap();
        let (refused, detached) = helper.join().unwrap();
        let (code, message) = refused.unwrap();
        assert_eq!(code, ErrorCode::InvalidState);
        assert!(message.contains("fulmen_callback_detach"), "{message}");
        assert!(detached.is_none(), "detaching works after the callback returned");
    });
    free_context(ctx);
}

#[test]
fn only_other_threads_attach_and_only_attached_ones_detach() {
    let mut ctx: *mut fulmen_callback_context = std::ptr::null_mut();
    // SAFETY: `ctx` is valid for a write.
    let (code, _) = outcome(unsafe { fulmen_callback_context_current(&mut ctx) }).unwrap();
    assert_eq!(code, ErrorCode::InvalidState, "no callback runs here");
    let (code, _) = outcome(fulmen_callback_detach()).unwrap();
    assert_eq!(code, ErrorCode::InvalidState, "not attached");
    let scope = TensorScope::enter();
    let ctx = context_here();
    let (code, message) = attach_to(ctx).unwrap();
    assert_eq!(code, ErrorCode::InvalidState, "the callback's own thread");
    assert!(message.contains("callback is running on this thread"), "{message}");
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(attach_to(ctx).is_none());
            assert_eq!(attach_to(ctx).unwrap().0, ErrorCode::InvalidState, "attached already");
            // On an attached thread the context names the same callback.
            let again = context_here();
            free_context(again);
            assert!(outcome(fulmen_callback_detach()).is_none());
        });
    });
    drop(scope);
    free_context(ctx);
}

#[test]
fn an_attached_thread_counts_as_the_callback_for_re_entry() {
    let lock = HostLock::new(());
    let held = lock.lock("the probe").unwrap();
    let scope = TensorScope::enter();
    let ctx = context_here();
    let (refused, unattached) = std::thread::scope(|s| {
        s.spawn(|| {
            let unattached = lock.held_here();
            assert!(attach_to(ctx).is_none());
            // Checked before locking: a broken rule would block here.
            let held_there = lock.held_here();
            let refused = if held_there { lock.lock("the probe").err().map(|e| e.code) } else { None };
            assert!(outcome(fulmen_callback_detach()).is_none());
            assert!(!lock.held_here(), "detached: a concurrent thread again");
            (refused, unattached)
        })
        .join()
        .unwrap()
    });
    assert!(!unattached, "an unattached thread is a concurrent one");
    assert_eq!(refused, Some(ErrorCode::InvalidState));
    drop(scope);
    drop(held);
    free_context(ctx);
}

#[test]
fn an_attached_thread_runs_with_the_callbacks_grad_mode() {
    let scope = TensorScope::enter();
    let ctx = tch::no_grad(context_here);
    let seen = std::thread::scope(|s| {
        s.spawn(|| {
            let before = crate::tensor::runtime::grad_enabled();
            assert!(attach_to(ctx).is_none());
            let inside = crate::tensor::runtime::grad_enabled();
            assert!(outcome(fulmen_callback_detach()).is_none());
            (before, inside, crate::tensor::runtime::grad_enabled())
        })
        .join()
        .unwrap()
    });
    assert_eq!(seen, (true, false, true));
    drop(scope);
    free_context(ctx);
}
