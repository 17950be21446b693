//! `fulmen_optimizer`: SGD, Adam, AdamW, RMSprop (Adagrad, Adamax, NAdam and RAdam in
//! `optim_adaptive`) over a model's parameters, stepped by the trainer or by the
//! host's own loop; gradient clipping.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, write_out, Handle};
use crate::ffi::nn::model::{fulmen_model, lock, model_arg};
use crate::ffi::optim::gen_options::{fulmen_adam_options, fulmen_rmsprop_options, fulmen_sgd_options};
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_list};
use crate::optim::{Adam, AdamOptions, AdamW, Optimizer, RmsProp, RmsPropOptions, Sgd, SgdOptions};
use tch::Tensor;

/// An optimizer (torch.optim semantics). Free with `fulmen_optimizer_free`,
/// unless it was handed to `fulmen_optimizer_config_add`.
pub struct fulmen_optimizer {
    pub(crate) inner: Box<dyn Optimizer>,
    /// A number no other optimizer of the process has: schedulers name
    /// their optimizer by it (an address may be reused once freed).
    pub(crate) id: u64,
}

/// The next optimizer's `id`.
static NEXT_OPTIMIZER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Handle for fulmen_optimizer {
    const C_NAME: &'static str = "fulmen_optimizer";
}

/// The parameters to optimize: every parameter of `model` (if not NULL),
/// then `params[0..n_params]`.
pub(crate) unsafe fn collect_params(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
) -> Result<Vec<Tensor>> {
    let mut all = Vec::new();
    if !model.is_null() {
        all.extend(lock(&*model_arg(model, "model")?)?.parameters());
    }
    for t in tensor_list(params, n_params, "params")? {
        if !t.requires_grad() {
            return Err(Error::invalid(
                "a tensor in `params` does not require grad (call fulmen_tensor_set_requires_grad)",
            ));
        }
        all.push(t.shallow_clone());
    }
    if all.is_empty() {
        return Err(Error::invalid("no parameters: pass a model, tensors, or both"));
    }
    Ok(all)
}

pub(crate) unsafe fn options<'a, T>(p: *const T) -> Result<&'a T> {
    p.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))
}

pub(crate) unsafe fn emit_optimizer(
    out: *mut *mut fulmen_optimizer,
    make: impl FnOnce() -> Result<Box<dyn Optimizer>>,
) -> Result<()> {
    handle::check_out(out, "out")?;
    let inner = make()?;
    let id = NEXT_OPTIMIZER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    out.write(handle::into_raw(fulmen_optimizer { inner, id }));
    Ok(())
}

/// Creates an SGD optimizer over `model`'s parameters (if not NULL) and
/// `params[0..n_params]`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_sgd_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_sgd_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = SgdOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(Sgd::new(p, opts)?)))
    })
}

/// Creates an Adam optimizer (L2 weight decay) over `model`'s parameters
/// and `params[0..n_params]`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_adam_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_adam_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let o = AdamOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(Adam::new(p, o)?)))
    })
}

/// Creates an AdamW optimizer (decoupled weight decay).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_adamw_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_adam_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let o = AdamOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(AdamW::new(p, o)?)))
    })
}

/// Creates an RMSprop optimizer.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, no
/// parameters, a tensor in `params` that does not require grad, a parameter
/// listed twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_rmsprop_new(
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    options: *const fulmen_rmsprop_options,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = RmsPropOptions::from(*self::options(options)?);
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || Ok(Box::new(RmsProp::new(p, opts)?)))
    })
}

/// Adds a parameter group (`model`'s parameters and/or tensors) with its
/// own learning rate; `lr` < 0 uses the optimizer's default.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (no parameters, a tensor in
/// `params` that does not require grad, a parameter already in a group,
/// `lr` NaN or infinite), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_add_param_group(
    optimizer: *mut fulmen_optimizer,
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    lr: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        let p = collect_params(model, params, n_params)?;
        o.inner.add_param_group(p, if lr < 0.0 { None } else { Some(lr) })
    })
}

/// Updates every parameter that has a gradient (`optimizer.step()`), for a
/// host-owned loop.
///
/// Errors: FULMEN_CODE_TORCH (libtorch fails in the update).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_step(optimizer: *mut fulmen_optimizer) -> *mut fulmen_error {
    guard!(|| handle::borrow_mut(optimizer, "optimizer")?.inner.step())
}

/// Clears the gradients of every parameter (`zero_grad(set_to_none=True)`).
///
/// Errors: a host optimizer's `zero_grad` error (with its code).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_zero_grad(optimizer: *mut fulmen_optimizer) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        o.inner.zero_grad();
        o.inner.take_error().map_or(Ok(()), Err)
    })
}

/// Writes the learning rate of parameter group 0.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_get_lr(
    optimizer: *const fulmen_optimizer,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", handle::borrow(optimizer, "optimizer")?.inner.lr()))
}

/// Sets the learning rate of every parameter group.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`lr` negative or not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_set_lr(optimizer: *mut fulmen_optimizer, lr: f64) -> *mut fulmen_error {
    guard!(|| {
        if !lr.is_finite() || lr < 0.0 {
            return Err(Error::invalid(format!("learning rate {lr} must be finite and >= 0")));
        }
        handle::borrow_mut(optimizer, "optimizer")?.inner.set_lr(lr);
        Ok(())
    })
}

/// Frees an optimizer. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_free(optimizer: *mut fulmen_optimizer) {
    handle::free(optimizer);
}

/// Scales the gradients of `model`'s parameters so their joint norm
/// (`norm_type`: 2.0 for L2, INFINITY for max) is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_`; writes the norm before clipping to
/// `*total_norm_out` if it is not NULL.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`max_norm` negative or NaN,
/// `norm_type` not > 0), FULMEN_CODE_TORCH (libtorch fails computing the
/// norm, e.g. gradients on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_clip_grad_norm(
    model: *mut fulmen_model,
    max_norm: f64,
    norm_type: f64,
    total_norm_out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let params = lock(&handle::borrow_mut(model, "model")?.inner)?.parameters();
        let n = crate::tensor::grad::clip_grad_norm(&params, max_norm, norm_type)?;
        if !total_norm_out.is_null() {
            total_norm_out.write(n);
        }
        Ok(())
    })
}

/// Clamps the gradients of `model`'s parameters into [-value, value].
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`value` negative or NaN),
/// FULMEN_CODE_TORCH (libtorch fails clamping a gradient).
#[no_mangle]
pub unsafe extern "C" fn fulmen_clip_grad_value(model: *mut fulmen_model, value: f64) -> *mut fulmen_error {
    guard!(|| {
        let params = lock(&handle::borrow_mut(model, "model")?.inner)?.parameters();
        crate::tensor::grad::clip_grad_value(&params, value)
    })
}
