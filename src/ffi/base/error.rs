//! `fulmen_error`: the error object of the C API, and the panic boundary that
//! every exported function runs inside.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::handle::{self, Handle};
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error returned by a fulmen call or made by the host with
/// `fulmen_error_new`. Owned by whoever receives it; free it with
/// `fulmen_error_free`.
pub struct fulmen_error {
    code: ErrorCode,
    message: CString,
}

impl Handle for fulmen_error {
    const C_NAME: &'static str = "fulmen_error";
}

fn message_cstring(text: &str) -> CString {
    CString::new(text.replace('\0', "\\0")).unwrap_or_default()
}

/// Turns a core error into a C error handle.
pub fn error_into_raw(e: Error) -> *mut fulmen_error {
    handle::into_raw(fulmen_error { code: e.code, message: message_cstring(&e.message) })
}

/// Takes back an error handle returned by a host callback, as a core error.
/// A pointer that is not a live error is reported as such.
///
/// # Safety
/// `err` must be NULL or a pointer the host got from fulmen.
pub unsafe fn error_from_raw(err: *mut fulmen_error) -> Option<Error> {
    if err.is_null() {
        return None;
    }
    match handle::take(err) {
        Some(e) => Some(Error::new(e.code, e.message.to_string_lossy().into_owned())),
        None => {
            Some(Error::new(ErrorCode::InvalidHandle, "a callback returned a pointer that is not a live fulmen_error"))
        }
    }
}

/// Message of a caught panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// The name of the function this is written in (closures inside it
/// included): in an exported function, its C name. Errors name the function
/// they come from by construction, never by a copied literal.
macro_rules! function_name {
    () => {{
        fn here() {}
        $crate::ffi::base::error::enclosing_function(::std::any::type_name_of_val(&here))
    }};
}
pub(crate) use function_name;

/// Runs an exported function's body (a closure returning `Result<()>`) in
/// [`guard_named`] under the function's own name.
macro_rules! guard {
    ($body:expr) => {
        $crate::ffi::base::error::guard_named($crate::ffi::base::error::function_name!(), $body)
    };
}
pub(crate) use guard;

/// Runs an exported function's body in [`guard_while_ended`] under the
/// function's own name.
macro_rules! guard_while_ended {
    ($body:expr) => {
        $crate::ffi::base::error::guard_named_while_ended($crate::ffi::base::error::function_name!(), $body)
    };
}
pub(crate) use guard_while_ended;

/// The function's own name in the path `function_name!` reads
/// (`fulmen::ffi::nn::model::fulmen_model_free::{{closure}}::here`).
pub fn enclosing_function(path: &'static str) -> &'static str {
    let mut path = path.strip_suffix("::here").unwrap_or(path);
    while let Some(outer) = path.strip_suffix("::{{closure}}") {
        path = outer;
    }
    path.rsplit("::").next().unwrap_or(path)
}

/// Runs the body of an exported function: errors get the function's name as
/// context, panics become `FULMEN_CODE_PANIC` errors, nothing unwinds into C.
/// On a thread attached to a callback (`fulmen_callback_attach`) the call is
/// refused once the callback has returned, and the callback's end waits for
/// it otherwise. Exported functions call it through `guard!`, which passes
/// their own name.
pub fn guard_named<F: FnOnce() -> Result<()>>(func: &'static str, body: F) -> *mut fulmen_error {
    let _busy = match crate::ffi::base::callback_context::enter_call() {
        Ok(busy) => busy,
        Err(e) => return error_into_raw(e.context(func)),
    };
    guard_named_while_ended(func, body)
}

/// [`guard`] without the attached-thread check: for the calls a thread
/// attached to a callback that has returned must still be able to make
/// (`fulmen_callback_detach`).
pub(crate) fn guard_named_while_ended<F: FnOnce() -> Result<()>>(func: &'static str, body: F) -> *mut fulmen_error {
    let _call = handle::enter_call(func);
    match catch_unwind(AssertUnwindSafe(|| crate::tensor::tch_panic::catch(body))) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => error_into_raw(e.context(func)),
        Err(p) => {
            error_into_raw(Error::new(ErrorCode::Panic, format!("{func}: internal panic: {}", panic_message(&*p))))
        }
    }
}

/// Like [`guard`] for functions that return a value instead of an error;
/// `fallback` is returned on error or panic.
pub fn guard_value<T, F: FnOnce() -> T>(fallback: T, body: F) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// Reads a C string argument as UTF-8.
///
/// # Safety
/// `s` must be NULL or a NUL-terminated string.
pub unsafe fn str_arg<'a>(s: *const c_char, arg: &str) -> Result<&'a str> {
    if s.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    CStr::from_ptr(s).to_str().map_err(|_| Error::invalid(format!("argument `{arg}` is not valid UTF-8")))
}

/// Reads an optional C string argument (NULL: `None`) as UTF-8.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
pub unsafe fn opt_str(p: *const c_char, arg: &str) -> Result<Option<String>> {
    if p.is_null() {
        Ok(None)
    } else {
        str_arg(p, arg).map(|s| Some(s.to_string()))
    }
}

/// Creates an error with a code and a message, for a host callback to
/// return. An unknown code becomes `FULMEN_CODE_CALLBACK`; a NULL message
/// becomes an empty one. Never returns NULL.
///
/// Errors: none; the pointer returned is the new error, not a failure.
#[no_mangle]
pub unsafe extern "C" fn fulmen_error_new(code: i32, message: *const c_char) -> *mut fulmen_error {
    let text = guard_value(String::from("<message not readable>"), || {
        if message.is_null() {
            String::new()
        } else {
            CStr::from_ptr(message).to_string_lossy().into_owned()
        }
    });
    error_into_raw(Error::new(ErrorCode::from_i32(code).unwrap_or(ErrorCode::Callback), text))
}

/// The error's stable code (a `fulmen_code` value); 0 for NULL or a
/// pointer that is not a live error.
#[no_mangle]
pub unsafe extern "C" fn fulmen_error_code(error: *const fulmen_error) -> i32 {
    guard_value(0, || match handle::borrow(error, "error") {
        Ok(e) => e.code as i32,
        Err(_) => 0,
    })
}

/// The error's message, NUL-terminated UTF-8, owned by the error and valid
/// until `fulmen_error_free`. Returns "" for NULL or an invalid pointer.
#[no_mangle]
pub unsafe extern "C" fn fulmen_error_message(error: *const fulmen_error) -> *const c_char {
    static EMPTY: &[u8] = b"\0";
    guard_value(EMPTY.as_ptr() as *const c_char, || match handle::borrow(error, "error") {
        Ok(e) => e.message.as_ptr(),
        Err(_) => EMPTY.as_ptr() as *const c_char,
    })
}

/// Frees an error. NULL is a no-op; so is a pointer already freed.
#[no_mangle]
pub unsafe extern "C" fn fulmen_error_free(error: *mut fulmen_error) {
    handle::free(error);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fulmen_probe_named() -> *mut fulmen_error {
        guard!(|| Err(Error::invalid("refused")))
    }

    fn name_from_a_closure() -> &'static str {
        let inner = || function_name!();
        inner()
    }

    #[test]
    fn errors_carry_the_exported_functions_own_name() {
        assert_eq!(name_from_a_closure(), "name_from_a_closure");
        assert_eq!(enclosing_function("fulmen::ffi::x::fulmen_y::{{closure}}::{{closure}}::here"), "fulmen_y");
        let raw = fulmen_probe_named();
        // SAFETY: a live error handle, taken back once.
        let e = unsafe { handle::take(raw) }.expect("an error");
        assert_eq!(e.message.to_str().unwrap(), "fulmen_probe_named: refused");
    }

    /// No exported function names itself in a literal: `guard!` and
    /// `function_name!` read the name, so it cannot drift from the symbol.
    #[test]
    fn no_guard_names_a_function_by_literal() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi");
        let mut stack = vec![root];
        let mut found = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for (i, line) in text.lines().enumerate() {
                        let pattern =
                            ["guard(\"", "guard_named(\"", "guard_while_ended(\"", "guard_named_while_ended(\""];
                        if pattern.iter().any(|p| line.contains(p)) {
                            found.push(format!("{}:{}", path.display(), i + 1));
                        }
                    }
                }
            }
        }
        assert!(found.is_empty(), "guard with a literal name (use guard!): {found:?}");
    }
}
