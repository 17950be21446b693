//! A number unique to the calling thread while it lives, for locks that
//! tell a re-entrant call (the same thread) from a concurrent one; and the
//! callback threads a thread works for while it is attached to one of
//! their callbacks (`fulmen_callback_attach`), whose locks count as its own.
use std::cell::RefCell;

thread_local! {
    static TOKEN: u8 = const { 0 };
    /// The tokens of the callback threads this thread works for (the
    /// thread it is attached to, then the one that thread was attached to
    /// when the callback began, ...); empty when not attached.
    static WORKS_FOR: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's token (never 0).
pub(crate) fn thread_token() -> usize {
    TOKEN.with(|t| std::ptr::from_ref(t) as usize)
}

/// Whether a lock held under `token` is held by this thread or by a
/// callback thread this thread works for: waiting for it would then wait
/// for the caller's own work (a deadlock), so it counts as a re-entrant
/// call. 0 (no holder) is never.
pub(crate) fn held_by_this_work(token: usize) -> bool {
    token != 0 && (token == thread_token() || WORKS_FOR.try_with(|w| w.borrow().contains(&token)).unwrap_or(false))
}

/// This thread's token followed by those of the callback threads it works
/// for: what a thread attached to a callback running here works for.
pub(crate) fn lineage() -> Vec<usize> {
    let mut all = vec![thread_token()];
    WORKS_FOR.with(|w| all.extend_from_slice(&w.borrow()));
    all
}

/// Sets the callback threads this thread works for (empty when it
/// detaches).
pub(crate) fn set_works_for(tokens: Vec<usize>) {
    // At thread exit the list may be gone already: nothing to clear then.
    let _ = WORKS_FOR.try_with(|w| *w.borrow_mut() = tokens);
}
