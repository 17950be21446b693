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
    /// Every rank's part, put together along the last dimension, whose
    /// full size this is.
    GatherLast(i64),
    /// This rank's part of the last dimension, of this full size.
    SplitLast(i64),
    /// Divided by the number of ranks: a value every rank holds whole
    /// made one of the terms the ranks sum (DTensor's `Replicate` to
    /// `Partial`).
    Partition,
}

/// This rank's span of a dimension of `size` entries split across
/// `world` ranks as `torch.chunk` (DTensor's `Shard`) splits it:
/// `ceil(size / world)` entries each, the last ranks' shorter or empty.
/// (first entry, length).
pub(crate) fn chunk_span(size: i64, rank: usize, world: usize) -> (i64, i64) {
    let world = world.max(1) as i64;
    let per = (size.max(0) + world - 1) / world;
    let first = (rank as i64).saturating_mul(per).min(size.max(0));
    (first, per.min(size - first).max(0))
}

/// Rank `rank`'s part of `t` along `dim` ([`chunk_span`] of its size), a
/// detached copy.
pub(crate) fn chunk_of(t: &Tensor, dim: i64, rank: usize, world: usize) -> Result<Tensor> {
    let sizes = t.size();
    let d = if dim < 0 { dim + sizes.len() as i64 } else { dim };
    let size = usize::try_from(d).ok().and_then(|d| sizes.get(d)).copied().ok_or_else(|| {
        Error::shape(format!("tensor parallel: a tensor of shape {sizes:?} has no dimension {dim} to split"))
    })?;
    let (first, len) = chunk_span(size, rank, world);
    Ok(t.f_detach()?.f_narrow(dim, first, len)?.f_contiguous()?.f_detach_copy()?)
}

/// This rank's part of `t`'s last dimension, whose full size must be
/// `full` ([`chunk_of`]).
pub(crate) fn split_last(t: &Tensor, rank: usize, world: usize, full: i64) -> Result<Tensor> {
    if t.dim() == 0 || t.size().last() != Some(&full) {
        return Err(Error::shape(format!(
            "tensor parallel: the last dimension of {:?} is not the {full} entries the layer splits",
            t.size()
        )));
    }
    chunk_of(t, -1, rank, world)
}

/// Every rank's part of a tensor cut along `dim` as [`chunk_span`] cuts
/// `full` entries, put together on every rank: each part padded with
/// zeros to `ceil(full / world)`, all-gathered, the padding cut off
/// (DTensor's uneven `Shard` to `Replicate`; nothing padded when the
/// parts are equal).
pub(crate) fn gather_chunks(comm: &dyn RankComm, t: &Tensor, dim: i64, full: i64) -> Result<Tensor> {
    let world = comm.world_size();
    let (_, len) = chunk_span(full, comm.rank(), world);
    let d = if dim < 0 { dim + t.dim() as i64 } else { dim };
    let size = t.size();
    if d < 0 || d as usize >= size.len() || size[d as usize] != len {
        return Err(Error::shape(format!(
            "tensor parallel: a part of shape {size:?} is not this rank's {len} of {full} entries along dimension \
             {dim}"
        )));
    }
    let per = chunk_span(full, 0, world).1;
    if len == per && per * world as i64 == full {
        return comm.gather(t, d);
    }
    let padded = if len < per {
        let mut shape = size.clone();
        shape[d as usize] = per - len;
        Tensor::f_cat(&[t.shallow_clone(), Tensor::f_zeros(&shape, (t.kind(), t.device()))?], d)?
    } else {
        t.shallow_clone()
    };
    Ok(comm.gather(&padded, d)?.f_narrow(d, 0, full)?)
}

/// `t` after `step` over `comm`'s ranks (no autograd).
fn run(comm: &dyn RankComm, step: Step, t: &Tensor) -> Result<Tensor> {
    match step {
        Step::Identity => Ok(t.shallow_clone()),
        Step::Sum => comm.sum(t),
        Step::GatherLast(full) => gather_chunks(comm, t, -1, full),
        Step::SplitLast(full) => split_last(t, comm.rank(), comm.world_size(), full),
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

#[cfg(test)]
mod tests {
    use super::chunk_span;

    /// torch.chunk's parts: `ceil(size / world)` each, the last ranks'
    /// shorter or empty.
    #[test]
    fn chunk_spans_follow_torch_chunk() {
        let spans = |size, world| (0..world).map(|r| chunk_span(size, r, world)).collect::<Vec<_>>();
        assert_eq!(spans(12, 4), [(0, 3), (3, 3), (6, 3), (9, 3)]);
        assert_eq!(spans(17, 2), [(0, 9), (9, 8)]);
        assert_eq!(spans(17, 4), [(0, 5), (5, 5), (10, 5), (15, 2)]);
        assert_eq!(spans(9, 4), [(0, 3), (3, 3), (6, 3), (9, 0)]);
        assert_eq!(spans(5, 4), [(0, 2), (2, 2), (4, 1), (5, 0)]);
        assert_eq!(spans(1, 3), [(0, 1), (1, 0), (1, 0)]);
        assert_eq!(spans(0, 2), [(0, 0), (0, 0)]);
    }
}
