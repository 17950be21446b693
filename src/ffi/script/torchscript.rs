//! TorchScript models from C: loading onto a device, calling any scripted
//! method on values, saving back to `.pt`; moving and casting any model.
use crate::error::Error;
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::check_out;
use crate::ffi::nn::model::{emit_model, fulmen_model, in_child, lock, model_arg};
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_list};
use crate::ffi::value::{emit_value, fulmen_value, value_list};
use crate::nn::{Module, MAX_METHOD_ARGS, MAX_TRACE_INPUTS};
use crate::tensor::device::DeviceSpec;
use crate::tensor::dtype::DType;
use std::ffi::c_char;
use std::path::Path;

/// The most arguments `fulmen_model_call_method` passes.
pub const FULMEN_MAX_METHOD_ARGS: usize = 64;
const _: () = assert!(FULMEN_MAX_METHOD_ARGS == MAX_METHOD_ARGS);

/// Loads a TorchScript module saved by `torch.jit.save` with its tensors
/// on the device `device_type` (a `fulmen_device_type`) / `device_index`.
/// Parameters and buffers keep PyTorch's dotted names and state_dict order.
/// The module starts in training mode.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (path is not UTF-8, a bad device),
/// FULMEN_CODE_UNAVAILABLE (no such device here), FULMEN_CODE_IO (no file at
/// path, or not a regular file), FULMEN_CODE_FORMAT (not a loadable TorchScript file),
/// FULMEN_CODE_TORCH (its tensors or mode cannot be read or set).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_load_torchscript_on(
    path: *const c_char,
    device_type: i32,
    device_index: i64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let p = str_arg(path, "path")?;
        let device = DeviceSpec::from_c(device_type, device_index)?.to_tch()?;
        emit_model(out, Module::load_torchscript(Path::new(p), device))
    })
}

/// Calls the scripted method `method` ("forward", "training_step", any
/// `@torch.jit.export`ed one) of a TorchScript model, or the program
/// `method` of an exported one (`fulmen_model_load_exported`; its
/// arguments flatten as the program was exported, its buffer updates are
/// written back), or of the one at the
/// dotted child `path` (NULL or "" for the model itself), with positional
/// arguments `args[0..n_args]` (borrowed), and writes its result as a new
/// value. Arguments are checked against the method's signature; lists are
/// typed by their items, so a list of tensors is a `List[Tensor]`. Results
/// that hold other things than tensors, None, bools, ints, floats,
/// strings, tuples, lists and dicts (script objects, devices) are refused,
/// and so are results, like arguments, of more than FULMEN_MAX_VALUE_NODES
/// values. Under autograd like any op: a loss from `training_step` has a gradient
/// path to the parameters.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (method or path not UTF-8, no such
/// child or method (the message lists the module's methods), more than
/// FULMEN_MAX_METHOD_ARGS arguments, values nested deeper than FULMEN_MAX_VALUE_DEPTH,
/// dict keys of mixed kinds), FULMEN_CODE_UNSUPPORTED (the module is neither
/// TorchScript nor exported, or a result has no host form), FULMEN_CODE_OUT_OF_RANGE
/// (the result holds more than FULMEN_MAX_VALUE_NODES values, counted as
/// for the arguments: refused before it is copied), FULMEN_CODE_TORCH (the
/// arguments do not match the signature, or the method raised).
/// Thread rules: as `fulmen_model_forward` (the model is locked for the call).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_call_method(
    model: *const fulmen_model,
    path: *const c_char,
    method: *const c_char,
    args: *const *const fulmen_value,
    n_args: usize,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let m = model_arg(model, "model")?;
        let path = if path.is_null() { "" } else { str_arg(path, "path")? };
        let method = str_arg(method, "method")?;
        if n_args > MAX_METHOD_ARGS {
            return Err(Error::invalid(format!(
                "call_method: {n_args} arguments, at most FULMEN_MAX_METHOD_ARGS ({MAX_METHOD_ARGS})"
            )));
        }
        let values = value_list(args, n_args, "args")?;
        let result = {
            let guard = lock(&m)?;
            guard.child(path)?.call_method(method, &values).map_err(|e| in_child(e, path))?
        };
        emit_value(out, result)
    })
}

/// Saves a TorchScript model (or the one at the dotted child `path`, NULL
/// or "" for the model itself) with its current parameters, buffers and
/// mode as a `.pt` file that PyTorch's `torch.jit.load` reads; written to a
/// temporary file and renamed, so a crash never leaves a partial file.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a path not UTF-8, no such child),
/// FULMEN_CODE_UNSUPPORTED (not a TorchScript module), FULMEN_CODE_IO (the
/// file cannot be written), FULMEN_CODE_TORCH (serialisation failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_save_torchscript(
    model: *const fulmen_model,
    path: *const c_char,
    file: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let m = model_arg(model, "model")?;
        let path = if path.is_null() { "" } else { str_arg(path, "path")? };
        let file = str_arg(file, "file")?;
        let guard = lock(&m)?;
        guard.child(path)?.save_torchscript(Path::new(file)).map_err(|e| in_child(e, path))
    })
}

/// The most example inputs `fulmen_model_to_torchscript` takes.
pub const FULMEN_MAX_TRACE_INPUTS: usize = 16;
const _: () = assert!(FULMEN_MAX_TRACE_INPUTS == MAX_TRACE_INPUTS);

/// Traces the model's forward on `example_inputs[0..n_inputs]` (borrowed)
/// into a new TorchScript model, as Lightning's
/// `to_torchscript(method="trace")` runs `torch.jit.trace`: the model is
/// put in evaluation mode and run once with gradients off while libtorch
/// records its ops (fulmen's layers, host forward callbacks, TorchScript
/// and exported programs alike), then put back in its mode. The new model
/// holds copies of the parameters and buffers under their state_dict names
/// (tied ones stay tied), its `forward` is the recorded graph (one tensor,
/// or a tuple when the forward gives several, as
/// `fulmen_model_forward_multi`), and it starts in evaluation mode. Save it
/// with `fulmen_model_save_torchscript` for PyTorch's `torch.jit.load` or
/// libtorch's `torch::jit::load`. The trace is only as general as one run:
/// control flow that depends on values, and tensors made on the host, are
/// frozen as they were for these inputs. After the trace, the new model
/// runs the example inputs and must give the forward's results (within
/// 1e-5), else the call fails. The caller owns `*out`.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (no
/// input or more than FULMEN_MAX_TRACE_INPUTS), FULMEN_CODE_INVALID_STATE
/// (the model is on the meta device, or a host callback called this
/// inside a trace, or a thread attached to a callback of the traced
/// forward (`fulmen_callback_attach`), whose ops the trace could not
/// record), FULMEN_CODE_UNSUPPORTED (the traced forward does not give the
/// model's results on the example inputs), the forward's own errors (as
/// `fulmen_model_forward_multi`), FULMEN_CODE_TORCH (the tracer refused
/// an op). On error `*out` is not written and the model is as it was.
/// Thread rules: the model is locked for the call; the forward runs on
/// the calling thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_to_torchscript(
    model: *const fulmen_model,
    example_inputs: *const *const fulmen_tensor,
    n_inputs: usize,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let m = model_arg(model, "model")?;
        if n_inputs > MAX_TRACE_INPUTS {
            return Err(Error::invalid(format!(
                "to_torchscript: {n_inputs} example inputs, at most FULMEN_MAX_TRACE_INPUTS ({MAX_TRACE_INPUTS})"
            )));
        }
        let held = tensor_list(example_inputs, n_inputs, "example_inputs")?;
        let inputs: Vec<tch::Tensor> = held.iter().map(|t| t.shallow_clone()).collect();
        let traced = lock(&m)?.to_torchscript(&inputs);
        emit_model(out, traced)
    })
}

/// Moves every parameter and buffer of the model to the device
/// `device_type` (a `fulmen_device_type`) / `device_index`, in place: the
/// parameters stay the same tensors (handles to them, and optimizers
/// built on them, follow), except where libtorch cannot change a tensor's
/// type in place (the CPU and XLA): the model then holds new tensors, as
/// PyTorch's `module.to` makes new Parameters, and optimizers must be
/// built after the move (the trainer's `configure_optimizers` is). The
/// trainer moves the model itself.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a bad device),
/// FULMEN_CODE_UNAVAILABLE (no such device here), FULMEN_CODE_TORCH (a
/// copy failed) or FULMEN_CODE_OUT_OF_MEMORY.
/// Thread rules: the model is locked for the call.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_to_device(
    model: *mut fulmen_model,
    device_type: i32,
    device_index: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let device = DeviceSpec::from_c(device_type, device_index)?.to_device()?;
        lock(&*model_arg(model, "model")?)?.to_device(device)
    })
}

/// Casts the floating-point parameters and buffers of the model to the
/// floating `dtype` (a `fulmen_dtype`), in place; integer buffers such as
/// `num_batches_tracked` keep theirs.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (not a fulmen_dtype, or not a
/// floating one), FULMEN_CODE_TORCH (a cast failed).
/// Thread rules: the model is locked for the call.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_to_dtype(model: *mut fulmen_model, dtype: i32) -> *mut fulmen_error {
    guard!(|| {
        let kind = DType::from_i32(dtype)?.kind();
        lock(&*model_arg(model, "model")?)?.to_kind(kind)
    })
}
