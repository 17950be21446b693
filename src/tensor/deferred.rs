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
use crate::error::{Error, ErrorCode, Result, ResultExt};
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
    /// A scope is its thread's: it may not be dropped on another.
    _thread: std::marker::PhantomData<*const ()>,
}

impl DeferredScope {
    /// Defers checks on this thread from global step `step` on.
    pub fn enter(step: i64) -> DeferredScope {
        let previous = SCOPE.with(|s| s.replace(Some(Pending { entries: Vec::new(), since_step: step })));
        DeferredScope { previous, _thread: std::marker::PhantomData }
    }

    /// Ends the scope once `result` (what ran under it) is known: the flags
    /// still unread are read (`step`: the global step now). A failed check
    /// is the error, with `result`'s own error after it, since it happened
    /// first and may explain it; when the reading itself fails, an error
    /// `result` holds is kept.
    pub fn finish<T>(self, step: i64, result: Result<T>) -> Result<T> {
        let checked = read_flags(step);
        drop(self);
        match (result, checked) {
            (result, Ok(None)) => result,
            (Ok(_), Ok(Some(failed)) | Err(failed)) => Err(failed),
            (Err(e), Ok(Some(failed))) => {
                Err(Error::new(failed.code, format!("{}; then: {}", failed.message, e.message)))
            }
            (Err(e), Err(_)) => Err(e),
        }
    }
}

/// Counts the steps since `step` in the next reading's error (a scope
/// entered before the run's global step was restored).
pub fn restart(step: i64) {
    SCOPE.with(|s| {
        if let Some(p) = s.borrow_mut().as_mut() {
            p.since_step = step;
        }
    });
}

impl Drop for DeferredScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SCOPE.with(|s| *s.borrow_mut() = previous);
    }
}

/// Runs `work` with the checks it defers kept apart, and returns them:
/// each kind's flag as `work` computed it. A device graph captures a step
/// this way; after each replay its flags are deferred again ([`defer`]),
/// so that they accumulate in the scope's own flags. Without a scope,
/// `work` runs as it is and nothing is kept apart.
pub fn collect<T>(work: impl FnOnce() -> Result<T>) -> Result<(T, Vec<(CheckKind, Tensor)>)> {
    if SCOPE.with(|s| s.borrow().is_none()) {
        return Ok((work()?, Vec::new()));
    }
    /// Puts the scope's own flags back, even when `work` panics.
    struct Restore(Option<Pending>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            SCOPE.with(|s| *s.borrow_mut() = outer);
        }
    }
    let since_step = SCOPE.with(|s| s.borrow().as_ref().map_or(0, |p| p.since_step));
    let outer = SCOPE.with(|s| s.replace(Some(Pending { entries: Vec::new(), since_step })));
    let restore = Restore(outer);
    let out = work();
    let collected = SCOPE.with(|s| s.borrow_mut().take().map(|p| p.entries).unwrap_or_default());
    drop(restore);
    Ok((out?, collected))
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
            // Out of place: `logical_or_` fails on torch_xla 2.9's tensors.
            Some((_, flag)) => *flag = flag.f_logical_or(&to_device_of(&any, flag)?)?,
            None => pending.entries.push((kind, any)),
        }
        Ok(())
    })
}

/// Reads every deferred flag of this thread's scope (one wait for the
/// device) and fails with the first failed check's error, naming the steps
/// since the last reading; `step` is the global step now. Clears the
/// flags. Nothing to do without a scope.
pub fn verify(step: i64) -> Result<()> {
    match read_flags(step)? {
        Some(failed) => Err(failed),
        None => Ok(()),
    }
}

/// [`verify`] for one rank (`rank`) of several, where every rank reads at
/// the same point: `max` reduces values over the ranks with a maximum (one
/// collective). When a check failed on any rank, every rank fails, so that
/// none goes on to wait in a collective for a rank that stopped: a rank
/// whose own check failed with its error, the others naming the rank (and
/// its error's code). Nothing to do, and no collective, without a scope.
pub fn verify_across_ranks(step: i64, rank: usize, max: impl FnOnce(&mut [f64]) -> Result<()>) -> Result<()> {
    let Some(since) = SCOPE.with(|s| s.borrow().as_ref().map(|p| p.since_step)) else { return Ok(()) };
    // A rank that cannot read its flags fails too, and says so to the others.
    let own = read_flags(step).unwrap_or_else(Some);
    let mut verdict = [own.as_ref().map_or(0.0, |e| encode_failure(e.code, rank))];
    let agreed = max(&mut verdict);
    if let Some(e) = own {
        return Err(e);
    }
    agreed.ctx("agreeing with the other ranks on the device checks")?;
    match decode_failure(verdict[0]) {
        None => Ok(()),
        Some((code, failed)) => Err(Error::new(
            code,
            format!(
                "a device check failed on rank {failed} in a step between global steps {since} and {step} (its \
                 error is rank {failed}'s); every rank stops here"
            ),
        )),
    }
}

/// The ranks' verdict values: 0 for no failure, else the error's code
/// above 32 bits and the rank plus one below (exact in an f64), so that
/// their maximum names one failed rank alike on every rank.
const RANK_SPAN: f64 = 4_294_967_296.0;

fn encode_failure(code: ErrorCode, rank: usize) -> f64 {
    code as i32 as f64 * RANK_SPAN + (rank as f64 + 1.0)
}

fn decode_failure(verdict: f64) -> Option<(ErrorCode, usize)> {
    if verdict <= 0.0 {
        return None;
    }
    let code = ErrorCode::from_i32((verdict / RANK_SPAN).floor() as i32).unwrap_or(ErrorCode::Distributed);
    Some((code, ((verdict % RANK_SPAN) as usize).saturating_sub(1)))
}

/// [`verify`]'s reading: the first failed check's error, if any; `Err`
/// when the flags could not be read.
fn read_flags(step: i64) -> Result<Option<Error>> {
    let taken = SCOPE.with(|s| {
        s.borrow_mut().as_mut().map(|p| (std::mem::take(&mut p.entries), std::mem::replace(&mut p.since_step, step)))
    });
    let Some((entries, since)) = taken else { return Ok(None) };
    if entries.is_empty() {
        return Ok(None);
    }
    // Gathered on the first flag's device, then read in one copy.
    let first = &entries[0].1;
    let flags = entries.iter().map(|(_, f)| to_device_of(&f.f_reshape([1i64])?, first)).collect::<Result<Vec<_>>>()?;
    let flags = Vec::<bool>::try_from(&to_device(&Tensor::f_cat(&flags, 0)?, Device::Cpu, false)?)?;
    Ok(entries.iter().zip(flags).find(|(_, failed)| *failed).map(|((kind, _), _)| {
        Error::new(
            kind.code,
            format!(
                "{} in a step between global steps {since} and {step} (checked on the device, read every \
                 log_every_n_steps steps and at epoch ends)",
                kind.what
            ),
        )
    }))
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
    fn finishing_reads_what_is_left_and_puts_it_first() {
        let scope = DeferredScope::enter(0);
        defer(KIND, &Tensor::from(true)).unwrap();
        let e = scope.finish(4, Err::<(), _>(Error::state("a hook failed"))).unwrap_err();
        assert_eq!(e.code, ErrorCode::OutOfRange);
        assert!(
            e.message.contains("between global steps 0 and 4") && e.message.ends_with("; then: a hook failed"),
            "{e}"
        );
        let scope = DeferredScope::enter(2);
        restart(7);
        defer(OTHER, &Tensor::from(true)).unwrap();
        let e = scope.finish(9, Ok(())).unwrap_err();
        assert!(e.message.contains("between global steps 7 and 9"), "{e}");
        assert_eq!(DeferredScope::enter(0).finish(1, Ok(5)).unwrap(), 5);
        verify(3).unwrap();
    }

    #[test]
    fn collected_checks_stay_apart_until_deferred_again() {
        let scope = DeferredScope::enter(0);
        defer(OTHER, &Tensor::from(false)).unwrap();
        let (value, kept) = collect(|| {
            defer(KIND, &Tensor::from_slice(&[false, true]))?;
            Ok(5)
        })
        .unwrap();
        assert_eq!(value, 5);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0, KIND);
        // The scope's own flags are back, without the collected one.
        verify(1).unwrap();
        defer(kept[0].0, &kept[0].1).unwrap();
        assert_eq!(verify(2).unwrap_err().code, ErrorCode::OutOfRange);
        // A failed `work` leaves the scope as it was.
        defer(OTHER, &Tensor::from(true)).unwrap();
        assert!(collect(|| -> Result<()> { Err(Error::state("no")) }).is_err());
        assert_eq!(verify(3).unwrap_err().code, ErrorCode::NonFinite);
        drop(scope);
        // Outside a scope nothing is kept apart.
        assert!(collect(|| Ok(())).unwrap().1.is_empty());
    }

    #[test]
    fn ranks_agree_on_a_failed_check() {
        // Without a scope: nothing read, no collective.
        verify_across_ranks(1, 0, |_| panic!("no collective without a scope")).unwrap();
        let _scope = DeferredScope::enter(2);
        // Nothing failed anywhere: this rank says 0 and hears 0.
        verify_across_ranks(3, 0, |v| {
            assert_eq!(v, &[0.0]);
            Ok(())
        })
        .unwrap();
        // Another rank's check failed: this one stops too, naming it.
        let e = verify_across_ranks(5, 0, |v| {
            v[0] = encode_failure(ErrorCode::OutOfRange, 3);
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::OutOfRange);
        assert!(e.message.contains("failed on rank 3 in a step between global steps 3 and 5"), "{e}");
        // This rank's own check failed: its own error, whatever the others
        // say, and even when agreeing fails.
        defer(KIND, &Tensor::from(true)).unwrap();
        let e = verify_across_ranks(7, 1, |v| {
            assert_eq!(decode_failure(v[0]), Some((ErrorCode::OutOfRange, 1)));
            Err(Error::new(ErrorCode::Distributed, "the job broke"))
        })
        .unwrap_err();
        assert!(e.message.contains("test: a value was bad in a step between global steps 5 and 7"), "{e}");
        let e = verify_across_ranks(8, 1, |_| Err(Error::new(ErrorCode::Distributed, "the job broke"))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Distributed);
        assert!(e.message.contains("agreeing with the other ranks") && e.message.contains("the job broke"), "{e}");
        // The largest code, then the largest rank, wins alike everywhere.
        let many = [encode_failure(ErrorCode::NonFinite, 7), encode_failure(ErrorCode::OutOfRange, 2)];
        assert_eq!(decode_failure(many[0].max(many[1])), Some((ErrorCode::OutOfRange, 2)));
        assert_eq!(
            decode_failure(encode_failure(ErrorCode::OutOfMemory, 65_535)),
            Some((ErrorCode::OutOfMemory, 65_535))
        );
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
