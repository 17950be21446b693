//! A libtorch error raised by an op that takes a scalar argument reaches
//! Rust as a panic, not as the op's `Err`: tch drops the temporary scalar
//! before it reads the op's error, and the scalar's drop unwraps that
//! pending error (`tch/src/wrappers/scalar.rs`). [`catch`] turns such a
//! panic back into the libtorch error it carries, and keeps the panic
//! message off stderr; any other panic is left as it is.
use crate::error::Error;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

thread_local! {
    /// Depth of [`catch`] calls on this thread.
    static CATCHING: Cell<u32> = const { Cell::new(0) };
    /// The libtorch message of the scalar panic being unwound.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

const PREFIX: &str = "called `Result::unwrap()` on an `Err` value: Torch(";

fn payload_text(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied())
}

/// The libtorch message inside a tch scalar panic, or `None` for any other
/// panic.
fn scalar_panic_message(info: &PanicHookInfo) -> Option<String> {
    let from_tch = info.location().is_some_and(|l| l.file().contains("tch-") && l.file().ends_with("scalar.rs"));
    let text = payload_text(info.payload())?;
    let quoted = text.strip_prefix(PREFIX)?.strip_suffix(')')?;
    from_tch.then(|| unescape_debug(quoted))
}

/// Reverses Rust's `{:?}` of a string: strips the quotes and resolves
/// `\n`, `\t`, `\r`, `\\`, `\"`, `\'`, `\0` and `\u{..}`.
fn unescape_debug(quoted: &str) -> String {
    let body = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"')).unwrap_or(quoted);
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('u') => {
                let hex: String = chars.by_ref().skip(1).take_while(|&h| h != '}').collect();
                out.extend(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn install_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) > 0 {
                if let Some(msg) = scalar_panic_message(info) {
                    CAUGHT.with(|c| *c.borrow_mut() = Some(msg));
                    return;
                }
            }
            previous(info)
        }));
    });
}

/// Runs `f`; a libtorch error that tch raised as a scalar panic becomes
/// `Err` with that error (code classified as for any libtorch error);
/// other panics continue to unwind.
pub fn catch<T>(f: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    install_hook();
    // A message left by a scalar panic that an inner catch_unwind took.
    CAUGHT.with(|c| c.borrow_mut().take());
    CATCHING.with(|c| c.set(c.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(c.get() - 1));
    match result {
        Ok(r) => r,
        Err(payload) => match CAUGHT.with(|c| c.borrow_mut().take()) {
            Some(msg) => Err(Error::from(tch::TchError::Torch(msg))),
            None => std::panic::resume_unwind(payload),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use tch::{Device, Kind, Tensor};

    #[test]
    fn bad_scalars_are_errors_not_panics() {
        let e = catch(|| Ok(Tensor::f_full([2i64].as_slice(), f64::NAN, (Kind::Int64, Device::Cpu))?)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{}", e.message);
        assert!(e.message.contains("cannot be converted"), "{}", e.message);
        let e = catch(|| Ok(Tensor::f_arange_start_step(0.0, 1e300, 1.0, (Kind::Float, Device::Cpu))?)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{}", e.message);
        let ok = catch(|| Ok(Tensor::f_full([2i64].as_slice(), 3.0, (Kind::Int64, Device::Cpu))?)).unwrap();
        assert_eq!(ok.int64_value(&[1]), 3);
    }

    #[test]
    fn other_panics_still_unwind() {
        let r = std::panic::catch_unwind(|| catch::<()>(|| panic!("a bug")));
        assert!(r.is_err());
    }

    #[test]
    fn debug_strings_unescape() {
        assert_eq!(unescape_debug(r#""a\nb \"q\" \\ \u{2028}""#), "a\nb \"q\" \\ \u{2028}");
    }
}
