//! XLA's own collectives (`csrc/xla_collectives.cpp`): torch_xla's kernel
//! of c10d's functional all-reduce, called through c10's dispatcher. The
//! reduction joins the device's lazy graph and runs with it at the step's
//! end (torch_xla's `xm.all_reduce`), with no copy to the host, over every
//! device of the PJRT job.
//!
//! Those devices are the distributed job's ranks only where each process
//! has one XLA device and the PJRT job one device per rank: TPUs from v4
//! on, where each process of the xla strategy takes its own chip. On
//! PJRT's CPU device every process is a PJRT job of its own, and on TPU v2
//! and v3 a process sees both devices of its chip but runs on one, so
//! there the reduction would not reach the other ranks (or would wait for
//! a device that never runs it): it is refused, and the xla strategy
//! reduces through gloo on host copies instead.
use super::xla_runtime;
use crate::distributed::ReduceOp;
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use crate::tensor::device::{Device, DeviceType};
use std::ffi::CString;
use tch::Tensor;

/// Why XLA's collectives cannot reduce over a distributed job of `world`
/// ranks from this process, or `None` when they can. Starts the backend.
pub fn unusable_reason(world: usize) -> Result<Option<String>> {
    let counts = xla_runtime::device_counts()?;
    if counts.local != 1 {
        return Ok(Some(format!(
            "this process has {} XLA devices, and XLA's collectives reduce over every device of the PJRT job: each \
             process must hold one (as each process of the xla strategy holds one TPU chip from v4 on)",
            counts.local
        )));
    }
    if counts.global != world {
        return Ok(Some(format!(
            "the PJRT job has {} XLA device(s) and the distributed job {world} rank(s), and XLA's collectives reduce \
             over the PJRT job's devices (on PJRT's CPU device each process is a PJRT job of its own: reduce a CPU \
             copy through gloo instead, with fulmen_distributed_all_reduce)",
            counts.global
        )));
    }
    Ok(None)
}

/// torch_xla's name of `op` and the factor applied after it (a mean is a
/// sum divided by the world size, as `xm.reduce_gradients` scales it).
fn xla_op(op: ReduceOp, world: usize) -> (&'static str, f64) {
    match op {
        ReduceOp::Sum => ("sum", 1.0),
        ReduceOp::Product => ("mul", 1.0),
        ReduceOp::Min => ("min", 1.0),
        ReduceOp::Max => ("max", 1.0),
        ReduceOp::Mean => ("sum", 1.0 / world.max(1) as f64),
    }
}

/// Reduces `tensor` (on an XLA device) in place over the `world` ranks of
/// the distributed job with `op`, inside the device's pending graph: the
/// value is computed when the step's graph runs, on every rank at once.
/// Every rank must make the same calls in the same order within a step.
/// Not recorded by autograd. A mean of integers is refused (it would be
/// truncated).
pub fn all_reduce(tensor: &Tensor, op: ReduceOp, world: usize) -> Result<()> {
    let device = Device::of(tensor)?;
    if device.kind() != DeviceType::Xla {
        return Err(Error::invalid(format!(
            "XLA's all_reduce takes a tensor on an XLA device, not on {}",
            device.name()
        )));
    }
    if op == ReduceOp::Mean && !tensor.is_floating_point() {
        return Err(Error::invalid(format!("XLA's all_reduce: a mean of {:?} values; use \"sum\"", tensor.kind())));
    }
    if let Some(why) = unusable_reason(world)? {
        return Err(Error::new(ErrorCode::Unsupported, format!("XLA's collectives cannot reduce here: {why}")));
    }
    let (name, scale) = xla_op(op, world);
    let name = CString::new(name).expect("no NUL in an op name");
    // SAFETY: a live `at::Tensor*`, a NUL-terminated name, a valid error
    // buffer; the shim catches exceptions.
    call("xla all_reduce", |err, len| unsafe {
        shim::fulmen_cxx_xla_all_reduce(tensor.as_ptr() as *mut libc::c_void, name.as_ptr(), scale, err, len)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_map_to_torch_xla_names_and_a_mean_scales_by_the_world() {
        assert_eq!(xla_op(ReduceOp::Sum, 4), ("sum", 1.0));
        assert_eq!(xla_op(ReduceOp::Product, 4), ("mul", 1.0));
        assert_eq!(xla_op(ReduceOp::Min, 4), ("min", 1.0));
        assert_eq!(xla_op(ReduceOp::Max, 4), ("max", 1.0));
        assert_eq!(xla_op(ReduceOp::Mean, 4), ("sum", 0.25));
        assert_eq!(xla_op(ReduceOp::Mean, 0), ("sum", 1.0));
    }

    #[test]
    fn without_torch_xla_a_reduction_is_refused_with_the_reason() {
        let cpu = Tensor::ones([2], (tch::Kind::Float, tch::Device::Cpu));
        let err = all_reduce(&cpu, ReduceOp::Sum, 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
        assert!(err.message.contains("not on cpu"), "{}", err.message);
        let err = unusable_reason(1).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
    }
}
