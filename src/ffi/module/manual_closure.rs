//! `opt.step(closure)` from a manual-optimization training step, the way
//! to step LBFGS (or any optimizer) with a closure inside fit.
use crate::error::{Error, ErrorCode};
use crate::ffi::base::callback::call_host;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::data::batch::with_temp_handle;
use crate::ffi::module::context::{ctx_mut, fulmen_step_context};
use crate::ffi::optim::closure::UNWRITTEN;
use crate::trainer::StepContext;
use std::ffi::c_void;

/// A closure for `fulmen_step_context_optimizer_step_closure`: computes
/// the loss at the parameters' current values through `ctx` (a context
/// valid during this call only: zero the optimizer's gradients and run
/// `fulmen_step_context_manual_backward` with it, log with it), writes the
/// loss to `*loss` and returns NULL, or returns an error, which ends the
/// step.
pub type fulmen_step_closure_fn = Option<
    unsafe extern "C" fn(userdata: *mut c_void, ctx: *mut fulmen_step_context, loss: *mut f64) -> *mut fulmen_error,
>;

/// Lightning's `opt.step(closure=closure)` in a training step with
/// automatic optimization off, for optimizer `optimizer`. An optimizer
/// that re-evaluates the loss (LBFGS) calls `closure` as often as its
/// algorithm needs, each call followed by the callbacks'
/// `on_before_optimizer_step`; the others call it once, then step as
/// `fulmen_step_context_optimizer_step` does. The closure gets its own
/// context: the step's `ctx` is in use until this call returns
/// (FULMEN_CODE_INVALID_STATE). Inside it the stepping optimizer can be
/// zeroed, not stepped, and its schedulers not stepped. Tensors the
/// closure creates and does not keep are freed when it returns. Counts one
/// in `global_step`. `loss` (may be NULL) receives the first evaluation's
/// loss (torch's return value), `made` (may be NULL) whether the update
/// was made. Under DDP, LBFGS decides from the loss averaged over ranks,
/// so every rank evaluates as often.
///
/// Errors: as `fulmen_step_context_optimizer_step`, and
/// FULMEN_CODE_NULL_ARGUMENT (`closure` NULL), the closure's own error,
/// FULMEN_CODE_CALLBACK (the closure wrote no loss),
/// FULMEN_CODE_INVALID_ARGUMENT (LBFGS under "16-mixed", which scales the
/// loss), FULMEN_CODE_INVALID_STATE (called from inside a closure of
/// LBFGS). After an error LBFGS's parameters and history are as before
/// the step.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_optimizer_step_closure(
    ctx: *mut fulmen_step_context,
    optimizer: usize,
    closure: fulmen_step_closure_fn,
    userdata: *mut c_void,
    loss: *mut f64,
    made: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        let f = closure.ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `closure` is NULL"))?;
        let mut c = ctx_mut(ctx)?;
        let mut calls = 0u64;
        let (done, first) = c.optimizer_step_closure(optimizer, &mut |inner: &mut StepContext| {
            calls += 1;
            let who = format!("closure of optimizer {optimizer} (evaluation {calls})");
            let ptr = std::ptr::from_mut(inner).cast::<StepContext<'static>>();
            // A NaN of its own bit pattern says "not written".
            let mut value = f64::from_bits(UNWRITTEN);
            call_host(&who, || {
                // SAFETY: the host's function with its own userdata and a
                // context handle revoked when it returns, on this thread.
                with_temp_handle(fulmen_step_context { ctx: ptr }, |h| unsafe { f(userdata, h, &mut value) }).1
            })?;
            if value.to_bits() == UNWRITTEN {
                return Err(Error::new(ErrorCode::Callback, format!("{who} wrote no loss")));
            }
            Ok(value)
        })?;
        if !loss.is_null() {
            loss.write(first);
        }
        if !made.is_null() {
            made.write(done.read()?);
        }
        Ok(())
    })
}
