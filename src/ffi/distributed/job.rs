//! Distributed training for host-owned loops: joining the job, the
//! collectives of Lightning's strategy (all_reduce, broadcast, all_gather,
//! barrier, reduce_boolean_decision), DDP gradient averaging for a model
//! (`fulmen_ddp`), and a DataLoader's per-rank shard.
use crate::accelerators::xla_collectives;
use crate::distributed::{self, Ddp, DistContext, JoinOptions, ReduceOp};
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, opt_str, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle, Shared};
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::distributed::collectives::refuse_in_slot;
use crate::ffi::nn::model::fulmen_model;
use crate::ffi::tensor::handle::{emit, fulmen_tensor, tensor_arg};
use crate::ffi::trainer::strategy::fulmen_strategy;
use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;
use tch::Tensor;

/// The joined job, or the error of a call that needs one.
pub(crate) fn joined() -> Result<Arc<DistContext>> {
    distributed::current().ok_or_else(|| {
        Error::state("this process has not joined a distributed job (call fulmen_distributed_join or fit with ddp)")
    })
}

/// Joins the distributed job with `strategy`'s settings (backend, timeout,
/// num_nodes) and `processes_per_node` processes on each node: under
/// torchrun or SLURM their environment says where rank 0 is; otherwise
/// fulmen starts local ranks 1.. by re-executing this program with the same
/// arguments and `LOCAL_RANK` set, and this process is rank 0. A process
/// that already joined gets the same job back. `cuda` picks nccl when the
/// strategy names no backend.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`processes_per_node` is 0;
/// malformed or inconsistent RANK / WORLD_SIZE / SLURM variables;
/// MASTER_PORT unset when fulmen does not start the ranks),
/// FULMEN_CODE_INVALID_STATE (already in a job of another world size),
/// FULMEN_CODE_IO (no free port, a local rank cannot be started),
/// FULMEN_CODE_UNSUPPORTED (a build without gloo, or without nccl when nccl
/// is picked), FULMEN_CODE_DISTRIBUTED (the rendezvous failed or timed out,
/// a rank ended before joining).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_join(
    strategy: *const fulmen_strategy,
    processes_per_node: usize,
    cuda: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let s = &handle::borrow(strategy, "strategy")?.spec;
        if processes_per_node == 0 {
            return Err(Error::invalid("processes_per_node must be at least 1"));
        }
        distributed::join(&JoinOptions {
            devices_per_node: processes_per_node,
            num_nodes: s.num_nodes,
            backend: s.process_group_backend.clone(),
            cuda,
            devices: None,
            timeout: s.timeout,
        })
        .map(|_| ())
    })
}

/// Writes whether this process has joined a distributed job.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_is_joined(out: *mut bool) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", distributed::current().is_some()))
}

/// Writes this process's global rank, local rank (on its node) and the
/// world size; any of the three may be NULL. Not joined: rank 0 of 1.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_ranks(
    rank: *mut usize,
    local_rank: *mut usize,
    world_size: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let (r, l, w) = match distributed::current() {
            Some(c) => (c.rank(), c.env.local_rank, c.world_size()),
            None => (0, 0, 1),
        };
        for (p, v) in [(rank, r), (local_rank, l), (world_size, w)] {
            if !p.is_null() {
                p.write(v);
            }
        }
        Ok(())
    })
}

/// Reduces `tensor` in place over all ranks with `op`: "sum", "mean" (sum
/// divided by the world size), "min", "max" or "product".
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (unknown or non-UTF-8 `op`),
/// FULMEN_CODE_INVALID_STATE (not joined; called from inside a collectives
/// slot), FULMEN_CODE_DISTRIBUTED (a rank failed or timed out, ranks
/// disagree), FULMEN_CODE_TORCH ("mean" of an integer tensor, which is left
/// summed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_all_reduce(
    tensor: *mut fulmen_tensor,
    op: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (t, op) = reduce_args(tensor, op, crate::ffi::base::error::function_name!())?;
        let ctx = joined()?;
        ctx.group.all_reduce(&[t.shallow_clone()], op).map_err(|e| ctx.explain(e))
    })
}

/// Reduces `tensor` (on an XLA device) in place over all ranks with `op`
/// ("sum", "mean", "min", "max" or "product") with XLA's own all-reduce:
/// the reduction joins the device's pending graph and is computed when the
/// step's graph runs (torch_xla's `xm.all_reduce`), without a copy to the
/// host. Every rank must make the same calls in the same order within a
/// step, from the thread that runs the rank's steps, and read what depends
/// on the result at the same points (a graph holding the reduction that
/// runs on some ranks only waits for the others, with no timeout);
/// autograd does not record the reduction. `tensor` is borrowed. Not
/// joined, the job is this process alone.
///
/// XLA's collectives span every device of the PJRT job, which are the
/// job's ranks only with one XLA device per process and one per rank
/// (TPUs from v4 on, under the xla strategy). On PJRT's CPU device every
/// process is a PJRT job of its own: there, reduce a CPU copy with
/// fulmen_distributed_all_reduce.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not an XLA tensor; unknown or
/// non-UTF-8 `op`; "mean" of an integer tensor), FULMEN_CODE_INVALID_STATE
/// (called from inside a collectives slot), FULMEN_CODE_UNSUPPORTED (XLA's
/// collectives do not reach the job's ranks from here: the message says
/// why; torch_xla registers no all-reduce), FULMEN_CODE_TORCH (torch_xla
/// refused the reduction).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_xla_all_reduce(
    tensor: *mut fulmen_tensor,
    op: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (t, op) = reduce_args(tensor, op, crate::ffi::base::error::function_name!())?;
        let world = distributed::current().map_or(1, |c| c.world_size());
        xla_collectives::all_reduce(&t, op, world)
    })
}

/// The tensor and the reduction of an all-reduce, outside a collectives
/// slot (`function` names the call).
unsafe fn reduce_args<'a>(
    tensor: *mut fulmen_tensor,
    op: *const c_char,
    function: &str,
) -> Result<(Shared<'a, Tensor>, ReduceOp)> {
    let t = tensor_arg(tensor, "tensor")?;
    let op = ReduceOp::parse(str_arg(op, "op")?)?;
    refuse_in_slot(function)?;
    Ok((t, op))
}

/// Copies `tensor` from rank `root` into `tensor` on every rank.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not joined; called from inside a
/// collectives slot), FULMEN_CODE_INVALID_ARGUMENT (`root` outside the
/// world), FULMEN_CODE_DISTRIBUTED (a rank failed or timed out, ranks
/// disagree).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_broadcast(tensor: *mut fulmen_tensor, root: usize) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let ctx = joined()?;
        ctx.group.broadcast(&[t.shallow_clone()], root).map_err(|e| ctx.explain(e))
    })
}

/// Writes every rank's `tensor` stacked along a new first dimension (of
/// size world_size) to `*out` (a new handle). Every rank passes the same
/// shape and dtype.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not joined; called from inside a
/// collectives slot), FULMEN_CODE_DISTRIBUTED (ranks disagree on shape or
/// dtype, a rank failed or timed out).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_all_gather(
    tensor: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let t = tensor_arg(tensor, "tensor")?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let ctx = joined()?;
        let g = ctx.group.all_gather(&t).map_err(|e| ctx.explain(e))?;
        emit(out, g)
    })
}

/// Waits until every rank reaches the barrier (an error after the timeout).
///
/// Errors: FULMEN_CODE_INVALID_STATE (not joined; called from inside a
/// collectives slot), FULMEN_CODE_DISTRIBUTED (a rank failed, timeout).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_barrier() -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let ctx = joined()?;
        ctx.group.barrier().map_err(|e| ctx.explain(e))
    })
}

/// Lightning's reduce_boolean_decision: writes true when every rank's
/// `decision` is true (`all`), or when any rank's is (`!all`).
///
/// Errors: FULMEN_CODE_INVALID_STATE (not joined; called from inside a
/// collectives slot), FULMEN_CODE_DISTRIBUTED (a rank failed, timeout).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_reduce_boolean_decision(
    decision: bool,
    all: bool,
    out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let ctx = joined()?;
        out.write(ctx.group.reduce_decision(decision, all).map_err(|e| ctx.explain(e))?);
        Ok(())
    })
}

/// Leaves the job. On rank 0 of fulmen's own launcher this waits up to
/// `timeout_s` seconds for the ranks it started to exit and fails
/// (FULMEN_CODE_DISTRIBUTED) naming the first that failed or still runs.
/// Without a job it does nothing. Refused inside a collectives slot (the
/// job would end under the collective the slot runs); an accelerator's
/// other callbacks (its teardown) may call it.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`timeout_s` negative, NaN or too
/// long), FULMEN_CODE_INVALID_STATE (called from inside a collectives
/// slot; the job goes on), FULMEN_CODE_DISTRIBUTED (a launched rank failed
/// or still ran, see above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_shutdown(timeout_s: f64) -> *mut fulmen_error {
    guard!(|| {
        if !timeout_s.is_finite() || timeout_s < 0.0 {
            return Err(Error::invalid(format!("timeout_s must be >= 0, got {timeout_s}")));
        }
        let timeout = Duration::try_from_secs_f64(timeout_s)
            .map_err(|_| Error::invalid(format!("timeout_s {timeout_s} is too long")))?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        distributed::shutdown(timeout)
    })
}

/// Ends the job after a failure of this rank's own code (torch's
/// `destroy_process_group` after an error, with torchelastic's error
/// file): `reason` (UTF-8, NULL for "aborted by the host"; the first 2 KiB
/// kept) is recorded in the job's store, the ranks fulmen's launcher
/// started from this process are killed, and this process leaves the job.
/// The other ranks' collectives fail (FULMEN_CODE_DISTRIBUTED) once this
/// process's group is gone, that is when it exits or frees its last
/// `fulmen_ddp` / `fulmen_fsdp` handle, their errors reading "rank N
/// failed: <reason>; on rank M: ..." while rank 0's store is up. A later
/// `fulmen_distributed_join` or DDP run joins afresh. Without a job it does
/// nothing. Refused inside a collectives slot, as
/// `fulmen_distributed_shutdown` is.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`reason` not UTF-8),
/// FULMEN_CODE_INVALID_STATE (called from inside a collectives slot; the
/// job goes on).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_abort(reason: *const c_char) -> *mut fulmen_error {
    guard!(|| {
        let reason = opt_str(reason, "reason")?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        distributed::abort_with_reason(reason.as_deref().unwrap_or("aborted by the host"));
        Ok(())
    })
}

/// DDP for a host-owned loop: a model whose gradients are averaged over the
/// job's ranks during backward, as torch's DistributedDataParallel does (the
/// same core as the trainer's ddp strategy). Free with `fulmen_ddp_free`.
pub struct fulmen_ddp {
    ddp: Ddp,
    ctx: Arc<DistContext>,
}

impl Handle for fulmen_ddp {
    const C_NAME: &'static str = "fulmen_ddp";
}

/// Wraps `model` for DDP in the joined job as
/// `DistributedDataParallel(model)` does, with `strategy`'s
/// find_unused_parameters, bucket_cap_mb and broadcast_buffers: checks that
/// every rank has the same trainable parameters, copies rank 0's parameters
/// and then its buffers to all ranks, and hooks gradient averaging. Each
/// step then calls `fulmen_ddp_prepare_forward`, the forward,
/// `fulmen_ddp_prepare_backward` with the loss, and backward, on every rank
/// (Python ranks running DistributedDataParallel included). Errors:
/// FULMEN_CODE_INVALID_STATE (not joined, or called from inside a
/// collectives slot), FULMEN_CODE_INVALID_ARGUMENT (no
/// trainable parameter), FULMEN_CODE_DISTRIBUTED (ranks disagree, a rank
/// failed, timeout).
#[no_mangle]
pub unsafe extern "C" fn fulmen_ddp_new(
    model: *mut fulmen_model,
    strategy: *const fulmen_strategy,
    out: *mut *mut fulmen_ddp,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let m = &handle::borrow_mut(model, "model")?.inner;
        let s = &handle::borrow(strategy, "strategy")?.spec;
        let ctx = joined()?;
        let ddp = {
            let g = m.lock().unwrap_or_else(|p| p.into_inner());
            Ddp::new(Arc::clone(&ctx.group), &g, s.ddp.clone()).map_err(|e| ctx.explain(e))?
        };
        out.write(handle::into_raw(fulmen_ddp { ddp, ctx }));
        Ok(())
    })
}

/// torch's `no_sync()`: while `sync` is false, backward passes only
/// accumulate gradients locally; the first step after `sync` is true again
/// averages the accumulated sum. Steps keep calling prepare_forward and
/// prepare_backward either way.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_ddp_set_sync(ddp: *mut fulmen_ddp, sync: bool) -> *mut fulmen_error {
    guard!(|| {
        handle::borrow_mut(ddp, "ddp")?.ddp.set_sync(sync);
        Ok(())
    })
}

/// Call before every forward pass of the wrapped model, as
/// DistributedDataParallel's forward does first: under autograd's grad mode
/// it prepares the Reducer and rebuilds its buckets after the first
/// iteration; it broadcasts rank 0's buffers when the previous forward
/// synchronized (broadcast_buffers). A forward under no-grad (evaluation)
/// calls it too. Errors: FULMEN_CODE_DISTRIBUTED; FULMEN_CODE_INVALID_STATE
/// from inside a collectives slot.
#[no_mangle]
pub unsafe extern "C" fn fulmen_ddp_prepare_forward(ddp: *mut fulmen_ddp) -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let mut d = handle::borrow_mut(ddp, "ddp")?;
        let d = &mut *d;
        d.ddp.pre_forward(crate::tensor::runtime::grad_enabled()).map_err(|e| d.ctx.explain(e))
    })
}

/// Call after the forward pass, before backward of `loss` (the forward's
/// output): under grad mode and sync, that backward then averages the
/// gradients over ranks. Errors: FULMEN_CODE_DISTRIBUTED.
#[no_mangle]
pub unsafe extern "C" fn fulmen_ddp_prepare_backward(
    ddp: *mut fulmen_ddp,
    loss: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let mut d = handle::borrow_mut(ddp, "ddp")?;
        let loss = tensor_arg(loss, "loss")?;
        let d = &mut *d;
        d.ddp
            .post_forward(std::slice::from_ref(&*loss), crate::tensor::runtime::grad_enabled())
            .map_err(|e| d.ctx.explain(e))
    })
}

/// Frees a DDP wrapper (the model stays). NULL or freed: no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_ddp_free(ddp: *mut fulmen_ddp) {
    handle::free(ddp);
}

/// Writes a new loader reading rank `rank` of `world`'s share of
/// `loader`'s dataset, as torch's DistributedSampler (padded so every rank
/// has as many batches, reshuffled per epoch with the loader's seed). Only
/// loaders over datasets can be split; a host iterator is an error.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`rank` outside `world`, a loader
/// over a host iterator).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loader_shard(
    loader: *const fulmen_loader,
    rank: usize,
    world: usize,
    out: *mut *mut fulmen_loader,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let l = handle::borrow(loader, "loader")?;
        if world == 0 || rank >= world {
            return Err(Error::invalid(format!("rank {rank} is outside a world of {world}")));
        }
        let inner = l
            .inner
            .shard(rank, world)
            .ok_or_else(|| Error::invalid("only loaders over a dataset can be split; a host iterator cannot"))?;
        out.write(handle::into_raw(fulmen_loader { inner }));
        Ok(())
    })
}
