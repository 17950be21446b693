//! FLOP counting (`torch.utils.flop_counter.FlopCounterMode`, Lightning's
//! `measure_flops`): around a host function, or one forward (and backward)
//! of a model.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::host_result;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{check_out, write_out};
use crate::ffi::flops::counts::{emit_counts, fulmen_flop_counts};
use crate::ffi::nn::model::{fulmen_model, lock, model_arg};
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg, TensorScope};
use crate::nn::FlopCounts;
use libc::c_void;

/// The code `fulmen_measure_flops` measures: runs what is to be counted
/// (forwards, backwards, optimizer steps) through fulmen's functions on the
/// calling thread and returns NULL, or an error, which ends the
/// measurement with it.
pub type fulmen_measure_fn = Option<unsafe extern "C" fn(userdata: *mut c_void) -> *mut fulmen_error>;

/// Runs `measured(userdata)` on the calling thread and writes to `*flops` the
/// floating-point operations of what it ran, counted as PyTorch's
/// `torch.utils.flop_counter.FlopCounterMode` counts them around the same
/// code (Lightning's `measure_flops`): matrix products (`mm`, `addmm`,
/// `bmm`, `baddbmm`, `_scaled_mm`: 2 * m * n * k), convolutions and their
/// backward, and the fused attention kernels of CUDA (flash, efficient,
/// cuDNN) and their backward; every other operator counts 0 (elementwise
/// work, norms, and the CPU's fused attention kernel, as in torch) unless
/// the host registered a formula for it (`fulmen_flops_register_formula`,
/// which may replace torch's formulas too). The
/// backward passes `measured` starts count too, on whatever thread
/// autograd runs them. Tensors on the meta device count without computing anything,
/// where libtorch has meta kernels for their operators (the matrix
/// products, structured elementwise ones; not convolution, ReLU, embedding
/// or batch norm, whose meta kernels PyTorch registers in Python).
///
/// Ownership: `userdata` stays the host's. `*flops` is written on success
/// only.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`measured` or `flops` NULL),
/// FULMEN_CODE_INVALID_STATE (called inside a measurement on the same
/// thread: measurements do not nest, as torch's mode),
/// FULMEN_CODE_OUT_OF_RANGE (the count exceeds 2^64 - 1), the error
/// `measured` returned (its code kept, FULMEN_CODE_CALLBACK for an invalid
/// one), or the first error a registered formula returned (its code
/// kept).
///
/// Thread rules: any thread; threads measure apart, and operators other
/// threads run meanwhile are not counted.
#[no_mangle]
pub unsafe extern "C" fn fulmen_measure_flops(
    measured: fulmen_measure_fn,
    userdata: *mut c_void,
    flops: *mut u64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(flops, "flops")?;
        write_out(flops, "flops", measure_host(measured, userdata)?.total)
    })
}

/// Runs the host's measured function and counts what it ran.
unsafe fn measure_host(measured: fulmen_measure_fn, userdata: *mut c_void) -> Result<FlopCounts> {
    let f = measured.ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `measured` is NULL"))?;
    let (_, counts) = crate::nn::measure_flops(|| {
        let err = {
            let _scope = TensorScope::enter();
            // SAFETY: the host's function with its own userdata, on this thread.
            unsafe { f(userdata) }
        };
        host_result(err, || "the measured function".to_string())
    })?;
    Ok(counts)
}

/// One forward (and backward) of a model, counted.
unsafe fn measure_model(model: *const fulmen_model, input: *const fulmen_tensor, backward: bool) -> Result<FlopCounts> {
    let m = model_arg(model, "model")?;
    let x = tensor_arg(input, "input")?;
    let guard = lock(&m)?;
    crate::nn::measure_model_flops(&guard, &x, backward)
}

/// `fulmen_measure_flops` keeping every count: writes to `*out` new
/// counts by module and operator, as PyTorch's `FlopCounterMode` keeps
/// them around the same code (`get_flop_counts()`). An operator counts
/// for "Global" and for every module whose forward is open around it,
/// and in backward for the modules the forward operator it differentiates
/// ran in (inside a checkpointed module, the recomputation and its
/// backward count for that module). Torch's ModuleTracker decides the
/// backward's modules by gradient hooks instead; the two agree on the
/// models `tests/interop/flops_parity.py` checks, and may differ where a
/// module's inputs need no gradient in the middle of a network. Modules
/// are those fulmen runs: the children of a Sequential or a named
/// container (by `fulmen_model_forward_child` or a host module's
/// `fulmen_host_call_forward_child`), the submodules of a TorchScript
/// module, and the modules an exported program recorded (its
/// `nn_module_stack`), and inside fulmen's transformer layers the
/// sub-modules PyTorch's call (`self_attn`, `multihead_attn`, `linear1`,
/// `linear2`, `norm1`..`norm3`, `dropout`, `dropout1`..`dropout3`; the
/// attention's `out_proj` is not called as a module, in torch neither).
///
/// Ownership: `userdata` stays the host's; `*out` is the caller's, freed
/// with `fulmen_flop_counts_free`, written on success only.
///
/// Errors: those of `fulmen_measure_flops`.
///
/// Thread rules: as `fulmen_measure_flops`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_measure_flops_by_module(
    measured: fulmen_measure_fn,
    userdata: *mut c_void,
    out: *mut *mut fulmen_flop_counts,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        emit_counts(out, measure_host(measured, userdata)?)
    })
}

/// `fulmen_model_measure_flops` keeping every count: writes to `*out` new
/// counts by module and operator, as `fulmen_measure_flops_by_module`
/// keeps them.
///
/// Ownership: borrows `model` and `input`; `*out` is the caller's, freed
/// with `fulmen_flop_counts_free`, written on success only.
///
/// Errors: those of `fulmen_model_measure_flops`.
///
/// Thread rules: any thread; the model is locked for the call.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_measure_flops_by_module(
    model: *const fulmen_model,
    input: *const fulmen_tensor,
    backward: bool,
    out: *mut *mut fulmen_flop_counts,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        emit_counts(out, measure_model(model, input, backward)?)
    })
}

/// Lightning's `measure_flops(model, lambda: model(input), lambda y:
/// y.sum())`: writes to `*flops` the FLOPs of one forward of `model` on
/// `input` and, when `backward`, of the backward of the output's sum to the
/// model's trainable parameters (and to `input` when it requires a
/// gradient, as `.backward()` reaches it), counted as
/// `fulmen_measure_flops` counts.
/// The model's state is left as it was: its gradients and the input's
/// are put back as they were (the backward's own are dropped; modules with
/// activation checkpointing run their forward again in it, and that
/// counts), its buffers
/// (BatchNorm statistics) and the CPU's random state are put back; a CUDA
/// generator advances as after any forward with dropout. Divide by the
/// batch's samples for FLOPs per sample, or pass the count
/// to `fulmen_trainer_add_throughput_monitor_flops`.
///
/// Ownership: borrows `model` and `input`. `*flops` is written on success
/// only.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_HANDLE,
/// FULMEN_CODE_INVALID_STATE (inside a measurement on the same thread, or
/// the model is in use), the forward's errors as `fulmen_model_forward`
/// gives them, FULMEN_CODE_OUT_OF_RANGE (the count exceeds 2^64 - 1), the
/// first error a registered formula returned (its code kept).
///
/// Thread rules: any thread; the model is locked for the call.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_measure_flops(
    model: *const fulmen_model,
    input: *const fulmen_tensor,
    backward: bool,
    flops: *mut u64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(flops, "flops")?;
        write_out(flops, "flops", measure_model(model, input, backward)?.total)
    })
}
