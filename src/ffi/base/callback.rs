//! Host callbacks: the userdata they carry and how their results come back.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{error_from_raw, fulmen_error};
use crate::ffi::tensor::TensorScope;
use crate::thread_token::{held_by_this_work, thread_token};
use std::ffi::c_void;

/// The host's userdata and its optional destructor, called exactly once
/// when fulmen drops the object that holds it.
pub struct Userdata {
    ptr: *mut c_void,
    free: Option<unsafe extern "C" fn(*mut c_void)>,
}

// SAFETY: the host promises (in the header) that userdata may be used from
// the thread that runs the callbacks; fulmen never touches it otherwise.
unsafe impl Send for Userdata {}

impl Userdata {
    /// Wraps the pointer and destructor from a vtable.
    pub fn new(ptr: *mut c_void, free: Option<unsafe extern "C" fn(*mut c_void)>) -> Self {
        Userdata { ptr, free }
    }

    /// Sets the destructor (armed once the owner is sure to keep the data).
    pub fn set_free(&mut self, free: Option<unsafe extern "C" fn(*mut c_void)>) {
        self.free = free;
    }

    /// The raw pointer handed back to callbacks.
    pub fn ptr(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for Userdata {
    fn drop(&mut self) {
        if let Some(f) = self.free.take() {
            // SAFETY: the host's destructor for its own pointer, called once.
            unsafe { f(self.ptr) };
        }
    }
}

/// A host object's userdata behind a lock that serialises its callbacks
/// and refuses re-entry: a callback that calls back into the object it runs
/// for (on the same thread) gets FULMEN_CODE_INVALID_STATE, not a deadlock.
pub struct HostLock<T> {
    inner: std::sync::Mutex<T>,
    /// The thread holding the lock (its token), 0 when free.
    owner: std::sync::atomic::AtomicUsize,
}

/// The locked value; releases the lock when dropped.
pub struct HostGuard<'a, T> {
    guard: std::sync::MutexGuard<'a, T>,
    owner: &'a std::sync::atomic::AtomicUsize,
}

impl<T> HostLock<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        HostLock { inner: std::sync::Mutex::new(value), owner: std::sync::atomic::AtomicUsize::new(0) }
    }

    /// Whether the calling thread holds the lock (it is inside one of the
    /// object's callbacks), or a callback thread it is attached to does.
    pub fn held_here(&self) -> bool {
        held_by_this_work(self.owner.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Locks for a callback into `what`; a call from inside one of its own
    /// callbacks (or from a thread attached to one) is an error.
    pub fn lock(&self, what: &str) -> Result<HostGuard<'_, T>> {
        use std::sync::atomic::Ordering;
        if self.held_here() {
            return Err(Error::state(format!(
                "{what} was called from one of its own callbacks (a re-entrant call, on the callback's thread \
                 or a thread attached to it); fulmen refuses it instead of deadlocking"
            )));
        }
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.owner.store(thread_token(), Ordering::Release);
        Ok(HostGuard { guard, owner: &self.owner })
    }
}

impl<T> std::ops::Deref for HostGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for HostGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for HostGuard<'_, T> {
    fn drop(&mut self) {
        self.owner.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// Checks a vtable's `struct_size` against the size this library knows.
pub fn check_struct_size(given: usize, known: usize, what: &str) -> Result<()> {
    if given < known {
        return Err(Error::invalid(format!(
            "{what}.struct_size is {given}, this fulmen needs at least {known}: set it to sizeof({what})"
        )));
    }
    Ok(())
}

/// Copies a host vtable whose first field is its `struct_size`: the bytes
/// the host declares (at least `min`, at most `size_of::<T>()`, rounded
/// down to whole units of the struct's alignment, as any `sizeof` is, so a
/// slot is never copied in part), the rest zeroed, so slots appended after
/// the host's version read as NULL and no reference to memory beyond the
/// host's struct is ever made.
///
/// # Safety
/// `p` is NULL or points to at least `struct_size` readable bytes, and `T`
/// is valid when zeroed (integers, pointers, `Option` of function
/// pointers, `bool`).
pub(crate) unsafe fn read_vtable<T>(p: *const T, min: usize, what: &str) -> Result<T> {
    if p.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, "argument `vtable` is NULL"));
    }
    let size = std::ptr::read_unaligned(p.cast::<usize>());
    check_struct_size(size, min, what)?;
    let mut v = std::mem::MaybeUninit::<T>::zeroed();
    let align = std::mem::align_of::<T>();
    let n = size.min(std::mem::size_of::<T>()) / align * align;
    std::ptr::copy_nonoverlapping(p.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), n);
    Ok(v.assume_init())
}

/// Runs a host callback inside a tensor scope and turns its returned error
/// into a core error naming the callback. Under a trainer's
/// `callback_timeout`, a callback that ran longer fails too.
pub fn call_host(name: &str, f: impl FnOnce() -> *mut fulmen_error) -> Result<()> {
    let _scope = TensorScope::enter();
    let timer = HostCallTimer::start();
    host_result(f(), || format!("callback {name}"))?;
    timer.check(|| format!("callback {name}"))
}

/// [`call_host`] without the trainer's `callback_timeout`: for callbacks
/// that legitimately wait for other processes (a collectives hook), whose
/// success must not be turned into a failure afterwards.
pub fn call_host_untimed(name: &str, f: impl FnOnce() -> *mut fulmen_error) -> Result<()> {
    let _scope = TensorScope::enter();
    host_result(f(), || format!("callback {name}"))
}

/// Takes back the error a host callback returned: an error becomes a core
/// error "`what` failed: ..." with the host's code (an invalid-handle code,
/// which would blame the caller, becomes FULMEN_CODE_CALLBACK).
pub(crate) fn host_result(err: *mut fulmen_error, what: impl FnOnce() -> String) -> Result<()> {
    // SAFETY: `err` is NULL or an error handle the host handed over.
    match unsafe { error_from_raw(err) } {
        None => Ok(()),
        Some(e) => {
            let code = if e.code == ErrorCode::InvalidHandle { ErrorCode::Callback } else { e.code };
            Err(Error::new(code, format!("{} failed: {}", what(), e.message)))
        }
    }
}

/// Times one host call against the running trainer's `callback_timeout`
/// (fulmen cannot interrupt host code, so a late call fails when it returns).
pub struct HostCallTimer(Option<(std::time::Instant, std::time::Duration)>);

impl HostCallTimer {
    /// Starts timing when a limit is set on this thread.
    pub fn start() -> Self {
        HostCallTimer(crate::trainer::run_settings::callback_timeout().map(|l| (std::time::Instant::now(), l)))
    }

    /// Fails with FULMEN_CODE_CALLBACK when the call ran longer than the limit.
    pub fn check(&self, what: impl FnOnce() -> String) -> Result<()> {
        let Some((start, limit)) = self.0 else { return Ok(()) };
        let took = start.elapsed();
        if took <= limit {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::Callback,
            format!(
                "{} took {:.3} s, longer than callback_timeout = {:.3} s",
                what(),
                took.as_secs_f64(),
                limit.as_secs_f64()
            ),
        ))
    }
}
