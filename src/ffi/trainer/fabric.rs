//! Pieces for host-written training loops, as Lightning Fabric's: an
//! autocast scope (`torch.autocast`) and a loss scaler handle
//! (`torch.amp.GradScaler`), both the ones the trainer's precision plugin
//! uses.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle};
use crate::ffi::nn::model::copy_str;
use crate::ffi::optim::optimizers::fulmen_optimizer;
use crate::ffi::tensor::handle::{emit, fulmen_tensor, tensor_arg};
use crate::precision::{AutocastGuard, GradScaler, GradScalerSettings};
use crate::tensor::device::DeviceType;
use crate::tensor::dtype::DType;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

/// An open autocast region of one thread. Close it with
/// `fulmen_autocast_exit` on the thread that opened it.
pub struct fulmen_autocast_scope {
    guard: AutocastGuard,
    thread: ThreadId,
    id: u64,
}

impl Handle for fulmen_autocast_scope {
    const C_NAME: &'static str = "fulmen_autocast_scope";
}

/// The next scope's id.
static NEXT_SCOPE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The ids of this thread's open scopes, innermost last.
    static OPEN_SCOPES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Opens an autocast region on this thread, as `torch.autocast(device_type,
/// dtype)`'s `__enter__`: eligible ops (matmul, linear, conv) on
/// `device_type` run in `dtype` (FULMEN_DTYPE_F16 or FULMEN_DTYPE_BF16)
/// until `fulmen_autocast_exit`, which restores the previous autocast
/// state. Scopes nest; they must be exited innermost first.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type),
/// FULMEN_CODE_DTYPE_MISMATCH (not a fulmen_dtype, or not f16/bf16),
/// FULMEN_CODE_UNSUPPORTED (no autocast for that device type in this
/// libtorch). Thread rules: the scope belongs to the calling thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_autocast_enter(
    device_type: i32,
    dtype: i32,
    out_scope: *mut *mut fulmen_autocast_scope,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out_scope, "out_scope")?;
        let device = DeviceType::from_c(device_type)?;
        let kind = DType::from_i32(dtype)?.kind();
        let guard = AutocastGuard::enter(device, kind)?;
        let id = NEXT_SCOPE_ID.fetch_add(1, Ordering::Relaxed);
        OPEN_SCOPES.with(|s| s.borrow_mut().push(id));
        let scope = fulmen_autocast_scope { guard, thread: std::thread::current().id(), id };
        out_scope.write(handle::into_raw(scope));
        Ok(())
    })
}

/// Refuses to close `scope` unless it is this thread's innermost one.
fn check_exit(scope: &fulmen_autocast_scope) -> Result<()> {
    if scope.thread != std::thread::current().id() {
        return Err(Error::state("autocast scope exited on another thread than the one that entered it"));
    }
    let innermost = OPEN_SCOPES.with(|s| s.borrow().last().copied());
    if innermost != Some(scope.id) {
        return Err(Error::state("autocast scopes must be exited innermost first; this one has an open inner scope"));
    }
    Ok(())
}

/// Closes an autocast region (`torch.autocast.__exit__`): the autocast
/// state before `fulmen_autocast_enter` comes back and `scope` is freed.
/// On error the scope stays open and valid.
///
/// Errors: FULMEN_CODE_INVALID_STATE (another thread, or an inner scope is
/// still open), FULMEN_CODE_INVALID_HANDLE.
#[no_mangle]
pub unsafe extern "C" fn fulmen_autocast_exit(scope: *mut fulmen_autocast_scope) -> *mut fulmen_error {
    guard!(|| {
        let scope = handle::take_owned(scope, "scope", check_exit)?;
        OPEN_SCOPES.with(|s| s.borrow_mut().pop());
        drop(scope.guard);
        Ok(())
    })
}

/// A dynamic loss scaler (`torch.amp.GradScaler`), the one `16-mixed`
/// training uses. Free with `fulmen_grad_scaler_free`.
pub struct fulmen_grad_scaler {
    inner: GradScaler,
}

impl Handle for fulmen_grad_scaler {
    const C_NAME: &'static str = "fulmen_grad_scaler";
}

/// Creates a loss scaler, as `GradScaler(init_scale, growth_factor,
/// backoff_factor, growth_interval)` (torch's defaults: 65536, 2.0, 0.5,
/// 2000).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a scale that is not a positive
/// finite float32, growth_factor <= 1, backoff_factor outside (0, 1),
/// growth_interval < 1).
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_new(
    init_scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
    out: *mut *mut fulmen_grad_scaler,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let settings = GradScalerSettings { init_scale, growth_factor, backoff_factor, growth_interval };
        let inner = GradScaler::with_settings(settings)?;
        out.write(handle::into_raw(fulmen_grad_scaler { inner }));
        Ok(())
    })
}

/// Writes `loss * scale` (`scaler.scale(loss)`) to `*out` (a new tensor).
///
/// Errors: FULMEN_CODE_TORCH (libtorch fails multiplying).
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_scale(
    scaler: *const fulmen_grad_scaler,
    loss: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let scaled = handle::borrow(scaler, "scaler")?.inner.scale(&*tensor_arg(loss, "loss")?)?;
        emit(out, scaled)
    })
}

/// Divides `optimizer`'s gradients by the scale in place
/// (`scaler.unscale_(optimizer)`, before gradient clipping) and writes
/// whether any was inf or NaN to `*found_inf_out` if it is not NULL (a
/// read that waits for the device; with NULL nothing is read).
///
/// Errors: FULMEN_CODE_INVALID_STATE (already unscaled or stepped since the
/// last `fulmen_grad_scaler_update`), FULMEN_CODE_DTYPE_MISMATCH (fp16
/// gradients), FULMEN_CODE_TORCH.
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_unscale(
    scaler: *mut fulmen_grad_scaler,
    optimizer: *mut fulmen_optimizer,
    found_inf_out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        let o = handle::borrow(optimizer, "optimizer")?;
        let mut s = handle::borrow_mut(scaler, "scaler")?;
        s.inner.unscale_on_device(o.id as usize, &o.inner.param_tensors())?;
        if !found_inf_out.is_null() {
            found_inf_out.write(s.inner.found_inf(o.id as usize).unwrap_or(Ok(false))?);
        }
        Ok(())
    })
}

/// `scaler.step(optimizer)`: unscales the gradients if
/// `fulmen_grad_scaler_unscale` was not called, then steps `optimizer`
/// unless a gradient was inf or NaN; writes whether the step was skipped
/// to `*skipped_out` if it is not NULL. With fused updates
/// (`fulmen_optimizer_set_fused`) the optimizer skips the step on the
/// device, as torch's fused optimizers do, and the host reads nothing
/// unless `skipped_out` asks; other optimizers are told on the host (one
/// read that waits for the device, as torch's).
///
/// Errors: FULMEN_CODE_INVALID_STATE (already stepped since the last
/// update), FULMEN_CODE_UNSUPPORTED (an optimizer that needs a closure),
/// the optimizer's step errors.
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_step(
    scaler: *mut fulmen_grad_scaler,
    optimizer: *mut fulmen_optimizer,
    skipped_out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        if o.inner.needs_closure() {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                format!("GradScaler.step does not support {}, whose step needs a closure", o.inner.name()),
            ));
        }
        let made = handle::borrow_mut(scaler, "scaler")?.inner.step(o.id as usize, &mut *o.inner)?;
        if !skipped_out.is_null() {
            skipped_out.write(!made.read()?);
        }
        Ok(())
    })
}

/// `scaler.update()`: halves the scale (backoff_factor) after an inf/NaN
/// gradient in this iteration, or grows it (growth_factor) after
/// growth_interval clean iterations.
///
/// Errors: FULMEN_CODE_INVALID_STATE (no optimizer was unscaled or stepped
/// since the last update).
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_update(scaler: *mut fulmen_grad_scaler) -> *mut fulmen_error {
    guard!(|| handle::borrow_mut(scaler, "scaler")?.inner.update())
}

/// Writes the current scale (`scaler.get_scale()`).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_get_scale(
    scaler: *const fulmen_grad_scaler,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", handle::borrow(scaler, "scaler")?.inner.get_scale()?))
}

/// The most bytes a saved scaler state may have.
const MAX_STATE_LEN: usize = 4096;

/// Copies the scaler's `state_dict()` (`scale`, `growth_factor`,
/// `backoff_factor`, `growth_interval`, `_growth_tracker`) as a JSON object
/// into `buf` as for `fulmen_model_state_dict_name`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`buf` too small; `*len_out` is still
/// written).
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_state_save(
    scaler: *const fulmen_grad_scaler,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let state: BTreeMap<String, f64> = handle::borrow(scaler, "scaler")?.inner.state_dict()?.into_iter().collect();
        let json = serde_json::to_string(&state).map_err(|e| Error::format(format!("GradScaler state: {e}")))?;
        copy_str(&json, buf, capacity, len_out)
    })
}

/// Restores a state written by `fulmen_grad_scaler_state_save`
/// (`scaler.load_state_dict`); every key is required. Nothing changes on
/// error.
///
/// Errors: FULMEN_CODE_FORMAT (not a JSON object of numbers, a missing key,
/// a value the scaler refuses, longer than 4096 bytes).
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_state_load(
    scaler: *mut fulmen_grad_scaler,
    state: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let text = str_arg(state, "state")?;
        if text.len() > MAX_STATE_LEN {
            return Err(Error::format(format!(
                "GradScaler state is {} bytes; at most {MAX_STATE_LEN} are accepted",
                text.len()
            )));
        }
        let map: BTreeMap<String, f64> = serde_json::from_str(text)
            .map_err(|e| Error::format(format!("GradScaler state is not a JSON object of numbers: {e}")))?;
        let pairs: Vec<(String, f64)> = map.into_iter().collect();
        handle::borrow_mut(scaler, "scaler")?.inner.load_state_dict(&pairs)
    })
}

/// Frees a loss scaler. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_grad_scaler_free(scaler: *mut fulmen_grad_scaler) {
    handle::free(scaler);
}
