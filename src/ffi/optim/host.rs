//! `fulmen_optimizer_host_new`: an optimizer whose update is the host's
//! code (a vtable), usable wherever a built-in `fulmen_optimizer` is; the
//! context its `step` reads the parameter groups through; and the state
//! files of optimizers and schedulers outside a trainer.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host, read_vtable, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, write_out, Handle};
use crate::ffi::data::batch::with_temp_handle;
use crate::ffi::nn::model::fulmen_model;
use crate::ffi::optim::optimizers::{collect_params, emit_optimizer, fulmen_optimizer};
use crate::ffi::tensor::handle::{emit, fulmen_tensor};
use crate::optim::{HostOptimizer, HostRule, ParamGroup};
use std::ffi::{c_char, c_void};
use std::path::Path;

/// The most bytes a host optimizer's `state_dict` may write, and a
/// checkpoint may hold for it (1 GiB).
pub const FULMEN_MAX_OPTIMIZER_STATE: usize = 1 << 30;

/// The context of one call of `fulmen_optimizer_vtable.step`: the
/// optimizer's parameter groups, read with
/// `fulmen_optimizer_step_context_*`. Borrowed: valid only during that
/// call.
pub struct fulmen_optimizer_step_context {
    groups: *const [ParamGroup],
}

impl Handle for fulmen_optimizer_step_context {
    const C_NAME: &'static str = "fulmen_optimizer_step_context";
}

/// The host's optimizer (torch's `Optimizer` subclass with its own `step`).
/// Set `struct_size` to `sizeof(fulmen_optimizer_vtable)`. Every callback
/// runs on the thread that steps the optimizer (the trainer's, or the
/// host's loop); tensors a callback creates are released when it returns,
/// except those kept with `fulmen_tensor_keep`.
#[repr(C)]
pub struct fulmen_optimizer_vtable {
    /// `sizeof(fulmen_optimizer_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when the optimizer is freed; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// `optimizer.step()` (required): updates the parameters in place from
    /// their gradients, reading them and each group's hyperparameters
    /// (`lr` as the schedulers set it) through `ctx`. Runs under no_grad.
    /// An error ends the step (and a fit) with its code.
    pub step: Option<
        unsafe extern "C" fn(userdata: *mut c_void, ctx: *const fulmen_optimizer_step_context) -> *mut fulmen_error,
    >,
    /// `optimizer.zero_grad(set_to_none)`: clears the gradients (the
    /// trainer and `fulmen_optimizer_zero_grad` pass `set_to_none` true,
    /// torch's default). NULL: fulmen sets every gradient to none itself.
    /// An error ends the call that cleared the gradients (a fit, a manual
    /// step's `zero_grad`, `fulmen_optimizer_zero_grad`), or else the
    /// optimizer's next step.
    pub zero_grad: Option<unsafe extern "C" fn(userdata: *mut c_void, set_to_none: bool) -> *mut fulmen_error>,
    /// `optimizer.state_dict()`'s own part: writes to `*data` and `*len`
    /// the bytes of the host's state (at most FULMEN_MAX_OPTIMIZER_STATE),
    /// which must stay valid until the call returns (fulmen copies them
    /// then); `*len` 0 saves nothing. Saved with the param groups in every
    /// checkpoint (a `host_state` entry: uint8 tensor in fulmen's format, a
    /// `bytes` entry of the optimizer's state under `optimizer_states` in
    /// Lightning's) and by `fulmen_optimizer_save_state`. May be NULL.
    pub state_dict:
        Option<unsafe extern "C" fn(userdata: *mut c_void, data: *mut *const u8, len: *mut usize) -> *mut fulmen_error>,
    /// `optimizer.load_state_dict()`'s own part: the bytes `state_dict`
    /// saved (`len` 0 when none were), `data` valid during the call only.
    /// Called on resume and by `fulmen_optimizer_load_state`, after the
    /// param groups were read and before they are kept: an error leaves
    /// them as they were. May be NULL (then a state holding bytes is
    /// refused).
    pub load_state_dict:
        Option<unsafe extern "C" fn(userdata: *mut c_void, data: *const u8, len: usize) -> *mut fulmen_error>,
}

type StepFn = unsafe extern "C" fn(*mut c_void, *const fulmen_optimizer_step_context) -> *mut fulmen_error;
type ZeroGradFn = unsafe extern "C" fn(*mut c_void, bool) -> *mut fulmen_error;
type StateDictFn = unsafe extern "C" fn(*mut c_void, *mut *const u8, *mut usize) -> *mut fulmen_error;
type LoadStateDictFn = unsafe extern "C" fn(*mut c_void, *const u8, usize) -> *mut fulmen_error;

/// The vtable's callbacks as the core's [`HostRule`].
struct VtableRule {
    userdata: Userdata,
    step: StepFn,
    zero_grad: Option<ZeroGradFn>,
    state_dict: Option<StateDictFn>,
    load_state_dict: Option<LoadStateDictFn>,
}

impl HostRule for VtableRule {
    fn step(&mut self, groups: &[ParamGroup]) -> Result<()> {
        let (f, ud) = (self.step, self.userdata.ptr());
        let ctx = fulmen_optimizer_step_context { groups: std::ptr::from_ref(groups) };
        // SAFETY: the host's function with its own userdata, on this
        // thread; the context is revoked when it returns, while `groups`
        // is still borrowed.
        with_temp_handle(ctx, |c| call_host("fulmen_optimizer_vtable.step", || unsafe { f(ud, c) })).1
    }

    fn has_zero_grad(&self) -> bool {
        self.zero_grad.is_some()
    }

    fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        let Some(f) = self.zero_grad else { return Ok(()) };
        let ud = self.userdata.ptr();
        // SAFETY: the host's function with its own userdata, on this thread.
        call_host("fulmen_optimizer_vtable.zero_grad", || unsafe { f(ud, set_to_none) })
    }

    fn state(&self) -> Result<Vec<u8>> {
        let Some(f) = self.state_dict else { return Ok(Vec::new()) };
        let ud = self.userdata.ptr();
        let (mut data, mut len): (*const u8, usize) = (std::ptr::null(), 0);
        // SAFETY: the host's function with its own userdata, on this thread.
        call_host("fulmen_optimizer_vtable.state_dict", || unsafe { f(ud, &mut data, &mut len) })?;
        if len == 0 {
            return Ok(Vec::new());
        }
        if len > FULMEN_MAX_OPTIMIZER_STATE {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!(
                    "fulmen_optimizer_vtable.state_dict wrote *len = {len}; a host optimizer's state is at most \
                     {FULMEN_MAX_OPTIMIZER_STATE} bytes"
                ),
            ));
        }
        if data.is_null() {
            return Err(Error::new(
                ErrorCode::Callback,
                format!("fulmen_optimizer_vtable.state_dict wrote *len = {len} and *data NULL"),
            ));
        }
        // SAFETY: the host promises `len` readable bytes at `data` until
        // its call returned; they are copied before anything else runs.
        Ok(unsafe { std::slice::from_raw_parts(data, len) }.to_vec())
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(f) = self.load_state_dict else {
            if bytes.is_empty() {
                return Ok(());
            }
            return Err(Error::format(format!(
                "the state holds {} bytes of a host optimizer's own state, and this one has no load_state_dict",
                bytes.len()
            )));
        };
        let ud = self.userdata.ptr();
        // SAFETY: the host's function with its own userdata, on this
        // thread; `bytes` outlives the call.
        call_host("fulmen_optimizer_vtable.load_state_dict", || unsafe { f(ud, bytes.as_ptr(), bytes.len()) })
    }
}

/// Creates an optimizer whose step is the host's `vtable` (copied) over
/// `model`'s parameters (if not NULL) and `params[0..n_params]`, in one
/// parameter group with learning rate `lr` (weight_decay and momentum 0;
/// change them, or add groups, as for any optimizer). It is a
/// `fulmen_optimizer` like the built-in ones: for
/// `fulmen_optimizer_config_add` with schedulers (which set the `lr` the
/// step reads), manual optimization, host loops (`fulmen_optimizer_step`,
/// `fulmen_optimizer_zero_grad`), checkpoints and resuming, and
/// `fulmen_optimizer_save_state`. Its param groups are saved as
/// torch's (`lr`, `weight_decay`, `momentum`, `params`), its kind as
/// "host". On failure `userdata_free` is not called.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`vtable` or `out` NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (`struct_size` smaller than the first
/// vtable, `step` NULL, `lr` negative or not finite, no parameters, a
/// tensor in `params` that does not require grad, a parameter listed
/// twice), FULMEN_CODE_DTYPE_MISMATCH (a complex parameter).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_host_new(
    vtable: *const fulmen_optimizer_vtable,
    model: *const fulmen_model,
    params: *const *const fulmen_tensor,
    n_params: usize,
    lr: f64,
    out: *mut *mut fulmen_optimizer,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check_out(out, "out")?;
        let v = read_vtable(vtable, std::mem::size_of::<fulmen_optimizer_vtable>(), "fulmen_optimizer_vtable")?;
        let step = v.step.ok_or_else(|| Error::invalid("fulmen_optimizer_vtable.step is NULL"))?;
        let p = collect_params(model, params, n_params)?;
        emit_optimizer(out, || {
            let rule = || -> Box<dyn HostRule> {
                Box::new(VtableRule {
                    userdata: Userdata::new(v.userdata, v.userdata_free),
                    step,
                    zero_grad: v.zero_grad,
                    state_dict: v.state_dict,
                    load_state_dict: v.load_state_dict,
                })
            };
            Ok(Box::new(HostOptimizer::new(p, lr, rule)?))
        })
    })
}

/// The groups a step context reads (shared pin on the handle).
unsafe fn groups<'a>(ctx: *const fulmen_optimizer_step_context) -> Result<handle::Shared<'a, [ParamGroup]>> {
    // SAFETY: the context lives only during the step, which borrows the
    // groups for that long.
    Ok(handle::borrow(ctx, "ctx")?.map(|h| unsafe { &*h.groups }))
}

/// Group `group` of `groups`, or FULMEN_CODE_OUT_OF_RANGE.
fn group_at(groups: &[ParamGroup], group: usize) -> Result<&ParamGroup> {
    groups.get(group).ok_or_else(|| {
        Error::new(ErrorCode::OutOfRange, format!("param group {group} of an optimizer with {}", groups.len()))
    })
}

/// Writes the number of parameter groups of the stepping optimizer.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_step_context_group_count(
    ctx: *const fulmen_optimizer_step_context,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let g = groups(ctx)?;
        write_out(out, "out", g.len())
    })
}

/// Writes the number of parameters of group `group`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`group` >= the group count).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_step_context_param_count(
    ctx: *const fulmen_optimizer_step_context,
    group: usize,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let g = groups(ctx)?;
        write_out(out, "out", group_at(&g, group)?.params.len())
    })
}

/// Writes to `*out` parameter `index` of group `group`: a tensor handle
/// sharing storage and gradient (`fulmen_tensor_grad`) with the model's
/// parameter, released when the step returns. Update it in place
/// (`fulmen_tensor_add_`, `fulmen_tensor_copy_`, ...); its gradient is
/// NULL for a parameter that got none (torch skips those).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`group` or `index` beyond the counts).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_step_context_param(
    ctx: *const fulmen_optimizer_step_context,
    group: usize,
    index: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let g = groups(ctx)?;
        let params = &group_at(&g, group)?.params;
        let p = params.get(index).ok_or_else(|| {
            Error::new(
                ErrorCode::OutOfRange,
                format!("parameter {index} of param group {group}, which has {}", params.len()),
            )
        })?;
        emit(out, p.shallow_clone())
    })
}

/// Writes the hyperparameter `name` of group `group`: `"lr"` (as the
/// schedulers set it), `"weight_decay"`, `"momentum"` (what a cycling
/// scheduler cycles), or `"initial_lr"` (the lr a scheduler recorded when
/// attached; FULMEN_CODE_INVALID_STATE before any was).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (another name),
/// FULMEN_CODE_OUT_OF_RANGE (`group` >= the group count),
/// FULMEN_CODE_INVALID_STATE (`"initial_lr"` unset).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_step_context_get(
    ctx: *const fulmen_optimizer_step_context,
    group: usize,
    name: *const c_char,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(name, "name")?;
        let g = groups(ctx)?;
        let g = group_at(&g, group)?;
        let v = match name {
            "lr" => g.lr,
            "weight_decay" => g.weight_decay,
            "momentum" => g.momentum,
            "initial_lr" => g.initial_lr.ok_or_else(|| {
                Error::state(format!("param group {group} has no initial_lr (no scheduler was attached)"))
            })?,
            _ => {
                return Err(Error::invalid(format!(
                    "a host optimizer's param groups have no {name:?}: their keys are \"lr\", \"weight_decay\", \
                     \"momentum\", \"initial_lr\""
                )))
            }
        };
        write_out(out, "out", v)
    })
}

/// Saves the optimizer's state (`optimizer.state_dict()`: param groups,
/// per-parameter buffers, a host optimizer's bytes) at `path` without a
/// trainer: a safetensors file laid out as fulmen's checkpoints, written
/// atomically.
///
/// Errors: FULMEN_CODE_IO (the file cannot be written), a host
/// optimizer's `state_dict` error, FULMEN_CODE_OUT_OF_RANGE (it wrote more
/// than FULMEN_MAX_OPTIMIZER_STATE bytes).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_save_state(
    optimizer: *const fulmen_optimizer,
    path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let path = str_arg(path, "path")?;
        let o = handle::borrow(optimizer, "optimizer")?;
        crate::optim::state_file::save_optimizer(o.inner.as_ref(), Path::new(path))
    })
}

/// Loads into the optimizer the state `fulmen_optimizer_save_state` wrote
/// for an optimizer of the same kind and parameter groups. On error the
/// optimizer is unchanged.
///
/// Errors: FULMEN_CODE_IO (the file cannot be read; not a regular file),
/// FULMEN_CODE_FORMAT (not an optimizer state, another kind's, other
/// groups, a malformed entry), FULMEN_CODE_SHAPE_MISMATCH (a buffer whose
/// shape is not its parameter's), a host optimizer's `load_state_dict`
/// error.
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_load_state(
    optimizer: *mut fulmen_optimizer,
    path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let path = str_arg(path, "path")?;
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        crate::optim::state_file::load_optimizer(o.inner.as_mut(), Path::new(path))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_c_limit_is_the_core_limit() {
        assert_eq!(super::FULMEN_MAX_OPTIMIZER_STATE, crate::optim::MAX_OPTIMIZER_STATE);
    }
}
