//! Host callbacks: the userdata they carry and how their results come back.
use super::error::{error_from_raw, fulmen_error};
use super::tensor::TensorScope;
use crate::error::{Error, ErrorCode, Result};
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

/// Checks a vtable's `struct_size` against the size this library knows.
pub fn check_struct_size(given: usize, known: usize, what: &str) -> Result<()> {
    if given < known {
        return Err(Error::invalid(format!(
            "{what}.struct_size is {given}, this fulmen needs at least {known}: set it to sizeof({what})"
        )));
    }
    Ok(())
}

/// Runs a host callback inside a tensor scope and turns its returned error
/// into a core error naming the callback.
pub fn call_host(name: &str, f: impl FnOnce() -> *mut fulmen_error) -> Result<()> {
    let _scope = TensorScope::enter();
    match unsafe { error_from_raw(f()) } {
        None => Ok(()),
        Some(e) => {
            let code = if e.code == ErrorCode::InvalidHandle { ErrorCode::Callback } else { e.code };
            Err(Error::new(code, format!("callback {name} failed: {}", e.message)))
        }
    }
}
