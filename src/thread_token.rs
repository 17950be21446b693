//! A number unique to the calling thread while it lives, for locks that
//! tell a re-entrant call (the same thread) from a concurrent one.

/// The calling thread's token (never 0).
pub(crate) fn thread_token() -> usize {
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    TOKEN.with(|t| std::ptr::from_ref(t) as usize)
}
