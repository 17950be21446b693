//! Differentiable steps across the ranks of a job (csrc/rank_function.cpp):
//! an autograd node whose forward and backward each communicate over the
//! job's process group. SyncBatchNorm sums over the ranks both ways;
//! tensor parallelism's layers (`tensor_parallel.rs`) copy their input in
//! (identity, gradients summed), reduce their output (summed, gradients as
//! they are), and gather or split along the last dimension, as Megatron's
//! `copy_to`, `reduce_from`, `gather_from` and `scatter_to` regions and
//! torch's DTensor redistributions do.
use crate::error::{Error, ErrorCode, Result};
use crate::shim;
use libc::{c_char, c_int, c_void, size_t};
use std::sync::Arc;
use tch::Tensor;

/// The collectives of a job's ranks that the steps use.
pub(crate) trait RankComm: Send + Sync + std::fmt::Debug {
    /// This rank's index in the group.
    fn rank(&self) -> usize;
    /// Number of ranks in the group.
    fn world_size(&self) -> usize;
    /// `t` summed over the ranks, in a new tensor.
    fn sum(&self, t: &Tensor) -> Result<Tensor>;
    /// Every rank's `t` (the same shape everywhere) concatenated along
    /// `dim` in rank order.
    fn gather(&self, t: &Tensor, dim: i64) -> Result<Tensor>;
}

/// One direction of a step across the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The tensor as it is.
    Identity,
    /// Summed over the ranks.
    Sum,
    /// Every rank's, concatenated along the last dimension.
    GatherLast,
    /// This rank's equal part of the last dimension.
    SplitLast,
    /// Divided by the number of ranks: a value every rank holds whole
    /// made one of the terms the ranks sum (DTensor's `Replicate` to
    /// `Partial`).
    Partition,
}

/// This rank's equal part of `t`'s last dimension (a copy).
pub(crate) fn split_last(t: &Tensor, rank: usize, world: usize) -> Result<Tensor> {
    let last = t.size().last().copied().unwrap_or(1);
    let world = world as i64;
    if t.dim() == 0 || last % world != 0 {
        return Err(Error::shape(format!(
            "tensor parallel: the last dimension of {:?} does not split into {world} equal parts",
            t.size()
        )));
    }
    let part = last / world;
    Ok(t.f_narrow(-1, rank as i64 * part, part)?.f_contiguous()?.f_detach_copy()?)
}

/// `t` after `step` over `comm`'s ranks (no autograd).
fn run(comm: &dyn RankComm, step: Step, t: &Tensor) -> Result<Tensor> {
    match step {
        Step::Identity => Ok(t.shallow_clone()),
        Step::Sum => comm.sum(t),
        Step::GatherLast => comm.gather(t, -1),
        Step::SplitLast => split_last(t, comm.rank(), comm.world_size()),
        Step::Partition => Ok(t.f_div_scalar(comm.world_size() as f64)?),
    }
}

/// `x` after `forward` over `comm`'s ranks, differentiably: its gradient
/// goes through `backward`. Every rank must run the same steps in the
/// same order, in forward and in backward.
pub(crate) fn across(comm: &Arc<dyn RankComm>, x: &Tensor, forward: Step, backward: Step) -> Result<Tensor> {
    let comm = Arc::clone(comm);
    across_with(x, move |back, t| run(comm.as_ref(), if back { backward } else { forward }, t))
}

/// What one step computes: the forward (`false`) or the backward (`true`)
/// of a tensor.
type StepFn = dyn Fn(bool, &Tensor) -> Result<Tensor> + Send + Sync;

/// `x` after `step(false, x)`, its gradient after `step(true, grad)`.
pub(crate) fn across_with(
    x: &Tensor,
    step: impl Fn(bool, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Result<Tensor> {
    let boxed: Box<StepFn> = Box::new(step);
    let ctx = Box::into_raw(Box::new(boxed)).cast::<c_void>();
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: `ctx` is the Box above, released by `release` exactly once
    // (the shim's contract); `x` outlives the call.
    shim::call("a step across the ranks", |err, len| unsafe {
        shim::fulmen_cxx_across_ranks(run_step, ctx, release, x.as_ptr() as *const c_void, &mut out, err, len)
    })?;
    // SAFETY: on success the shim wrote a new `at::Tensor*` we own.
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

unsafe extern "C" fn run_step(
    ctx: *mut c_void,
    backward: c_int,
    input: *const c_void,
    out: *mut *mut c_void,
    err: *mut c_char,
    err_len: size_t,
) -> c_int {
    let step = &*(ctx as *const Box<StepFn>);
    let t = Tensor::clone_from_ptr(input.cast_mut().cast());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(backward != 0, &t)))
        .unwrap_or_else(|_| Err(Error::new(ErrorCode::Panic, "a step across the ranks panicked")));
    match r {
        Ok(mut y) => {
            // The shim owns the `at::Tensor*` it is handed.
            *out = y.as_mut_ptr().cast();
            std::mem::forget(y);
            0
        }
        Err(e) => {
            shim::write_error(err, err_len, &e.to_string());
            1
        }
    }
}

unsafe extern "C" fn release(ctx: *mut c_void) {
    let _ = std::panic::catch_unwind(|| drop(Box::from_raw(ctx as *mut Box<StepFn>)));
}
