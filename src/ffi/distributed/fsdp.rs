//! FSDP for host-owned loops (`fulmen_fsdp`): a model sharded across the
//! joined job's ranks, the host driving forward, backward and its
//! optimizers.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out, write_out, Handle};
use crate::ffi::distributed::collectives::refuse_in_slot;
use crate::ffi::distributed::job::joined;
use crate::ffi::nn::model::fulmen_model;
use crate::ffi::optim::optimizers::fulmen_optimizer;
use crate::ffi::trainer::strategy::fulmen_strategy;
use crate::optim::Optimizer;
use crate::strategies::fsdp::FsdpHostLoop;
use std::sync::Arc;

/// FSDP for a host-owned loop: a model whose parameters, gradients and
/// optimizer states are sharded across the job's ranks, as torch's
/// `fully_shard` does (the same core as the trainer's fsdp strategy).
/// Free with `fulmen_fsdp_free`.
pub struct fulmen_fsdp {
    inner: FsdpHostLoop,
}

impl Handle for fulmen_fsdp {
    const C_NAME: &'static str = "fulmen_fsdp";
}

/// Borrows `count` optimizer handles from `optimizers`, each once.
///
/// # Safety
/// `optimizers` is NULL (with `count` 0) or points to `count` handles.
pub(crate) unsafe fn borrow_optimizers(
    optimizers: *const *mut fulmen_optimizer,
    count: usize,
) -> Result<Vec<handle::Exclusive<'static, fulmen_optimizer>>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if optimizers.is_null() {
        return Err(Error::new(crate::error::ErrorCode::NullArgument, "argument `optimizers` is NULL"));
    }
    let list = std::slice::from_raw_parts(optimizers, count);
    for (i, p) in list.iter().enumerate() {
        if list[..i].contains(p) {
            return Err(Error::invalid(format!("optimizers[{i}] repeats an earlier optimizer")));
        }
    }
    list.iter().enumerate().map(|(i, &o)| handle::borrow_mut(o, &format!("optimizers[{i}]"))).collect()
}

/// Runs `f` with the borrowed optimizers as `&mut dyn Optimizer`.
pub(crate) fn with_optimizers<R>(
    borrowed: &mut [handle::Exclusive<'static, fulmen_optimizer>],
    f: impl FnOnce(&mut [&mut dyn Optimizer]) -> Result<R>,
) -> Result<R> {
    let mut opts: Vec<&mut dyn Optimizer> = borrowed.iter_mut().map(|o| o.inner.as_mut() as _).collect();
    f(&mut opts)
}

/// Shards `model` (already on this rank's device, or built on the meta
/// device: each unit then gets its values just before it is sharded and
/// goes to this rank's device, the CUDA device under nccl) across the
/// joined job as torch's `fully_shard` does, with `strategy`'s FSDP settings
/// (`sharding_strategy`, `auto_wrap_policy`, `min_num_params`,
/// `activation_checkpointing_policy`, `param_dtype`, `reduce_dtype`,
/// `forward_prefetch`, `backward_prefetch`, `sync_module_states`,
/// `reduce_scatter_unused_params`, `cpu_offload`; and its `sync_batchnorm`
/// and `num_nodes`): checks that every rank has the same parameters,
/// copies rank 0's parameters and buffers to all ranks (neither with
/// `sync_module_states` false: every rank must then start from the same
/// values), and keeps each rank's rows of every unit's parameters (in the
/// host's memory with `cpu_offload`: the parameters are then CPU tensors
/// between steps and the optimizers step there). Build the optimizers over
/// `fulmen_model_parameters(model)` after this call: they then step this
/// rank's shards. With `sync_module_states` false and
/// `reduce_scatter_unused_params` true the collectives are PyTorch
/// FSDP2's, so this rank can share a job with Python ranks running
/// `fully_shard` with `set_force_sum_reduction_for_comms(True)` and
/// `set_reduce_scatter_unused_params(True)`, the same units and the
/// default backward prefetch, and no clipping (docs/ARCHITECTURE.md says
/// what else must match).
///
/// Each training step, on every rank: zero the gradients (the optimizer's
/// zero_grad before `fulmen_fsdp_prepare_forward`, or
/// `fulmen_fsdp_zero_grad` at any point), `fulmen_fsdp_prepare_forward`,
/// the forward, backward, `fulmen_fsdp_finish_backward`, optionally
/// `fulmen_fsdp_clip_grad_norm`, then the optimizers' step. The model's
/// parameters hold this rank's shards between steps: gather them with
/// `fulmen_fsdp_unshard` to save or read them.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not joined; the model is already
/// sharded by another wrapper or a running fit; called from inside a
/// collectives slot), FULMEN_CODE_INVALID_ARGUMENT (settings that do not
/// fit: an activation checkpointing class that names no module, a hybrid
/// sharding whose ranks do not split into `num_nodes`),
/// FULMEN_CODE_UNSUPPORTED (`param_dtype`, `reduce_dtype` or `cpu_offload`
/// with NO_SHARD), FULMEN_CODE_DISTRIBUTED (ranks disagree on the parameters, a rank failed,
/// timeout), FULMEN_CODE_TORCH (out of memory while sharding). On error
/// the model is not sharded, but it may hold rank 0's values (the copy
/// ran), and after a failure while sharding (the error says so) some of
/// its parameters hold this rank's rows only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_new(
    model: *mut fulmen_model,
    strategy: *const fulmen_strategy,
    out: *mut *mut fulmen_fsdp,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let m = Arc::clone(&handle::borrow_mut(model, "model")?.inner);
        let s = handle::borrow(strategy, "strategy")?;
        let ctx = joined()?;
        let inner = FsdpHostLoop::new(ctx, m, &s.spec)?;
        out.write(handle::into_raw(fulmen_fsdp { inner }));
        Ok(())
    })
}

/// torch's `no_sync()`: while `sync` is false, backward passes keep
/// full-sized gradients and accumulate them without communication; the
/// next step with `sync` true averages the sum into the shards. Set it
/// before `fulmen_fsdp_prepare_forward`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_set_sync(fsdp: *mut fulmen_fsdp, sync: bool) -> *mut fulmen_error {
    guard!(|| handle::borrow_mut(fsdp, "fsdp")?.inner.set_sync(sync))
}

/// Call before every forward pass of the model (evaluation ones too):
/// every unit is sharded again, and under autograd's grad mode the coming
/// backward is prepared (each unit's gradients are averaged into its
/// shards as soon as its backward ends).
///
/// Errors: FULMEN_CODE_INVALID_STATE (the last backward's gradients were
/// not averaged: `fulmen_fsdp_finish_backward` was not called; the model is
/// unsharded; called from inside a collectives slot),
/// FULMEN_CODE_DISTRIBUTED.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_prepare_forward(fsdp: *mut fulmen_fsdp) -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        handle::borrow_mut(fsdp, "fsdp")?.inner.prepare_forward(crate::tensor::runtime::grad_enabled())
    })
}

/// Call after the backward passes of a step, before clipping and the
/// optimizers' step: the gradients the units' hooks did not average yet
/// (parameters without a gradient on some rank, the parameters every rank
/// keeps whole) are averaged into the shards. While `sync` is false
/// (accumulating) it only reports a backward hook's error.
///
/// Errors: FULMEN_CODE_DISTRIBUTED (a rank failed, timeout; a gathering or
/// averaging hook failed inside backward), FULMEN_CODE_INVALID_STATE
/// (called from inside a collectives slot).
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_finish_backward(fsdp: *mut fulmen_fsdp) -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        handle::borrow_mut(fsdp, "fsdp")?.inner.finish_backward()
    })
}

/// torch's FSDP `clip_grad_norm_(max_norm)`: every parameter's gradient
/// scaled so that their 2-norm over every rank's shards is at most
/// `max_norm`. Writes the total norm before clipping to `*total_norm`
/// (may be NULL). Call after `fulmen_fsdp_finish_backward`, on every rank.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`max_norm` negative or NaN),
/// FULMEN_CODE_INVALID_STATE (the backward's gradients were not averaged
/// yet; the model is unsharded; inside a collectives slot),
/// FULMEN_CODE_DISTRIBUTED.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_clip_grad_norm(
    fsdp: *mut fulmen_fsdp,
    max_norm: f64,
    total_norm: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let total = handle::borrow_mut(fsdp, "fsdp")?.inner.clip_grad_norm(max_norm)?;
        if !total_norm.is_null() {
            write_out(total_norm, "total_norm", total)?;
        }
        Ok(())
    })
}

/// `model.zero_grad()`: every parameter's gradient dropped (`set_to_none`)
/// or zeroed, including those FSDP sets aside while a unit is gathered, so
/// it is right at any point of a step (an optimizer's zero_grad is right
/// only between the step and `fulmen_fsdp_prepare_forward`). Local: no
/// collective.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_zero_grad(fsdp: *mut fulmen_fsdp, set_to_none: bool) -> *mut fulmen_error {
    guard!(|| handle::borrow_mut(fsdp, "fsdp")?.inner.zero_grad(set_to_none))
}

/// Gathers the full parameters (in the shards' dtype) into the model and
/// the states of `optimizers` (`count` handles, built over the model's
/// parameters; NULL with 0) into their full shapes, on every rank (a
/// collective). The model and optimizers can then be saved, read or loaded
/// as unsharded ones (`fulmen_model_save` on rank 0,
/// `fulmen_optimizer_load_state`, ...) and the model run forward on any
/// rank (it stays whole), until `fulmen_fsdp_reshard`. A model already
/// unsharded: nothing happens.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`optimizers` NULL with `count` > 0),
/// FULMEN_CODE_INVALID_ARGUMENT (an optimizer listed twice),
/// FULMEN_CODE_INVALID_STATE (a backward's gradients wait for
/// `fulmen_fsdp_finish_backward`; an optimizer handle in use; inside a
/// collectives slot), FULMEN_CODE_DISTRIBUTED.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_unshard(
    fsdp: *mut fulmen_fsdp,
    optimizers: *const *mut fulmen_optimizer,
    count: usize,
) -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let mut f = handle::borrow_mut(fsdp, "fsdp")?;
        let mut opts = borrow_optimizers(optimizers, count)?;
        with_optimizers(&mut opts, |o| f.inner.unshard(o))
    })
}

/// After `fulmen_fsdp_unshard`: every rank keeps its rows of the model's
/// current parameter values (those loaded since included) and of the
/// states of `optimizers` (pass the ones given to unshard), and the model
/// is sharded again for training. Local: no collective.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the model is not unsharded; an
/// optimizer handle in use), FULMEN_CODE_NULL_ARGUMENT,
/// FULMEN_CODE_INVALID_ARGUMENT (an optimizer listed twice; not the
/// optimizers given to unshard), FULMEN_CODE_TORCH (a parameter was
/// given another shape; the model stays unsharded, so reshard can be
/// called again).
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_reshard(
    fsdp: *mut fulmen_fsdp,
    optimizers: *const *mut fulmen_optimizer,
    count: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let mut f = handle::borrow_mut(fsdp, "fsdp")?;
        let mut opts = borrow_optimizers(optimizers, count)?;
        with_optimizers(&mut opts, |o| f.inner.reshard(o))
    })
}

/// Frees the wrapper without a collective. The model keeps what its
/// parameters hold: their full values after `fulmen_fsdp_unshard` (the
/// usual end of a run: unshard, then free), otherwise this rank's shards.
/// NULL or freed: no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fsdp_free(fsdp: *mut fulmen_fsdp) {
    handle::free(fsdp);
}
