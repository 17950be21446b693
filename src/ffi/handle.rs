//! Opaque handles: the one place where Rust values become raw pointers for C
//! and back. Every live handle is recorded with its type, so a NULL, freed or
//! wrong-type handle is reported as an error instead of being dereferenced.
//!
//! A freed address that the allocator hands out again to a new handle of the
//! same type is indistinguishable from it; that is documented in the header.
use crate::error::{Error, ErrorCode, Result};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// A Rust type that is handed to C as an opaque handle.
pub trait Handle: Sized + 'static {
    /// The C name of the handle type, used in error messages.
    const C_NAME: &'static str;
}

/// A live handle's type and serial number (unique for the process, so an
/// address reused by a new handle is told apart from the old one).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Entry {
    type_name: &'static str,
    serial: u64,
}

type Registry = HashMap<usize, Entry>;

fn live() -> &'static Mutex<Registry> {
    static LIVE: OnceLock<Mutex<Registry>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock_live() -> std::sync::MutexGuard<'static, Registry> {
    // A panic while holding this lock cannot leave the map inconsistent.
    live().lock().unwrap_or_else(|p| p.into_inner())
}

fn next_serial() -> u64 {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Boxes `value`, records it as live and returns the raw handle.
pub fn into_raw<T: Handle>(value: T) -> *mut T {
    into_raw_with_serial(value).0
}

/// As [`into_raw`], also returning the handle's serial number.
pub fn into_raw_with_serial<T: Handle>(value: T) -> (*mut T, u64) {
    let ptr = Box::into_raw(Box::new(value));
    let serial = next_serial();
    lock_live().insert(ptr as usize, Entry { type_name: T::C_NAME, serial });
    (ptr, serial)
}

/// Checks that `ptr` is a live handle of type `T`.
pub fn check<T: Handle>(ptr: *const T, arg: &str) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    match lock_live().get(&(ptr as usize)).map(|e| e.type_name) {
        Some(name) if name == T::C_NAME => Ok(()),
        Some(name) => {
            Err(Error::new(ErrorCode::InvalidHandle, format!("argument `{arg}` is a {name}, expected a {}", T::C_NAME)))
        }
        None => Err(Error::new(
            ErrorCode::InvalidHandle,
            format!("argument `{arg}` is not a live {} (freed or never created)", T::C_NAME),
        )),
    }
}

/// Whether `ptr` is a live handle of type `T`.
pub fn is_live<T: Handle>(ptr: *const T) -> bool {
    !ptr.is_null() && lock_live().get(&(ptr as usize)).map(|e| e.type_name) == Some(T::C_NAME)
}

/// Borrows the value behind a live handle.
///
/// # Safety
/// The caller must not hold another reference to the same handle and must
/// not let the reference outlive the handle.
pub unsafe fn borrow<'a, T: Handle>(ptr: *const T, arg: &str) -> Result<&'a T> {
    check(ptr, arg)?;
    Ok(&*ptr)
}

/// Mutably borrows the value behind a live handle.
///
/// # Safety
/// As [`borrow`]; the handle must not be used elsewhere during the borrow.
pub unsafe fn borrow_mut<'a, T: Handle>(ptr: *mut T, arg: &str) -> Result<&'a mut T> {
    check(ptr, arg)?;
    Ok(&mut *ptr)
}

/// Takes back ownership of a live handle; `None` for NULL or a pointer that
/// is not a live handle of type `T` (so a double free is harmless).
///
/// # Safety
/// No reference to the value may be alive.
pub unsafe fn take<T: Handle>(ptr: *mut T) -> Option<T> {
    if ptr.is_null() {
        return None;
    }
    take_matching(ptr, None)
}

/// Takes back a handle only if it is still the one created with `serial`
/// (not a newer handle at a reused address).
///
/// # Safety
/// As [`take`].
pub unsafe fn take_serial<T: Handle>(ptr: *mut T, serial: u64) -> Option<T> {
    take_matching(ptr, Some(serial))
}

unsafe fn take_matching<T: Handle>(ptr: *mut T, serial: Option<u64>) -> Option<T> {
    if ptr.is_null() {
        return None;
    }
    let mut map = lock_live();
    match map.get(&(ptr as usize)) {
        Some(e) if e.type_name == T::C_NAME && serial.is_none_or(|s| s == e.serial) => {
            map.remove(&(ptr as usize));
            drop(map);
            Some(*Box::from_raw(ptr))
        }
        _ => None,
    }
}

/// Number of live handles of every type (for leak checks in tests).
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
