//! What FSDP computes over every rank's shards: the total gradient norm
//! for clipping, and an optimizer's state as a full checkpoint holds it
//! (gathered from the shards on save, cut into them on resume).
use super::unit::{FsdpUnit, ShardedParam};
use crate::distributed::{ProcessGroup, ReduceOp};
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::tensor::device::{to_device_of, zeros_on_device_of, Device};
use std::sync::Arc;
use tch::Tensor;

/// Clips the gradients of `params` (shards, and the `replicated`
/// parameters every rank holds whole) by their norm over every rank's
/// shards, torch's `clip_grad_norm_` on the full gradients: the
/// per-parameter norms (from summed squared shard norms; a replicated
/// one's counted once) and their norm, `clip_coef = max_norm / (total +
/// 1e-6)` clamped to 1. Returns the total norm before clipping (a 0-dim
/// tensor on the device the norms met on: the first gradient's off the
/// CPU, else the CPU's unless the group reduces only on its device;
/// reading it waits for the device). With CPU offload the shards'
/// gradients are in the host's memory, the replicated ones on the device.
pub(crate) fn clip_norm_over_ranks(
    group: &ProcessGroup,
    params: &[Tensor],
    replicated: &[Tensor],
    max_norm: f64,
) -> Result<Tensor> {
    if max_norm.is_nan() || max_norm < 0.0 {
        return Err(Error::invalid(format!("clip_grad_norm: max_norm {max_norm} must be >= 0")));
    }
    let _guard = tch::no_grad_guard();
    let grads: Vec<Tensor> = params.iter().map(|p| p.grad()).collect();
    // Every rank must take part with the same list: a parameter without a
    // gradient here counts 0.
    let Some(any) = grads.iter().find(|g| g.defined()) else {
        let zeros = match params.first() {
            Some(p) => group.reducible(&zeros_on_device_of(&[params.len() as i64], p.kind(), p)?)?,
            None => return Ok(Tensor::f_zeros([], (tch::Kind::Float, tch::Device::Cpu))?),
        };
        group.all_reduce(&[zeros.shallow_clone()], ReduceOp::Sum)?;
        return Ok(zeros.f_sum(zeros.kind())?.f_sqrt()?);
    };
    // Where the norms meet: a gradient's off the CPU when there is one.
    let meet =
        grads.iter().filter(|g| g.defined()).find(|g| Device::of(g).is_ok_and(|d| d != Device::Cpu)).unwrap_or(any);
    let world = group.world_size() as f64;
    let squares: Vec<Tensor> = grads
        .iter()
        .zip(params)
        .map(|(g, p)| -> Result<Tensor> {
            if !g.defined() {
                return zeros_on_device_of(&[], any.kind(), any);
            }
            let norm =
                g.f_to_kind(any.kind())?.f_flatten(0, -1)?.f_norm_scalaropt_dim(2.0, [0i64].as_slice(), false)?;
            let square = norm.f_square()?;
            let whole = replicated.iter().any(|r| r.data_ptr() == p.data_ptr() && r.size() == p.size());
            to_device_of(&if whole { square.f_div_scalar(world)? } else { square }, meet)
        })
        .collect::<Result<_>>()?;
    let stacked = group.reducible(&Tensor::f_stack(&squares, 0)?)?;
    group.all_reduce(&[stacked.shallow_clone()], ReduceOp::Sum)?;
    let total = stacked.f_sqrt()?.f_norm_scalaropt_dim(2.0, [0i64].as_slice(), false)?;
    let coef = total.f_add_scalar(1e-6)?.f_reciprocal()?.f_mul_scalar(max_norm)?.f_clamp_max(1.0)?;
    // The coefficient once per device the gradients are on (the host's and
    // the device's under CPU offload).
    let mut placed: Vec<(Device, Tensor)> = Vec::new();
    for g in grads.iter().filter(|g| g.defined()) {
        let on = Device::of(g)?;
        let c = match placed.iter().find(|(d, _)| *d == on) {
            Some((_, c)) => c.shallow_clone(),
            None => {
                let c = to_device_of(&coef, g)?;
                placed.push((on, c.shallow_clone()));
                c
            }
        };
        let _ = g.shallow_clone().f_mul_(&c)?;
    }
    Ok(total)
}

/// The sharded parameter an optimizer's parameter is (the same leaf).
fn find<'a>(params: &'a [&'a ShardedParam], p: &Tensor) -> Option<&'a ShardedParam> {
    params.iter().copied().find(|sp| sp.param.data_ptr() == p.data_ptr() && sp.param.size() == p.size())
}

/// Calls `f(index, sharded)` for the optimizer's parameters (numbered as
/// its state dict numbers them) that a unit shards.
fn for_sharded(
    units: &[Arc<FsdpUnit>],
    optimizer: &dyn Optimizer,
    f: &mut dyn FnMut(usize, &ShardedParam) -> Result<()>,
) -> Result<()> {
    let guards: Vec<_> = units.iter().map(|u| u.lock_params()).collect();
    let all: Vec<&ShardedParam> = guards.iter().flat_map(|g| g.iter()).collect();
    let params = optimizer.param_groups().iter().flat_map(|g| g.params.iter());
    for (i, p) in params.enumerate() {
        if let Some(sp) = find(&all, p) {
            f(i, sp)?;
        }
    }
    Ok(())
}

/// The optimizer's state with every per-parameter tensor shaped as its
/// sharded parameter's shard gathered into the full shape (a collective
/// on every rank, in the state dict's order), each in the host's memory
/// with `to_host` (one full state at a time on the device), else where
/// the shard's was.
pub(crate) fn full_optimizer_state(
    units: &[Arc<FsdpUnit>],
    optimizer: &dyn Optimizer,
    to_host: bool,
) -> Result<Vec<(String, Tensor)>> {
    let mut state = optimizer.state_dict()?;
    let mut shards: Vec<(usize, Vec<i64>, i64, Vec<i64>)> = Vec::new();
    for_sharded(units, optimizer, &mut |i, sp| {
        shards.push((i, sp.shard.size(), sp.rows, sp.shape.clone()));
        Ok(())
    })?;
    let group = match units.first() {
        Some(u) => u.group(),
        None => return Ok(state),
    };
    for (key, t) in state.iter_mut() {
        let Some((i, shard_shape, rows, shape)) = index_of(key).and_then(|i| shards.iter().find(|s| s.0 == i)) else {
            continue;
        };
        let _ = i;
        if t.size() != *shard_shape {
            continue;
        }
        // Through the device when the state is in the host's memory (CPU
        // offload) and the group reduces only there; kept where it was.
        let all = group.all_gather(&group.reducible(t)?)?;
        let all = if to_host { all.f_to_device(tch::Device::Cpu)? } else { to_device_of(&all, t)? };
        let dim0 = shape.first().copied().unwrap_or(1);
        let mut stacked = vec![rows * group.world_size() as i64];
        stacked.extend(shape.iter().skip(1));
        *t = all.f_reshape(&stacked)?.f_narrow(0, 0, dim0)?.f_reshape(shape)?.f_contiguous()?;
    }
    Ok(state)
}

/// Loads back into `optimizer` its state with every per-parameter tensor
/// of a sharded parameter's full shape cut to this rank's rows (after a
/// checkpoint was restored into the gathered parameters).
pub(crate) fn shard_optimizer_state(units: &[Arc<FsdpUnit>], optimizer: &mut dyn Optimizer) -> Result<()> {
    let mut state = optimizer.state_dict()?;
    let Some(group) = units.first().map(|u| u.group()) else { return Ok(()) };
    let (rank, world) = (group.rank(), group.world_size());
    let mut changed = false;
    for_sharded(units, optimizer, &mut |i, sp| {
        for (key, t) in state.iter_mut() {
            if index_of(key) == Some(i) && t.size() == sp.shape {
                *t = sp.rows_of(t, rank, world)?;
                changed = true;
            }
        }
        Ok(())
    })?;
    if changed {
        optimizer.load_state_dict(&state)?;
    }
    Ok(())
}

/// The parameter number of a state key "state.N.name".
pub(crate) fn index_of(key: &str) -> Option<usize> {
    key.strip_prefix("state.")?.split('.').next()?.parse().ok()
}
