//! SIGINT and SIGTERM during a run, as Lightning handles a KeyboardInterrupt
//! or a SIGTERM: the run stops at the next hook, `on_exception` runs, the
//! loggers are finalized ("failed") so every metric logged so far is on
//! disk, and the call returns `FULMEN_CODE_INTERRUPTED`.
//!
//! While at least one run with `handle_signals` (the default) is on, fulmen
//! replaces the process's SIGINT and SIGTERM handlers (with `SA_ONSTACK |
//! SA_RESTART`, as Go and other runtimes require) and puts the previous
//! ones back when the last such run ends. A signal the host ignores
//! (`SIG_IGN`) stays ignored. A second signal of the same kind before the
//! run has stopped goes to the previous handler (by default it ends the
//! process), so a run stuck in a host callback can still be killed. A
//! signal that arrives after the run's last check is re-raised to the
//! previous handler when fulmen puts it back, so it is never lost.
use crate::error::{Error, ErrorCode, Result};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// The signal received while handlers were installed (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// How many signals fulmen's handler has received (a run is interrupted
/// by those after its start).
static COUNT: AtomicU64 = AtomicU64::new(0);
/// Whether a run reported the received signal as its interrupt.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// The handlers fulmen replaced, readable from the signal handler: written
/// only while fulmen's handler is not installed.
struct Previous(UnsafeCell<[libc::sigaction; 2]>);
// SAFETY: written under `STATE`'s lock before the handler that reads it is
// installed and after it is removed.
unsafe impl Sync for Previous {}

static PREVIOUS: Previous = Previous(UnsafeCell::new(unsafe { std::mem::zeroed() }));

/// Runs with handlers installed, and which signals fulmen took over.
struct State {
    users: usize,
    installed: [bool; 2],
}

static STATE: Mutex<State> = Mutex::new(State { users: 0, installed: [false; 2] });

thread_local! {
    /// The runs on this thread, innermost last: the signal count at their
    /// start when they watch signals, `None` when they do not.
    static RUNS: std::cell::RefCell<Vec<Option<u64>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn index_of(sig: libc::c_int) -> usize {
    usize::from(sig == libc::SIGTERM)
}

extern "C" fn on_signal(sig: libc::c_int) {
    COUNT.fetch_add(1, Ordering::SeqCst);
    let before = RECEIVED.swap(sig, Ordering::SeqCst);
    if before == sig {
        // SAFETY: async-signal-safe calls only; PREVIOUS is not written
        // while this handler is installed.
        unsafe {
            let previous = (*PREVIOUS.0.get())[index_of(sig)];
            libc::sigaction(sig, &previous, std::ptr::null_mut());
            libc::raise(sig);
        }
    }
}

/// Installed signal handling for one run; dropping it ends the run's watch
/// and, for the last run, restores the host's handlers.
pub(crate) struct SignalGuard {
    active: bool,
}

impl SignalGuard {
    /// Starts watching SIGINT and SIGTERM for the run on this thread when
    /// `enabled` (the `handle_signals` option).
    pub fn install(enabled: bool) -> SignalGuard {
        if !enabled {
            RUNS.with(|r| r.borrow_mut().push(None));
            return SignalGuard { active: false };
        }
        let mut st = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if st.users == 0 {
            RECEIVED.store(0, Ordering::SeqCst);
            REPORTED.store(false, Ordering::SeqCst);
            for (i, &sig) in SIGNALS.iter().enumerate() {
                // SAFETY: plain sigaction calls; PREVIOUS is written before
                // fulmen's handler (its only reader) is installed.
                unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction == libc::SIG_IGN {
                        st.installed[i] = false;
                        continue;
                    }
                    (*PREVIOUS.0.get())[i] = old;
                    let mut new: libc::sigaction = std::mem::zeroed();
                    new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                    new.sa_flags = libc::SA_ONSTACK | libc::SA_RESTART;
                    libc::sigemptyset(&mut new.sa_mask);
                    st.installed[i] = libc::sigaction(sig, &new, std::ptr::null_mut()) == 0;
                }
            }
        }
        st.users += 1;
        let start = COUNT.load(Ordering::SeqCst);
        RUNS.with(|r| r.borrow_mut().push(Some(start)));
        SignalGuard { active: true }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        RUNS.with(|r| r.borrow_mut().pop());
        if !self.active {
            return;
        }
        let mut st = STATE.lock().unwrap_or_else(|p| p.into_inner());
        st.users -= 1;
        if st.users > 0 {
            return;
        }
        for (i, &sig) in SIGNALS.iter().enumerate() {
            if st.installed[i] {
                // SAFETY: puts back the handler saved by `install`.
                unsafe { libc::sigaction(sig, &(*PREVIOUS.0.get())[i], std::ptr::null_mut()) };
                st.installed[i] = false;
            }
        }
        let pending = RECEIVED.swap(0, Ordering::SeqCst);
        drop(st);
        if pending != 0 && !REPORTED.swap(false, Ordering::SeqCst) {
            // No run stopped for it: the host gets it as if fulmen had not
            // been there.
            // SAFETY: raising a signal has no memory-safety preconditions.
            unsafe { libc::raise(pending) };
        }
    }
}

/// The signal's name for messages.
fn name(sig: libc::c_int) -> &'static str {
    if sig == libc::SIGTERM {
        "SIGTERM"
    } else {
        "SIGINT"
    }
}

/// `Err(FULMEN_CODE_INTERRUPTED)` once SIGINT or SIGTERM arrived during
/// the run on this thread (a run that watches signals); `Ok` otherwise.
pub fn check() -> Result<()> {
    let Some(start) = RUNS.with(|r| r.borrow().last().copied().flatten()) else { return Ok(()) };
    let sig = RECEIVED.load(Ordering::SeqCst);
    if sig == 0 || COUNT.load(Ordering::SeqCst) <= start {
        return Ok(());
    }
    REPORTED.store(true, Ordering::SeqCst);
    Err(Error::new(
        ErrorCode::Interrupted,
        format!("interrupted by {}: the run stopped, on_exception ran and the loggers were finalized", name(sig)),
    ))
}
