//! Tensor parallelism for a host-owned loop (torch's `parallelize_module`
//! with `ColwiseParallel` and `RowwiseParallel`; the tensor dimension of
//! Lightning's `ModelParallelStrategy`): the layers a plan names keep this
//! rank's part of their weights and compute their part of each result
//! (`src/nn/layers/tensor_parallel.rs`), the collectives inside the
//! forward and backward. The optimizers step on the parts; gradient
//! clipping takes the norm over the whole model; `unshard` gathers the
//! full parameters and optimizer states to save or read them.
use super::ddp::GroupSum;
use super::fsdp::state::{clip_norm_over_ranks, index_of};
use crate::distributed::DistContext;
use crate::error::{Error, ErrorCode, Result};
use crate::nn::layers::rank_ops::RankComm;
use crate::nn::layers::tensor_parallel::{ParallelStyle, TpSlot, RELEASED, SHARDED, WHOLE};
use crate::nn::Module;
use crate::optim::Optimizer;
use crate::trainer::SharedModel;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tch::Tensor;

/// A parameter split across the ranks.
struct SplitTensor {
    param: Tensor,
    dim: i64,
    /// The full shape.
    full: Vec<i64>,
}

/// A model whose planned layers are split across the job's ranks.
pub struct TensorParallel {
    model: SharedModel,
    ctx: Arc<DistContext>,
    comm: Arc<GroupSum>,
    /// [`SHARDED`] or [`WHOLE`], shared with the split layers.
    phase: Arc<AtomicU8>,
    /// The split layers' paths.
    paths: Vec<String>,
    split: Vec<SplitTensor>,
    /// The optimizers whose states `unshard` gathered (their addresses).
    unsharded_optimizers: Vec<usize>,
}

/// Locks `m`, taking the value of a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An optimizer's address, naming it while it lives.
fn address_of(o: &dyn Optimizer) -> usize {
    o as *const dyn Optimizer as *const () as usize
}

/// Points `param` at `data` (`param.data = data`): optimizers keep it.
fn point(param: &Tensor, data: &Tensor) -> Result<()> {
    Ok(param.shallow_clone().f_set_data(data)?)
}

/// The plan as every rank must have it, for the comparison across ranks.
fn encode(plan: &[(String, ParallelStyle)]) -> Vec<u8> {
    plan.iter().map(|(p, s)| format!("{p}={}\n", s.name())).collect::<String>().into_bytes()
}

/// Checks the plan and the model, then links the planned layers to their
/// slots; on error no layer stays linked.
fn link(
    m: &mut Module,
    plan: &[(String, ParallelStyle)],
    slot: &dyn Fn(ParallelStyle) -> TpSlot,
) -> Result<Vec<(String, Tensor, Option<i64>)>> {
    if plan.is_empty() {
        return Err(Error::invalid("tensor parallel: the plan names no layer"));
    }
    for (i, (p, _)) in plan.iter().enumerate() {
        if plan[..i].iter().any(|(q, _)| q == p) {
            return Err(Error::invalid(format!("tensor parallel: the plan names {p:?} twice")));
        }
    }
    if m.holds_meta() {
        return Err(Error::new(
            ErrorCode::Unsupported,
            "tensor parallel: the model is on the meta device; give it values first (fulmen_model_materialize)",
        ));
    }
    if m.is_linked_to_shards() {
        return Err(Error::state(
            "tensor parallel: the model is sharded by FSDP (a fulmen_fsdp wrapper or a running fit)",
        ));
    }
    if m.is_tensor_parallel() {
        return Err(Error::state("tensor parallel: the model is split already (free or unshard its wrapper first)"));
    }
    let mut linked = Vec::new();
    for (i, (path, style)) in plan.iter().enumerate() {
        match m.set_tensor_parallel(path, Some(slot(*style))) {
            Ok(params) => linked.extend(params),
            Err(e) => {
                unlink(m, plan[..i].iter().map(|(p, _)| p.as_str()));
                return Err(e.context(format!("the layer {path:?}")));
            }
        }
    }
    Ok(linked)
}

/// Makes the layers at `paths` whole again (their parameters as they are).
fn unlink<'a>(m: &mut Module, paths: impl IntoIterator<Item = &'a str>) {
    for p in paths {
        let _ = m.set_tensor_parallel(p, None);
    }
}

impl TensorParallel {
    /// Splits the layers `plan` names (module path, style) across the ranks
    /// of `ctx`'s job, after checking that every rank has the same plan and
    /// parameters and copying rank 0's parameters and buffers to every rank
    /// (torch's `distribute_tensor` takes rank 0's values too). The model
    /// is on this rank's device already.
    pub fn new(ctx: Arc<DistContext>, model: SharedModel, plan: &[(String, ParallelStyle)]) -> Result<Self> {
        let group = Arc::clone(&ctx.group);
        let comm = Arc::new(GroupSum(Arc::clone(&group)));
        let phase = Arc::new(AtomicU8::new(SHARDED));
        let mut m = lock(&model);
        let as_comm: Arc<dyn RankComm> = comm.clone();
        let slot = |style| TpSlot { style, comm: Arc::clone(&as_comm), phase: Arc::clone(&phase) };
        let paths: Vec<String> = plan.iter().map(|(p, _)| p.clone()).collect();
        // `link` undoes its own failure; after it, this call undoes only
        // what it linked (a model split by another wrapper stays so).
        let local = link(&mut m, plan, &slot);
        let linked_here = local.is_ok();
        let undo = |m: &mut Module, e: Error| {
            if linked_here {
                unlink(m, paths.iter().map(String::as_str));
            }
            Err(ctx.explain(e))
        };
        let linked = match group.agree(local, "tensor parallel: splitting the layers") {
            Ok(l) => l,
            Err(e) => return undo(&mut m, e),
        };
        let same_plan =
            group.all_gather_bytes(&encode(plan)).and_then(|all| match all.iter().position(|p| *p != all[0]) {
                Some(r) => Err(Error::invalid(format!(
                    "tensor parallel: rank {r}'s plan differs from rank 0's (every rank must split the same layers \
                     the same way)"
                ))),
                None => Ok(()),
            });
        let synced = same_plan.and_then(|()| {
            let params = m.parameters();
            group.verify_params(&params)?;
            let buffers = m.named_buffers().into_iter().map(|(_, t)| t);
            let state: Vec<Tensor> = params.into_iter().chain(buffers).collect();
            tch::no_grad(|| group.broadcast_coalesced(&state, 0))
        });
        if let Err(e) = synced {
            return undo(&mut m, e.context("tensor parallel: copying rank 0's model"));
        }
        let (rank, world) = (group.rank() as i64, group.world_size() as i64);
        let mut split = Vec::new();
        for (name, param, dim) in linked {
            let Some(dim) = dim else { continue };
            let full = param.size();
            let part = full[dim as usize] / world;
            let mine = param.f_detach()?.f_narrow(dim, rank * part, part)?.f_contiguous()?.f_detach_copy()?;
            point(&param, &mine).map_err(|e| e.context(format!("splitting {name}")))?;
            crate::tensor::grad::set_grad(&param, None)?;
            split.push(SplitTensor { param, dim, full });
        }
        drop(m);
        Ok(TensorParallel { model, ctx, comm, phase, paths, split, unsharded_optimizers: Vec::new() })
    }

    /// Whether the parameters hold their full values.
    fn whole(&self) -> bool {
        self.phase.load(Ordering::Acquire) == WHOLE
    }

    /// The split parameter `p` is (the same leaf), if it is one.
    fn split_of(&self, p: &Tensor) -> Option<&SplitTensor> {
        self.split.iter().find(|s| s.param.data_ptr() == p.data_ptr() && s.param.size() == p.size())
    }

    /// Clips every parameter's gradient by the 2-norm over the whole model
    /// (the split parameters' parts summed over the ranks, the others
    /// counted once), torch's `clip_grad_norm_` on DTensors; returns the
    /// total norm before clipping.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64> {
        if self.whole() {
            return Err(Error::state(
                "fulmen_tensor_parallel_clip_grad_norm: the model is unsharded; call fulmen_tensor_parallel_reshard \
                 first",
            ));
        }
        let params = lock(&self.model).parameters();
        let whole: Vec<Tensor> =
            params.iter().filter(|p| self.split_of(p).is_none()).map(Tensor::shallow_clone).collect();
        let total =
            clip_norm_over_ranks(&self.ctx.group, &params, &whole, max_norm).map_err(|e| self.ctx.explain(e))?;
        Ok(total.f_double_value(&[])?)
    }

    /// Calls `f(state tensor, split parameter)` for every per-parameter
    /// tensor of `state` (an optimizer's) that belongs to a split
    /// parameter and has `shape(split)`.
    fn for_split_state(
        &self,
        optimizer: &dyn Optimizer,
        state: &mut [(String, Tensor)],
        shape: &dyn Fn(&SplitTensor) -> Vec<i64>,
        f: &mut dyn FnMut(&mut Tensor, &SplitTensor) -> Result<()>,
    ) -> Result<()> {
        let params: Vec<&Tensor> = optimizer.param_groups().iter().flat_map(|g| g.params.iter()).collect();
        for (key, t) in state.iter_mut() {
            let Some(s) = index_of(key).and_then(|i| params.get(i)).and_then(|p| self.split_of(p)) else { continue };
            if t.size() == shape(s) {
                f(t, s)?;
            }
        }
        Ok(())
    }

    /// Gathers every split parameter's full value and the `optimizers`'
    /// states into their full shapes, on every rank (a collective); the
    /// gradients are dropped. The model then computes as a plain model on
    /// every rank, and it and the optimizers can be saved, read or loaded,
    /// until [`TensorParallel::reshard`]. Nothing when already whole.
    pub fn unshard(&mut self, optimizers: &mut [&mut dyn Optimizer]) -> Result<()> {
        if self.whole() {
            return Ok(());
        }
        let comm = self.comm.as_ref();
        let mut states = Vec::new();
        for o in optimizers.iter() {
            let mut state = o.state_dict()?;
            let part = |s: &SplitTensor| s.param.size();
            self.for_split_state(&**o, &mut state, &part, &mut |t, s| {
                *t = comm.gather(t, s.dim)?;
                Ok(())
            })
            .map_err(|e| self.ctx.explain(e))?;
            states.push(state);
        }
        let gathered: Vec<Tensor> = self
            .split
            .iter()
            .map(|s| comm.gather(&s.param.f_detach()?, s.dim))
            .collect::<Result<_>>()
            .map_err(|e| self.ctx.explain(e))?;
        for (s, full) in self.split.iter().zip(&gathered) {
            point(&s.param, full)?;
            crate::tensor::grad::set_grad(&s.param, None)?;
        }
        self.phase.store(WHOLE, Ordering::Release);
        self.unsharded_optimizers = optimizers.iter().map(|o| address_of(&**o)).collect();
        for (o, state) in optimizers.iter_mut().zip(states) {
            o.load_state_dict(&state).map_err(|e| e.context("the optimizer's state in full shapes"))?;
        }
        Ok(())
    }

    /// After [`TensorParallel::unshard`]: every rank keeps its part of the
    /// parameters' current values (loaded ones included) and of the
    /// `optimizers`' states (those given to unshard); the gradients are
    /// dropped. Local: no collective.
    pub fn reshard(&mut self, optimizers: &mut [&mut dyn Optimizer]) -> Result<()> {
        if !self.whole() {
            return Err(Error::state(
                "fulmen_tensor_parallel_reshard: the model is split already (it follows fulmen_tensor_parallel_unshard)",
            ));
        }
        let mut given: Vec<usize> = optimizers.iter().map(|o| address_of(&**o)).collect();
        let mut gathered = self.unsharded_optimizers.clone();
        given.sort_unstable();
        gathered.sort_unstable();
        if given != gathered {
            return Err(Error::invalid(format!(
                "fulmen_tensor_parallel_reshard: pass the optimizers given to fulmen_tensor_parallel_unshard ({} of \
                 them), whose states are whole now",
                gathered.len()
            )));
        }
        if let Some(s) = self.split.iter().find(|s| s.param.size() != s.full) {
            return Err(Error::shape(format!(
                "fulmen_tensor_parallel_reshard: a split parameter has shape {:?}, its full shape is {:?}",
                s.param.size(),
                s.full
            )));
        }
        let (rank, world) = (self.comm.rank() as i64, self.comm.world_size() as i64);
        let part_of = |t: &Tensor, s: &SplitTensor| -> Result<Tensor> {
            let part = s.full[s.dim as usize] / world;
            Ok(t.f_detach()?.f_narrow(s.dim, rank * part, part)?.f_contiguous()?.f_detach_copy()?)
        };
        let mut states = Vec::new();
        for o in optimizers.iter() {
            let mut state = o.state_dict()?;
            let full = |s: &SplitTensor| s.full.clone();
            self.for_split_state(&**o, &mut state, &full, &mut |t, s| {
                *t = part_of(t, s)?;
                Ok(())
            })?;
            states.push(state);
        }
        let parts: Vec<Tensor> = self.split.iter().map(|s| part_of(&s.param, s)).collect::<Result<_>>()?;
        for (s, part) in self.split.iter().zip(&parts) {
            point(&s.param, part)?;
            crate::tensor::grad::set_grad(&s.param, None)?;
        }
        self.phase.store(SHARDED, Ordering::Release);
        self.unsharded_optimizers.clear();
        for (o, state) in optimizers.iter_mut().zip(states) {
            o.load_state_dict(&state).map_err(|e| e.context("the optimizer's state cut to this rank's part"))?;
        }
        Ok(())
    }
}

impl Drop for TensorParallel {
    /// Lets the model go without a collective: after
    /// [`TensorParallel::unshard`] it is a plain model again; otherwise its
    /// split layers keep this rank's parts and refuse to run.
    fn drop(&mut self) {
        if self.whole() {
            unlink(&mut lock(&self.model), self.paths.iter().map(String::as_str));
        } else {
            self.phase.store(RELEASED, Ordering::Release);
        }
    }
}
