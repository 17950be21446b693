//! XLA's own all-reduce for steps that reduce their tensors inside the
//! step's graph (torch_xla's `xm.all_reduce`).
use crate::accelerators::xla_collectives;
use crate::distributed::{self, ReduceOp};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::distributed::collectives::refuse_in_slot;
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use std::ffi::c_char;

/// Reduces `tensor` (on an XLA device) in place over all ranks with `op`
/// ("sum", "mean", "min", "max" or "product") with XLA's own all-reduce:
/// the reduction joins the device's pending graph and is computed when the
/// step's graph runs (torch_xla's `xm.all_reduce`), without a copy to the
/// host. Every rank must make the same calls in the same order within a
/// step, from the thread that runs the rank's steps; autograd does not
/// record the reduction. `tensor` is borrowed. Not joined, the job is this
/// process alone.
///
/// XLA's collectives span every device of the PJRT job, which are the
/// job's ranks only with one XLA device per process and one per rank
/// (TPUs from v4 on, under the xla strategy). On PJRT's CPU device every
/// process is a PJRT job of its own: there, fulmen_distributed_all_reduce
/// reduces through gloo.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not an XLA tensor; unknown or
/// non-UTF-8 `op`), FULMEN_CODE_INVALID_STATE (called from inside a
/// collectives slot), FULMEN_CODE_UNAVAILABLE (XLA cannot be started),
/// FULMEN_CODE_UNSUPPORTED (XLA's collectives do not reach the job's ranks
/// from here: the message says why; torch_xla registers no all-reduce),
/// FULMEN_CODE_TORCH (torch_xla refused the reduction).
#[no_mangle]
pub unsafe extern "C" fn fulmen_distributed_xla_all_reduce(
    tensor: *mut fulmen_tensor,
    op: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        let op = ReduceOp::parse(str_arg(op, "op")?)?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let world = distributed::current().map_or(1, |c| c.world_size());
        xla_collectives::all_reduce(&t, op, world)
    })
}
