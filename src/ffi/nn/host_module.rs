//! Modules defined by the host: a forward pass written as a C callback,
//! usable as a child in containers, and parameters and buffers registered
//! on any module.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{check_struct_size, host_result, HostCallTimer, HostLock, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{check_out, write_out, Handle};
use crate::ffi::data::batch::with_temp_handle;
use crate::ffi::nn::model::{emit_model, fulmen_model, lock, model_arg};
use crate::ffi::tensor::handle::{fulmen_tensor, new_handle, tensor_arg};
use crate::ffi::tensor::TensorScope;
use crate::nn::{HostForward, Module};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// The most results a host forward returns.
pub const FULMEN_MAX_HOST_OUTPUTS: usize = 16;

/// A host module's forward pass. Set `struct_size` to
/// `sizeof(fulmen_host_module_vtable)`.
#[repr(C)]
pub struct fulmen_host_module_vtable {
    /// `sizeof(fulmen_host_module_vtable)`.
    pub struct_size: usize,
    /// Passed to `forward`.
    pub userdata: *mut c_void,
    /// Called once when the module is dropped; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// How many tensors `forward` writes (1..=FULMEN_MAX_HOST_OUTPUTS).
    pub num_outputs: usize,
    /// The forward pass: reads `inputs[0..n_inputs]` (borrowed; NULL for a
    /// left-out one), reaches the module's tensors and children through
    /// `call` (borrowed, valid during the call), and writes `num_outputs`
    /// new tensors to `outs[0..num_outputs]`. Tensors it makes are released
    /// when it returns; fulmen takes what it wrote to `outs` first.
    /// Required.
    pub forward: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            call: *mut fulmen_host_call,
            inputs: *const *const fulmen_tensor,
            n_inputs: usize,
            outs: *mut *mut fulmen_tensor,
        ) -> *mut fulmen_error,
    >,
}

type ForwardFn = unsafe extern "C" fn(
    *mut c_void,
    *mut fulmen_host_call,
    *const *const fulmen_tensor,
    usize,
    *mut *mut fulmen_tensor,
) -> *mut fulmen_error;

/// The module a host forward runs for: its tensors, children and mode.
/// Borrowed: valid only during the forward callback.
pub struct fulmen_host_call {
    module: *const Module,
    /// The token of the thread running the forward (it and the threads
    /// attached to the forward are the ones that may use the call).
    thread: usize,
}

impl Handle for fulmen_host_call {
    const C_NAME: &'static str = "fulmen_host_call";
}

/// The vtable as a core forward pass.
struct CallbackForward {
    userdata: HostLock<Userdata>,
    forward: ForwardFn,
    num_outputs: usize,
}

impl std::fmt::Debug for CallbackForward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackForward").field("num_outputs", &self.num_outputs).finish()
    }
}

// SAFETY: the host promises (in the header) that its forward may run on
// the threads that run the model; `HostLock` serialises the calls.
unsafe impl Sync for CallbackForward {}

impl HostForward for CallbackForward {
    fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    fn forward(&self, module: &Module, inputs: &[Option<&tch::Tensor>]) -> Result<Vec<tch::Tensor>> {
        let userdata = self.userdata.lock("the host module")?;
        let _scope = TensorScope::enter();
        let handles: Vec<*const fulmen_tensor> =
            inputs.iter().map(|t| t.map_or(std::ptr::null(), |t| new_handle(t.shallow_clone()).cast_const())).collect();
        let mut outs: Vec<*mut fulmen_tensor> = vec![std::ptr::null_mut(); self.num_outputs];
        let timer = HostCallTimer::start();
        let (_, err) =
            with_temp_handle(fulmen_host_call { module, thread: crate::thread_token::thread_token() }, |call| {
                // SAFETY: the host's callback with live, borrowed handles.
                unsafe { (self.forward)(userdata.ptr(), call, handles.as_ptr(), handles.len(), outs.as_mut_ptr()) }
            });
        host_result(err, || "the host forward".to_string())?;
        timer.check(|| "the host forward".to_string())?;
        outs.iter()
            .enumerate()
            .map(|(i, p)| {
                // SAFETY: checked to be a live tensor handle before use.
                unsafe { tensor_arg(*p, "outs") }.map(|t| t.shallow_clone()).map_err(|e| {
                    Error::new(
                        ErrorCode::Callback,
                        format!("the host forward wrote no valid tensor to outs[{i}]: {}", e.message),
                    )
                })
            })
            .collect()
    }
}

/// Creates a host module: a named container whose forward pass is the
/// vtable's `forward` (so it runs as a child of a Sequential or through
/// `fulmen_model_forward_multi`). Add children with `fulmen_model_add` and
/// tensors with `fulmen_model_register_parameter` / `_buffer`; the
/// callback reaches them through its `fulmen_host_call`. On failure the
/// userdata is not freed.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (struct_size too small, no
/// `forward`, `num_outputs` outside 1..=FULMEN_MAX_HOST_OUTPUTS).
/// Thread rules: `forward` runs on the thread that runs the model, one
/// call at a time; a call into the same model from inside it is refused
/// with FULMEN_CODE_INVALID_STATE.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_host_new(
    vtable: *const fulmen_host_module_vtable,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        if vtable.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "argument `vtable` is NULL"));
        }
        let size = std::ptr::read_unaligned(vtable.cast::<usize>());
        check_struct_size(size, std::mem::size_of::<fulmen_host_module_vtable>(), "fulmen_host_module_vtable")?;
        let v = &*vtable;
        let forward = v.forward.ok_or_else(|| Error::invalid("fulmen_host_module_vtable.forward is NULL"))?;
        if v.num_outputs == 0 || v.num_outputs > FULMEN_MAX_HOST_OUTPUTS {
            return Err(Error::invalid(format!(
                "fulmen_host_module_vtable.num_outputs is {}, it must be 1..={FULMEN_MAX_HOST_OUTPUTS}",
                v.num_outputs
            )));
        }
        let fwd = CallbackForward {
            userdata: HostLock::new(Userdata::new(v.userdata, v.userdata_free)),
            forward,
            num_outputs: v.num_outputs,
        };
        emit_model(out, Ok(Module::host(Arc::new(fwd))))
    })
}

/// Registers `tensor` as a trainable parameter `name` of the module at the
/// dotted `path` (NULL or "" for the model itself), like
/// `register_parameter`: it shares `tensor`'s storage (detached,
/// requires_grad), comes after the module's own parameters in the
/// state_dict (so it is saved, loaded and checkpointed), moves with the
/// model, is broadcast and gradient-synced by DDP and counted in the
/// summary; optimizers built on the model afterwards train it. A tensor
/// that already is a parameter of the model (registered before, under
/// any path, or read from it: the same storage, shape, strides and dtype)
/// is tied, as PyTorch's one `Parameter` under two names: both names are
/// the same tensor, listed once by `fulmen_model_parameters` (under the
/// first name) and counted once, each in the state_dict; saving and
/// loading keep them one tensor.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a name that is empty, has a '.',
/// or is taken; no such child; a path or name not UTF-8; the tensor is a
/// buffer of the model, or another view of one of its parameters),
/// FULMEN_CODE_DTYPE_MISMATCH (not a floating tensor),
/// FULMEN_CODE_UNSUPPORTED (a TorchScript module: register in Python).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_register_parameter(
    model: *mut fulmen_model,
    path: *const c_char,
    name: *const c_char,
    tensor: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| register(model, path, name, tensor, true))
}

/// Registers `tensor` as a buffer `name` (state that is not trained:
/// running statistics, masks, counters) of the module at `path`, like
/// `register_buffer`: it shares `tensor`'s storage (detached), comes after
/// the module's own buffers in the state_dict, moves with the model and is
/// broadcast by DDP. A tensor that already is a buffer of the model is
/// tied, as for parameters.
///
/// Errors: as `fulmen_model_register_parameter`, without the dtype rule
/// (the tensor is a parameter of the model, or another view of a buffer).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_register_buffer(
    model: *mut fulmen_model,
    path: *const c_char,
    name: *const c_char,
    tensor: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| register(model, path, name, tensor, false))
}

unsafe fn register(
    model: *mut fulmen_model,
    path: *const c_char,
    name: *const c_char,
    tensor: *const fulmen_tensor,
    parameter: bool,
) -> Result<()> {
    let m = model_arg(model, "model")?;
    let path = if path.is_null() { "" } else { str_arg(path, "path")? };
    let name = str_arg(name, "name")?;
    let t = tensor_arg(tensor, "tensor")?;
    let mut g = lock(&m)?;
    if parameter {
        g.register_parameter_at(path, name, &t)
    } else {
        g.register_buffer_at(path, name, &t)
    }
}

/// The running module, pinned for the caller's call (so the callback
/// cannot return, and the module be freed, while it is in use). Only the
/// thread running the forward, and threads attached to the forward
/// (`fulmen_callback_attach`), may use it.
unsafe fn call_module<'a>(call: *const fulmen_host_call) -> Result<crate::ffi::base::handle::Shared<'a, Module>> {
    let c = crate::ffi::base::handle::borrow(call, "call")?;
    if !crate::thread_token::held_by_this_work(c.thread) {
        return Err(Error::state(
            "a fulmen_host_call is usable only on the thread running its forward callback and on threads \
             attached to that callback (fulmen_callback_attach)",
        ));
    }
    // SAFETY: the module outlives the temporary call handle, which the pin keeps alive.
    Ok(c.map(|h| unsafe { &*h.module }))
}

/// Writes a new handle to the tensor `name` of the running module: one it
/// registered ("scale") or one of a child ("encoder.weight"), by
/// state_dict name. It shares storage and autograd history.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (no such tensor; not UTF-8),
/// FULMEN_CODE_INVALID_STATE (called from another thread than the forward's
/// or one attached to it).
#[no_mangle]
pub unsafe extern "C" fn fulmen_host_call_get(
    call: *const fulmen_host_call,
    name: *const c_char,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let name = str_arg(name, "name")?;
        let m = call_module(call)?;
        let found = m.state_dict().into_iter().find(|(k, _)| k == name);
        match found {
            Some((_, t)) => {
                out.write(new_handle(t));
                Ok(())
            }
            None => Err(Error::invalid(format!("the host module has no tensor named {name:?}"))),
        }
    })
}

/// Runs the running module's child at the dotted `path` (NULL or "" is
/// the module itself, which refuses the re-entry) on
/// `inputs[0..n_inputs]` (NULL for a left-out one), as
/// `fulmen_model_forward_multi` does: the result count goes to
/// `*count_out`, and more than `capacity` fails before running.
///
/// Errors: as `fulmen_model_forward_multi`, and FULMEN_CODE_INVALID_STATE
/// (called from another thread than the forward's or one attached to it).
#[no_mangle]
pub unsafe extern "C" fn fulmen_host_call_forward_child(
    call: *const fulmen_host_call,
    path: *const c_char,
    inputs: *const *const fulmen_tensor,
    n_inputs: usize,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let m = call_module(call)?;
        let path = if path.is_null() { "" } else { str_arg(path, "path")? };
        crate::ffi::nn::model::forward_multi_into(&m, path, inputs, n_inputs, outs, capacity, count_out)
    })
}

/// Writes whether the running module is in training mode (for dropout and
/// the like in the host's own forward).
///
/// Errors: FULMEN_CODE_INVALID_STATE (called from another thread than the
/// forward's or one attached to it).
#[no_mangle]
pub unsafe extern "C" fn fulmen_host_call_is_training(
    call: *const fulmen_host_call,
    out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", call_module(call)?.is_training()))
}
