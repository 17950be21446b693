//! Tensor parallelism (torch's `parallelize_module` with `ColwiseParallel`
//! and `RowwiseParallel`), for host-owned loops (`fulmen_tensor_parallel`)
//! and the model_parallel strategy: the layers a plan names keep this
//! rank's part of their weights and compute their part of each result
//! (`src/nn/layers/tensor_parallel.rs`), the collectives inside the
//! forward and backward. The optimizers step on the parts; gradient
//! clipping takes the norm over the whole model; `unshard` gathers the
//! full parameters and optimizer states to save or read them.
use super::lock;
use crate::distributed::DistContext;
use crate::error::{Error, ErrorCode, Result};
use crate::nn::layers::rank_ops::{chunk_of, chunk_span, gather_chunks, RankComm};
use crate::nn::layers::tensor_parallel::{ParallelStyle, TpSlot, RELEASED, SHARDED, WHOLE};
use crate::nn::Module;
use crate::optim::Optimizer;
use crate::strategies::ddp::GroupSum;
use crate::strategies::fsdp::point;
use crate::strategies::fsdp::state::{clip_norm_over_ranks, index_of};
use crate::strategies::gathered_optimizers::GatheredOptimizers;
use crate::trainer::SharedModel;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use tch::Tensor;

/// A parameter split across the ranks.
struct SplitTensor {
    param: Tensor,
    dim: i64,
    /// The full shape.
    full: Vec<i64>,
    /// This rank's part's shape.
    part: Vec<i64>,
    /// While gathered for a checkpoint: the part and its gradient
    /// (undefined when it had none), put back as they were unless a
    /// checkpoint was loaded meanwhile.
    parked: Option<(Tensor, Tensor)>,
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
    unsharded_optimizers: GatheredOptimizers,
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
        // Each layer sets the size it splits when it takes its slot.
        let slot = |style| TpSlot { style, comm: Arc::clone(&as_comm), phase: Arc::clone(&phase), split_size: 0 };
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
        // Every part made first (out of memory on one rank fails every
        // rank, with nothing split), then the parameters pointed at them.
        let (rank, world) = (group.rank(), group.world_size());
        let cut = |param: &Tensor, dim: i64| chunk_of(param, dim, rank, world);
        let parts: Result<Vec<(Tensor, i64, Tensor)>> = linked
            .into_iter()
            .filter_map(|(_, param, dim)| dim.map(|d| (param, d)))
            .map(|(param, dim)| Ok((cut(&param, dim)?, dim, param)))
            .collect();
        let parts = match group.agree(parts, "tensor parallel: cutting this rank's parts") {
            Ok(p) => p,
            Err(e) => return undo(&mut m, e),
        };
        let mut split = Vec::new();
        for (mine, dim, param) in parts {
            let full = param.size();
            point(&param, &mine)?;
            crate::tensor::grad::set_grad(&param, None)?;
            split.push(SplitTensor { param, dim, part: mine.size(), full, parked: None });
        }
        drop(m);
        Ok(TensorParallel {
            model,
            ctx,
            comm,
            phase,
            paths,
            split,
            unsharded_optimizers: GatheredOptimizers::default(),
        })
    }

    /// Whether the parameters hold their full values.
    fn whole(&self) -> bool {
        self.phase.load(Ordering::Acquire) == WHOLE
    }

    /// The split parameter `p` is (the same leaf), if it is one.
    fn split_of(&self, p: &Tensor) -> Option<&SplitTensor> {
        self.split.iter().find(|s| s.param.data_ptr() == p.data_ptr() && s.param.size() == p.size())
    }

    /// Each split parameter and its cut, as a sharded checkpoint writes
    /// and reads them (this rank's part is its data); `None` while the
    /// parameters are gathered whole.
    pub(crate) fn shards(&self) -> Option<Vec<crate::checkpoint::dcp::ShardedParam>> {
        if self.whole() {
            return None;
        }
        let world = self.comm.world_size();
        let cut = |s: &SplitTensor| crate::checkpoint::dcp::Cut {
            shape: s.full.clone(),
            dim: s.dim as usize,
            per_rank: chunk_span(s.full[s.dim as usize], 0, world).1,
            padded: false,
        };
        Some(
            self.split
                .iter()
                .map(|s| crate::checkpoint::dcp::ShardedParam { param: s.param.shallow_clone(), cut: cut(s) })
                .collect(),
        )
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
        Ok(self.clip_norm(&params, max_norm)?.f_double_value(&[])?)
    }

    /// Clips the gradients of `params` (the model's, split or not) by
    /// their 2-norm over the whole model; the total norm before clipping.
    pub(crate) fn clip_norm(&self, params: &[Tensor], max_norm: f64) -> Result<Tensor> {
        let whole: Vec<Tensor> =
            params.iter().filter(|p| self.split_of(p).is_none()).map(Tensor::shallow_clone).collect();
        clip_norm_over_ranks(&self.ctx.group, params, &whole, max_norm).map_err(|e| self.ctx.explain(e))
    }

    /// Calls `f(state tensor, split parameter)` for every per-parameter
    /// tensor of `state` (an optimizer's) that belongs to a split
    /// parameter and has `shape(split)`.
    fn for_split_state(
        &self,
        optimizer: &dyn Optimizer,
        state: &mut [(String, Tensor)],
        shape: &dyn Fn(&SplitTensor) -> &[i64],
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

    /// `optimizer`'s state with the entries of split parameters gathered
    /// into their full shapes (a collective on every rank, in the state's
    /// order), as a checkpoint holds it.
    pub(crate) fn full_optimizer_state(&self, optimizer: &dyn Optimizer) -> Result<Vec<(String, Tensor)>> {
        let mut state = optimizer.state_dict()?;
        let comm = self.comm.as_ref();
        self.for_split_state(optimizer, &mut state, &|s| &s.part, &mut |t, s| {
            *t = gather_chunks(comm, t, s.dim, s.full[s.dim as usize])?;
            Ok(())
        })
        .map_err(|e| self.ctx.explain(e))?;
        Ok(state)
    }

    /// This rank's part of `t`, a full value of the split parameter `s`.
    fn part_of(&self, t: &Tensor, s: &SplitTensor) -> Result<Tensor> {
        chunk_of(t, s.dim, self.comm.rank(), self.comm.world_size())
    }

    /// `optimizer`'s state with the entries that hold a split parameter's
    /// full shape (a loaded checkpoint's) cut to this rank's part; `None`
    /// when it has none.
    fn optimizer_parts(&self, optimizer: &dyn Optimizer) -> Result<Option<Vec<(String, Tensor)>>> {
        let mut state = optimizer.state_dict()?;
        let mut changed = false;
        self.for_split_state(optimizer, &mut state, &|s| &s.full, &mut |t, s| {
            *t = self.part_of(t, s)?;
            changed = true;
            Ok(())
        })?;
        Ok(changed.then_some(state))
    }

    /// Cuts the entries of `optimizer`'s state that hold a split
    /// parameter's full shape (a loaded checkpoint's) to this rank's part.
    pub(crate) fn cut_optimizer_state(&self, optimizer: &mut dyn Optimizer) -> Result<()> {
        if let Some(state) = self.optimizer_parts(&*optimizer)? {
            optimizer
                .load_state_dict(&state)
                .map_err(|e| e.context("the optimizer's state cut to this rank's part"))?;
        }
        Ok(())
    }

    /// Gathers every split parameter's full value on every rank (a
    /// collective); the layers then compute as plain ones. With `park`
    /// each part and its gradient are kept to be put back by
    /// [`TensorParallel::cut_params`] (a checkpoint's gather); without,
    /// the gradients are dropped. Nothing when already whole.
    pub(crate) fn gather_params(&mut self, park: bool) -> Result<()> {
        if self.whole() {
            return Ok(());
        }
        let comm = self.comm.as_ref();
        let gathered: Vec<Tensor> = self
            .split
            .iter()
            .map(|s| gather_chunks(comm, &s.param.f_detach()?, s.dim, s.full[s.dim as usize]))
            .collect::<Result<_>>()
            .map_err(|e| self.ctx.explain(e))?;
        for (s, full) in self.split.iter_mut().zip(&gathered) {
            s.parked = if park { Some((s.param.f_detach()?, s.param.grad())) } else { None };
            point(&s.param, full)?;
            crate::tensor::grad::set_grad(&s.param, None)?;
        }
        self.phase.store(WHOLE, Ordering::Release);
        Ok(())
    }

    /// Splits the gathered parameters again, locally: each takes back its
    /// parked part and gradient unless `restored` (values were loaded
    /// since: each rank cuts its part of them, without gradients).
    pub(crate) fn cut_params(&mut self, restored: bool) -> Result<()> {
        if !self.whole() {
            return Ok(());
        }
        if let Some(s) = self.split.iter().find(|s| s.param.size() != s.full) {
            return Err(Error::shape(format!(
                "tensor parallel: a split parameter has shape {:?}, its full shape is {:?}",
                s.param.size(),
                s.full
            )));
        }
        let parts: Vec<(Tensor, Option<Tensor>)> = self
            .split
            .iter()
            .map(|s| match (&s.parked, restored) {
                (Some((part, grad)), false) => Ok((part.shallow_clone(), grad.defined().then(|| grad.shallow_clone()))),
                _ => Ok((self.part_of(&s.param, s)?, None)),
            })
            .collect::<Result<_>>()?;
        for (s, (part, grad)) in self.split.iter_mut().zip(&parts) {
            point(&s.param, part)?;
            crate::tensor::grad::set_grad(&s.param, grad.as_ref())?;
            s.parked = None;
        }
        self.phase.store(SHARDED, Ordering::Release);
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
        let states: Vec<Vec<(String, Tensor)>> =
            optimizers.iter().map(|o| self.full_optimizer_state(&**o)).collect::<Result<_>>()?;
        self.gather_params(false)?;
        self.unsharded_optimizers.record(optimizers);
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
        self.unsharded_optimizers.check(
            optimizers,
            "fulmen_tensor_parallel_reshard",
            "fulmen_tensor_parallel_unshard",
        )?;
        // The optimizers' parts first: a failure leaves everything whole,
        // and reshard can be called again.
        let states: Vec<Option<Vec<(String, Tensor)>>> =
            optimizers.iter().map(|o| self.optimizer_parts(&**o)).collect::<Result<_>>()?;
        self.cut_params(true).map_err(|e| e.context("fulmen_tensor_parallel_reshard"))?;
        self.unsharded_optimizers.clear();
        for (o, state) in optimizers.iter_mut().zip(states) {
            if let Some(state) = state {
                o.load_state_dict(&state).map_err(|e| e.context("the optimizer's state cut to this rank's part"))?;
            }
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
