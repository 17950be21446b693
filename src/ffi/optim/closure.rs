//! LBFGS (`torch.optim.LBFGS`) and `step(closure)`, the step that lets an
//! optimizer re-evaluate the loss through a host function.
use crate::error::{Error, ErrorCode};
use crate::ffi::base::callback::call_host;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::nn::model::fulmen_model;
use crate::ffi::optim::gen_options::fulmen_lbfgs_options;
use crate::ffi::optim::optimizers::{collect_params, emit_optimizer, fulmen_optimizer, options};
use crate::ffi::tensor::handle::fulmen_tensor;
use crate::optim::{GradReset, Lbfgs, LbfgsOptions};
use std::ffi::c_void;

/// Creates an LBFGS optimizer over `model`'s parameters (if not NULL) and
/// `params[0..n_params]`, in one parameter group (torch allows no other).
/// It steps only with a closure: under the trainer's automatic
/// optimization (as the only optimizer; not with "16-mixed" or "dp"), or
/// through `fulmen_optimizer_step_closure`. `fulmen_optimizer_step`
/// refuses with FULMEN_CODE_UNSUPPORTED, and
/// `fulmen_optimizer_add_param_group` with FULMEN_CODE_INVALID_ARGUMENT.
/// Its param group keeps `max_iter`, `max_eval`, `tolerance_grad`,
/// `tolerance_change`, `history_size` and `line_search_fn` (0 none, 1
/// strong_wolfe) for `fulmen_optimizer_param_group_get` / `_set`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_lbfgs_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_lbfgs_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = LbfgsOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(Lbfgs::new(p, opts)?)))
    })
}

/// The value `*loss` holds until a closure writes it (a NaN no
/// arithmetic makes).
pub(crate) const UNWRITTEN: u64 = 0x7ff4_dead_beef_0001;

/// A closure for `fulmen_optimizer_step_closure`: computes the loss at the
/// parameters' current values, runs its backward
/// (`fulmen_tensor_backward`), writes the loss to `*loss` and returns NULL,
/// or returns an error, which ends the step.
pub type fulmen_closure_fn = Option<unsafe extern "C" fn(userdata: *mut c_void, loss: *mut f64) -> *mut fulmen_error>;

/// torch's `optimizer.step(closure)` for a host-owned loop: the optimizer
/// calls `closure` as often as its algorithm needs (LBFGS: up to
/// `max_eval` times, once more with the line search; the others once,
/// before their update), on this
/// thread, with gradients on. Before each call every gradient of the
/// optimizer's parameters is set to none, as the usual closure's
/// `optimizer.zero_grad()` does; the closure must not call functions on
/// this optimizer (it is in use: FULMEN_CODE_INVALID_STATE). Tensors the
/// closure creates and does not free are freed when it returns. Writes
/// the first evaluation's loss to `*loss` when `loss` is not NULL.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`closure` NULL), the closure's own
/// error, FULMEN_CODE_CALLBACK (the closure wrote no loss),
/// FULMEN_CODE_INVALID_ARGUMENT (a param group value out of range),
/// FULMEN_CODE_INVALID_STATE (an incomplete history loaded from a state),
/// FULMEN_CODE_TORCH or FULMEN_CODE_OUT_OF_MEMORY (the update failed).
/// After an error, LBFGS's parameters and history are as before the step
/// (another optimizer's parameters are as the closure left them).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_step_closure(
    optimizer: *mut fulmen_optimizer,
    closure: fulmen_closure_fn,
    userdata: *mut c_void,
    loss: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let f = closure.ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `closure` is NULL"))?;
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        let mut reset = GradReset::default();
        let groups: Vec<_> =
            o.inner.param_groups().iter().map(|g| crate::optim::ParamGroup::new(&g.params, 0.0, 0.0, 0.0)).collect();
        let mut calls = 0u64;
        let first = o.inner.step_with_closure(&mut || {
            reset.run(&groups);
            calls += 1;
            // A NaN of its own bit pattern says "not written"; a NaN loss
            // the closure computed is a loss like any other, as in torch.
            let mut value = f64::from_bits(UNWRITTEN);
            // SAFETY: the host's function with its own userdata, on this thread.
            call_host(&format!("closure (evaluation {calls})"), || unsafe { f(userdata, &mut value) })?;
            if value.to_bits() == UNWRITTEN {
                return Err(Error::new(ErrorCode::Callback, format!("closure (evaluation {calls}) wrote no loss")));
            }
            Ok(value)
        })?;
        if !loss.is_null() {
            loss.write(first);
        }
        Ok(())
    })
}
