//! Opaque handles: the one place where Rust values become raw pointers for C
//! and back. Every live handle is recorded with its type, so a NULL, freed or
//! wrong-type handle is reported as an error instead of being dereferenced.
//!
//! Every call that uses a handle pins it for the call's duration: shared
//! pins for reads ([`borrow`]), one exclusive pin for changes
//! ([`borrow_mut`]). A handle pinned exclusively refuses every other use
//! with `FULMEN_CODE_INVALID_STATE` (a fit's trainer cannot be changed by a
//! hook or another thread), and the `*_free` of a pinned handle is
//! deferred: the handle is invalid for new calls at once, and the value is
//! dropped when the last call using it returns. A call that takes
//! ownership of a handle (moving a layer into a model) refuses a pinned one.
//!
//! A freed address that the allocator hands out again to a new handle of the
//! same type is indistinguishable from it; that is documented in the header.
use crate::error::{Error, ErrorCode, Result};
use std::cell::Cell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

/// A Rust type that is handed to C as an opaque handle.
pub trait Handle: Sized + 'static {
    /// The C name of the handle type, used in error messages.
    const C_NAME: &'static str;
}

/// A live handle's type, serial number (unique for the process, so an
/// address reused by a new handle is told apart from the old one) and pins.
#[derive(Clone, Copy)]
struct Entry {
    type_name: &'static str,
    serial: u64,
    /// Running calls that read the handle.
    shared: u32,
    /// The exported function that holds it exclusively, if any.
    exclusive: Option<&'static str>,
    /// Freed while pinned: invisible to new calls, dropped by the last unpin.
    released: bool,
    /// Being taken back by [`revoke`], which drops or returns it itself.
    revoking: bool,
}

impl Entry {
    fn pinned(&self) -> bool {
        self.shared > 0 || self.exclusive.is_some()
    }
}

type Registry = HashMap<usize, Entry>;

struct Live {
    map: Mutex<Registry>,
    /// Signalled when a pin is dropped while a [`revoke`] waits.
    unpinned: Condvar,
    /// Calls of [`revoke`] waiting (changed under `map`'s lock), so that
    /// unpinning, on every call's path, wakes nobody when nobody waits.
    revokers: AtomicUsize,
}

fn live() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(|| Live {
        map: Mutex::new(HashMap::new()),
        unpinned: Condvar::new(),
        revokers: AtomicUsize::new(0),
    })
}

fn lock_live() -> MutexGuard<'static, Registry> {
    // A panic while holding this lock cannot leave the map inconsistent.
    live().map.lock().unwrap_or_else(|p| p.into_inner())
}

fn next_serial() -> u64 {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

thread_local! {
    /// The exported function running on this thread (innermost), named in
    /// "in use" errors.
    static CURRENT_CALL: Cell<&'static str> = const { Cell::new("") };
}

/// Records `func` as the exported function running on this thread until
/// the returned value is dropped.
pub(crate) fn enter_call(func: &'static str) -> CallName {
    CallName(CURRENT_CALL.with(|c| c.replace(func)))
}

/// Restores the outer call's name when dropped.
pub(crate) struct CallName(&'static str);

impl Drop for CallName {
    fn drop(&mut self) {
        CURRENT_CALL.with(|c| c.set(self.0));
    }
}

fn current_call() -> &'static str {
    let c = CURRENT_CALL.with(|c| c.get());
    if c.is_empty() {
        "a running fulmen call"
    } else {
        c
    }
}

/// Boxes `value`, records it as live and returns the raw handle.
pub fn into_raw<T: Handle>(value: T) -> *mut T {
    into_raw_with_serial(value).0
}

/// As [`into_raw`], also returning the handle's serial number.
pub fn into_raw_with_serial<T: Handle>(value: T) -> (*mut T, u64) {
    let ptr = Box::into_raw(Box::new(value));
    let serial = next_serial();
    let entry = Entry { type_name: T::C_NAME, serial, shared: 0, exclusive: None, released: false, revoking: false };
    lock_live().insert(ptr as usize, entry);
    (ptr, serial)
}

/// The entry of a live handle of type `T`, or the error for `ptr`.
fn live_entry<'m, T: Handle>(map: &'m mut Registry, ptr: *const T, arg: &str) -> Result<&'m mut Entry> {
    if ptr.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    match map.get_mut(&(ptr as usize)) {
        Some(e) if !e.released && e.type_name == T::C_NAME => Ok(e),
        Some(e) if !e.released => Err(Error::new(
            ErrorCode::InvalidHandle,
            format!("argument `{arg}` is a {}, expected a {}", e.type_name, T::C_NAME),
        )),
        _ => Err(Error::new(
            ErrorCode::InvalidHandle,
            format!("argument `{arg}` is not a live {} (freed or never created)", T::C_NAME),
        )),
    }
}

/// Refuses a handle any call is using (for changes and moves).
fn check_unpinned(e: &Entry, arg: &str) -> Result<()> {
    match (e.exclusive, e.shared) {
        (Some(by), _) => Err(in_use(arg, e.type_name, by)),
        (None, n) if n > 0 => Err(in_use(arg, e.type_name, "another call")),
        _ => Ok(()),
    }
}

fn in_use(arg: &str, type_name: &str, by: &str) -> Error {
    Error::new(
        ErrorCode::InvalidState,
        format!("argument `{arg}` (a {type_name}) is in use by {by}, which has not returned"),
    )
}

/// Checks that `ptr` is a live handle of type `T` (without pinning it).
pub fn check<T: Handle>(ptr: *const T, arg: &str) -> Result<()> {
    live_entry(&mut lock_live(), ptr, arg).map(|_| ())
}

/// Whether `ptr` is a live handle of type `T`.
pub fn is_live<T: Handle>(ptr: *const T) -> bool {
    !ptr.is_null() && check(ptr, "").is_ok()
}

/// A pin on a handle, released when dropped. The last unpin of a handle
/// freed meanwhile drops its value.
pub struct PinToken {
    addr: usize,
    exclusive: bool,
    drop_value: unsafe fn(usize),
}

unsafe fn drop_boxed<T>(addr: usize) {
    drop(Box::from_raw(addr as *mut T));
}

impl PinToken {
    fn new<T: Handle>(ptr: *const T, exclusive: bool) -> Self {
        PinToken { addr: ptr as usize, exclusive, drop_value: drop_boxed::<T> }
    }
}

impl Drop for PinToken {
    fn drop(&mut self) {
        let mut map = lock_live();
        let Some(e) = map.get_mut(&self.addr) else { return };
        if self.exclusive {
            e.exclusive = None;
        } else {
            e.shared = e.shared.saturating_sub(1);
        }
        let finished = e.released && !e.revoking && !e.pinned();
        if finished {
            map.remove(&self.addr);
        }
        let waiting = live().revokers.load(Ordering::Relaxed) > 0;
        drop(map);
        if waiting {
            live().unpinned.notify_all();
        }
        if finished {
            // SAFETY: the entry is gone, no pin remains, and the address
            // came from `Box::into_raw` of the type `drop_value` was made for.
            unsafe { (self.drop_value)(self.addr) };
        }
    }
}

/// A value read through a handle, pinned for as long as this lives.
pub struct Shared<'a, U: ?Sized> {
    value: &'a U,
    _pin: PinToken,
    _not_send: PhantomData<*const ()>,
}

impl<'a, U: ?Sized> Shared<'a, U> {
    /// Narrows the pinned value to a part of it.
    pub fn map<V: ?Sized>(self, f: impl for<'b> FnOnce(&'b U) -> &'b V) -> Shared<'a, V> {
        Shared { value: f(self.value), _pin: self._pin, _not_send: PhantomData }
    }
}

impl<U: ?Sized> Deref for Shared<'_, U> {
    type Target = U;
    fn deref(&self) -> &U {
        self.value
    }
}

/// A value changed through a handle, pinned exclusively while this lives.
pub struct Exclusive<'a, U: ?Sized> {
    value: &'a mut U,
    _pin: PinToken,
    _not_send: PhantomData<*const ()>,
}

impl<'a, U: ?Sized> Exclusive<'a, U> {
    /// Narrows the pinned value to a part of it.
    pub fn map<V: ?Sized>(self, f: impl for<'b> FnOnce(&'b mut U) -> &'b mut V) -> Exclusive<'a, V> {
        Exclusive { value: f(self.value), _pin: self._pin, _not_send: PhantomData }
    }
}

impl<U: ?Sized> Deref for Exclusive<'_, U> {
    type Target = U;
    fn deref(&self) -> &U {
        self.value
    }
}

impl<U: ?Sized> DerefMut for Exclusive<'_, U> {
    fn deref_mut(&mut self) -> &mut U {
        self.value
    }
}

/// Pins a live handle for reading; FULMEN_CODE_INVALID_STATE while another
/// call holds it exclusively.
///
/// # Safety
/// `ptr` must be NULL or a pointer the host got from fulmen (any value is
/// checked against the registry before it is dereferenced).
pub unsafe fn borrow<'a, T: Handle>(ptr: *const T, arg: &str) -> Result<Shared<'a, T>> {
    {
        let mut map = lock_live();
        let e = live_entry(&mut map, ptr, arg)?;
        if let Some(by) = e.exclusive {
            return Err(in_use(arg, T::C_NAME, by));
        }
        e.shared += 1;
    }
    Ok(Shared { value: &*ptr, _pin: PinToken::new(ptr, false), _not_send: PhantomData })
}

/// Pins a live handle for changing it; FULMEN_CODE_INVALID_STATE while any
/// other call uses it.
///
/// # Safety
/// As [`borrow`].
pub unsafe fn borrow_mut<'a, T: Handle>(ptr: *mut T, arg: &str) -> Result<Exclusive<'a, T>> {
    {
        let mut map = lock_live();
        let e = live_entry(&mut map, ptr, arg)?;
        check_unpinned(e, arg)?;
        e.exclusive = Some(current_call());
    }
    Ok(Exclusive { value: &mut *ptr, _pin: PinToken::new(ptr, true), _not_send: PhantomData })
}

/// The body of every `*_free`: releases the handle as [`take`] does (NULL,
/// a freed handle or one of another type: nothing; a pinned one: when its
/// last call returns), with no panic leaving.
///
/// # Safety
/// `ptr` must be NULL or a pointer the host got from fulmen.
pub unsafe fn free<T: Handle>(ptr: *mut T) {
    crate::ffi::base::error::guard_value((), || drop(take(ptr)));
}

/// Frees a handle: `None` for NULL or a pointer that is not a live handle
/// of type `T` (so a double free is harmless) and for a pinned handle,
/// whose value the last call using it drops; otherwise the value.
///
/// # Safety
/// `ptr` must be NULL or a pointer the host got from fulmen.
pub unsafe fn take<T: Handle>(ptr: *mut T) -> Option<T> {
    release(ptr, None)
}

/// As [`take`], only if the handle is still the one created with `serial`
/// (not a newer handle at a reused address).
///
/// # Safety
/// As [`take`].
pub unsafe fn take_serial<T: Handle>(ptr: *mut T, serial: u64) -> Option<T> {
    release(ptr, Some(serial))
}

unsafe fn release<T: Handle>(ptr: *mut T, serial: Option<u64>) -> Option<T> {
    if ptr.is_null() {
        return None;
    }
    let mut map = lock_live();
    let e = map.get_mut(&(ptr as usize))?;
    if e.released || e.type_name != T::C_NAME || serial.is_some_and(|s| s != e.serial) {
        return None;
    }
    if e.pinned() {
        e.released = true;
        return None;
    }
    map.remove(&(ptr as usize));
    drop(map);
    Some(*Box::from_raw(ptr))
}

/// Takes ownership of a live handle to move its value elsewhere, after
/// `accept` approves it (run under the registry's lock: it must not call
/// fulmen). A pinned handle is FULMEN_CODE_INVALID_STATE. On error the
/// handle is unchanged.
///
/// # Safety
/// As [`borrow`].
pub unsafe fn take_owned<T: Handle>(ptr: *mut T, arg: &str, accept: impl FnOnce(&T) -> Result<()>) -> Result<T> {
    let mut map = lock_live();
    check_unpinned(live_entry(&mut map, ptr, arg)?, arg)?;
    accept(&*ptr)?;
    map.remove(&(ptr as usize));
    drop(map);
    Ok(*Box::from_raw(ptr))
}

/// Takes ownership of two live handles at once (the second optional):
/// both are moved, or, when either is pinned or not live, neither.
///
/// # Safety
/// As [`borrow`].
pub unsafe fn take_owned_pair<A: Handle, B: Handle>(
    a: *mut A,
    arg_a: &str,
    b: Option<(*mut B, &str)>,
) -> Result<(A, Option<B>)> {
    let mut map = lock_live();
    check_unpinned(live_entry(&mut map, a, arg_a)?, arg_a)?;
    if let Some((p, arg)) = b {
        if std::ptr::addr_eq(p, a) {
            return Err(Error::invalid(format!("argument `{arg}` is `{arg_a}` again")));
        }
        check_unpinned(live_entry(&mut map, p, arg)?, arg)?;
        map.remove(&(p as usize));
    }
    map.remove(&(a as usize));
    drop(map);
    Ok((*Box::from_raw(a), b.map(|(p, _)| *Box::from_raw(p))))
}

/// Takes ownership of every handle of `ptrs` at once, after `accept`
/// approves each (run under the registry's lock: it must not call
/// fulmen): all are moved, or, when one is pinned, not live, listed twice
/// or refused, none.
///
/// # Safety
/// As [`borrow`], for every pointer.
pub unsafe fn take_owned_all<T: Handle>(
    ptrs: &[*mut T],
    arg: &str,
    accept: impl Fn(usize, &T) -> Result<()>,
) -> Result<Vec<T>> {
    let mut map = lock_live();
    for (i, p) in ptrs.iter().enumerate() {
        let name = format!("{arg}[{i}]");
        check_unpinned(live_entry(&mut map, *p, &name)?, &name)?;
        if let Some(j) = ptrs[..i].iter().position(|q| std::ptr::addr_eq(*q, *p)) {
            return Err(Error::invalid(format!("{name} is {arg}[{j}] again")));
        }
        accept(i, &**p)?;
    }
    for p in ptrs {
        map.remove(&(*p as usize));
    }
    drop(map);
    Ok(ptrs.iter().map(|p| *Box::from_raw(*p)).collect())
}

/// Takes back a handle fulmen lent to a callback, waiting until calls
/// still using it (from other threads) return; the handle is invalid for
/// new calls at once. `None` if it is not a live handle of type `T`.
///
/// # Safety
/// `ptr` must come from [`into_raw`] with type `T`, and fulmen alone may
/// free it (the borrowed types have no `*_free`).
pub unsafe fn revoke<T: Handle>(ptr: *mut T) -> Option<T> {
    let mut map = lock_live();
    match map.get_mut(&(ptr as usize)) {
        Some(e) if e.type_name == T::C_NAME && !e.revoking => {
            e.released = true;
            e.revoking = true;
        }
        _ => return None,
    }
    loop {
        match map.get(&(ptr as usize)) {
            Some(e) if e.pinned() => {
                live().revokers.fetch_add(1, Ordering::Relaxed);
                map = live().unpinned.wait(map).unwrap_or_else(|p| p.into_inner());
                live().revokers.fetch_sub(1, Ordering::Relaxed);
            }
            Some(_) => break,
            // Only this call removes a revoking entry.
            None => return None,
        }
    }
    map.remove(&(ptr as usize));
    drop(map);
    Some(*Box::from_raw(ptr))
}

/// Number of live handles of every type (for leak checks in tests); a
/// handle freed while pinned counts until its last call returns.
pub fn live_count() -> usize {
    lock_live().len()
}

/// Writes `value` through an out-pointer, checked for NULL first.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub unsafe fn write_out<T>(out: *mut T, arg: &str, value: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, format!("output `{arg}` is NULL")));
    }
    out.write(value);
    Ok(())
}

/// Checks that an out-pointer is not NULL before any work is done.
pub fn check_out<T>(out: *mut T, arg: &str) -> Result<()> {
    if out.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, format!("output `{arg}` is NULL")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

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

    fn probe() -> (*mut Probe, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        (into_raw(Probe(Arc::clone(&drops))), drops)
    }

    #[test]
    fn a_free_while_pinned_waits_for_the_last_pin() {
        let (p, drops) = probe();
        let a = unsafe { borrow(p, "p") }.unwrap();
        let b = unsafe { borrow(p, "p") }.unwrap();
        assert!(unsafe { take(p) }.is_none());
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        // Invisible to new calls at once.
        let e = unsafe { borrow(p, "p") }.err().unwrap();
        assert_eq!(e.code, ErrorCode::InvalidHandle);
        assert!(!is_live(p));
        drop(a);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(b);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(unsafe { take(p) }.is_none()); // a second free is harmless
    }

    #[test]
    fn exclusive_pins_refuse_every_other_use() {
        let (p, drops) = probe();
        let _call = enter_call("fulmen_probe_run");
        let m = unsafe { borrow_mut(p, "p") }.unwrap();
        let e = unsafe { borrow(p, "p") }.err().unwrap();
        assert_eq!(e.code, ErrorCode::InvalidState);
        assert!(e.message.contains("in use by fulmen_probe_run"), "{}", e.message);
        assert_eq!(unsafe { borrow_mut(p, "p") }.err().unwrap().code, ErrorCode::InvalidState);
        let owned = unsafe { take_owned(p, "p", |_| Ok(())) };
        assert_eq!(owned.err().unwrap().code, ErrorCode::InvalidState);
        drop(m);
        let shared = unsafe { borrow(p, "p") }.unwrap();
        assert_eq!(unsafe { borrow_mut(p, "p") }.err().unwrap().code, ErrorCode::InvalidState);
        drop(shared);
        let refused = unsafe { take_owned(p, "p", |_| Err(Error::state("no"))) };
        assert!(refused.is_err() && is_live(p));
        let v = unsafe { take_owned(p, "p", |_| Ok(())) }.unwrap();
        assert!(!is_live(p));
        drop(v);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn revoke_waits_for_calls_on_other_threads() {
        let (p, drops) = probe();
        let addr = p as usize;
        let pinned = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let g = unsafe { borrow(addr as *const Probe, "p") }.unwrap();
                pinned.wait();
                std::thread::sleep(std::time::Duration::from_millis(100));
                drop(g);
            });
            pinned.wait();
            let start = std::time::Instant::now();
            let v = unsafe { revoke(p) }.unwrap();
            assert!(start.elapsed() >= std::time::Duration::from_millis(50));
            drop(v);
        });
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(!is_live(p));
    }
}
