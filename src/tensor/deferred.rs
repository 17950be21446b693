//! Checks whose verdict stays on the device: inside a training loop on an
//! accelerator, reading a value back (an index's range, whether the loss is
//! finite) would make the host wait for the device at every step. Under a
//! [`DeferredScope`] such a check instead or-accumulates a flag on the
//! device, and the trainer reads every flag at once where it reads values
//! anyway ([`verify`]: each `log_every_n_steps` steps, epoch ends,
//! checkpoint saves, the end of a run). Outside a scope, and on the CPU
//! (where a read costs nothing), checks read at once as before.
//!
//! What a deferred check guards (an out-of-range index) is replaced by a
//! harmless value by its caller, so the step itself cannot fault the
//! device; the run then fails at the next verification, naming the steps
//! where it happened.
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::{to_device, to_device_of, Device};
use std::cell::RefCell;
use tch::Tensor;

/// One kind of check: a site and what it guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckKind {
    /// The error's code when it failed.
    pub code: ErrorCode,
    /// What failed, as the error says it ("embedding: an index lies outside
    /// the table").
    pub what: &'static str,
}

/// The flags of one scope: one per kind of check (a fixed set of sites, so
/// the memory never grows with the steps).
struct Pending {
    entries: Vec<(CheckKind, Tensor)>,
    /// The global step the flags were last read at.
    since_step: i64,
}

thread_local! {
    static SCOPE: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// While alive, checks on this thread's device tensors are deferred; the
/// scope before it comes back when it drops (a scope's unread flags are
/// lost then: call [`verify`] first).
pub struct DeferredScope {
    previous: Option<Pending>,
}

impl DeferredScope {
    /// Defers checks on this thread from global step `step` on.
    pub fn enter(step: i64) -> DeferredScope {
        let previous = SCOPE.with(|s| s.replace(Some(Pending { entries: Vec::new(), since_step: step })));
        DeferredScope { previous }
    }
}

impl Drop for DeferredScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SCOPE.with(|s| *s.borrow_mut() = previous);
    }
}

/// Whether a check of `t` is deferred: under a scope, off the CPU.
pub fn deferring(t: &Tensor) -> bool {
    SCOPE.with(|s| s.borrow().is_some()) && Device::of(t).is_ok_and(|d| d != Device::Cpu)
}

/// Records `failed` (a boolean tensor of any shape; any true element
/// fails the check) for `kind`, without reading it. Only under a scope
/// ([`deferring`]); elsewhere an error.
pub fn defer(kind: CheckKind, failed: &Tensor) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let any = failed.f_any()?;
    SCOPE.with(|s| {
        let mut s = s.borrow_mut();
        let pending = s.as_mut().ok_or_else(|| Error::state(format!("{}: no deferred check is running", kind.what)))?;
        match pending.entries.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, flag)) => {
                let _ = flag.f_logical_or_(&to_device_of(&any, flag)?)?;
            }
            None => pending.entries.push((kind, any)),
        }
        Ok(())
    })
}

/// Reads every deferred flag of this thread's scope (one wait for the
/// device) and fails with the first failed
/// check's error, naming the steps since the last reading; `step` is the
/// global step now. Clears the flags. Nothing to do without a scope.
pub fn verify(step: i64) -> Result<()> {
    let taken = SCOPE.with(|s| {
        s.borrow_mut().as_mut().map(|p| (std::mem::take(&mut p.entries), std::mem::replace(&mut p.since_step, step)))
    });
    let Some((entries, since)) = taken else { return Ok(()) };
    if entries.is_empty() {
        return Ok(());
    }
    // Gathered on the first flag's device, then read in one copy.
    let first = &entries[0].1;
    let flags = entries.iter().map(|(_, f)| to_device_of(&f.f_reshape([1i64])?, first)).collect::<Result<Vec<_>>>()?;
    let flags = Vec::<bool>::try_from(&to_device(&Tensor::f_cat(&flags, 0)?, Device::Cpu, false)?)?;
    match entries.iter().zip(flags).find(|(_, failed)| *failed) {
        Some(((kind, _), _)) => Err(Error::new(
            kind.code,
            format!(
                "{} in a step between global steps {since} and {step} (checked on the device, read every \
                 log_every_n_steps steps and at epoch ends)",
                kind.what
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: CheckKind = CheckKind { code: ErrorCode::OutOfRange, what: "test: a value was bad" };
    const OTHER: CheckKind = CheckKind { code: ErrorCode::NonFinite, what: "test: another" };

    #[test]
    fn nothing_is_deferred_on_the_cpu_or_outside_a_scope() {
        assert!(!deferring(&Tensor::from(1)));
        assert!(defer(KIND, &Tensor::from(true)).is_err());
        let _scope = DeferredScope::enter(0);
        assert!(!deferring(&Tensor::from(1)));
    }

    #[test]
    fn flags_accumulate_until_read_and_name_the_steps() {
        let scope = DeferredScope::enter(3);
        defer(KIND, &Tensor::from_slice(&[false, false])).unwrap();
        defer(OTHER, &Tensor::from(false)).unwrap();
        verify(5).unwrap();
        defer(KIND, &Tensor::from_slice(&[false, true])).unwrap();
        defer(KIND, &Tensor::from(false)).unwrap();
        let e = verify(9).unwrap_err();
        assert_eq!(e.code, ErrorCode::OutOfRange);
        assert!(e.message.contains("test: a value was bad in a step between global steps 5 and 9"), "{e}");
        // Read once: cleared.
        verify(10).unwrap();
        drop(scope);
        verify(11).unwrap();
    }

    #[test]
    fn scopes_nest() {
        let outer = DeferredScope::enter(0);
        defer(KIND, &Tensor::from(true)).unwrap();
        {
            let _inner = DeferredScope::enter(0);
            verify(1).unwrap();
        }
        assert!(verify(2).is_err());
        drop(outer);
    }
}
