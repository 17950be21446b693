//! Programs exported with `torch.export` (`.pt2` archives) as models from C.
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::check_out;
use crate::ffi::nn::model::{emit_model, fulmen_model};
use crate::nn::Module;
use crate::tensor::device::DeviceSpec;
use std::ffi::c_char;
use std::path::Path;

/// Loads a `.pt2` archive written by `torch.export.save` (one program,
/// run by `fulmen_model_forward`) or by `package_pt2` with named programs
/// ("training_step", "validation_step", "predict_step", "forward", any
/// other), with its tensors on the CPU. The programs share one state by
/// name: parameters and buffers keep PyTorch's dotted names and
/// state_dict order, and tied weights (one tensor under two names) are one
/// tensor. Call a program with `fulmen_model_call_method(model, NULL,
/// "training_step", args, n, &out)`: the arguments are nested as the
/// program was exported (a batch tuple or list of tensors), the result
/// comes back as it was returned (a tensor, a tuple, a dict such as
/// {"loss": ...}), under autograd; buffers the program updates (BatchNorm
/// statistics) are written back after the call. Each program keeps the
/// mode (train or eval) it was exported in. Every operator is resolved at
/// load; the archive is read whole and closed. `*out` is a new handle the
/// caller frees with `fulmen_model_free`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (path is not UTF-8, out is NULL),
/// FULMEN_CODE_IO (no file at path, or not a regular file),
/// FULMEN_CODE_FORMAT (not a torch.export archive, or a broken one: bad
/// JSON, a value used before it is defined, a stored tensor larger than
/// its file), FULMEN_CODE_UNSUPPORTED (an operator this process does not
/// have, such as a custom operator registered only in Python, a
/// higher-order operator, a pickled tensor subclass, keyword inputs).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_load_exported(
    path: *const c_char,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let p = str_arg(path, "path")?;
        emit_model(out, Module::load_exported(Path::new(p), tch::Device::Cpu))
    })
}

/// `fulmen_model_load_exported` with the tensors on the device
/// `device_type` (a `fulmen_device_type`) / `device_index`. Device
/// arguments inside the programs (`torch.arange(..., device=...)`) follow
/// the model's device.
///
/// Errors: as `fulmen_model_load_exported`, and FULMEN_CODE_INVALID_ARGUMENT
/// (a bad device), FULMEN_CODE_UNAVAILABLE (no such device here).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_load_exported_on(
    path: *const c_char,
    device_type: i32,
    device_index: i64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let p = str_arg(path, "path")?;
        let device = DeviceSpec::from_c(device_type, device_index)?.to_tch()?;
        emit_model(out, Module::load_exported(Path::new(p), device))
    })
}

/// Adds the compiled training step in the AOTInductor package `path`
/// (written by `export_compiled_step` of `python/fulmen_export.py`: the
/// joint forward and backward of a training_step, compiled for one batch
/// shape) to `model`, answering the method `method` ("training_step", or a
/// name of your own). `fulmen_model_call_method(model, NULL, method,
/// &batch, 1, &out)` then runs the compiled code for batches of that shape
/// and returns {"loss": loss}: its backward (the trainer's, scaled or
/// accumulated as usual) adds the compiled gradients to the parameters,
/// and the buffers the step updates (BatchNorm statistics) are written
/// back. Add one package per batch shape for the same method (a smaller
/// last batch); a batch of another shape gets FULMEN_CODE_SHAPE_MISMATCH.
/// Compiled dropout draws from Inductor's own generator, not the eager
/// masks. The package is native code that is loaded and run: load only
/// packages you built. It is bound to the model's device at the time it is
/// added (move the model first); `dp` replicas do not carry it.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a string not UTF-8, the package
/// names a parameter or buffer the model lacks, or misses one of its
/// parameters), FULMEN_CODE_IO (no regular file at path),
/// FULMEN_CODE_FORMAT (not an AOTInductor package with fulmen's metadata,
/// or one built for another libtorch).
/// Thread rules: the model is locked for the call.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_add_compiled_step(
    model: *mut fulmen_model,
    path: *const c_char,
    method: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let p = str_arg(path, "path")?;
        let method = str_arg(method, "method")?;
        crate::ffi::nn::model::lock(&*crate::ffi::nn::model::model_arg(model, "model")?)?
            .add_compiled_step(Path::new(p), method)
    })
}
