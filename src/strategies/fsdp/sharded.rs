//! A model sharded for FSDP, once, for the trainer's `fsdp` strategy and
//! for host-owned loops (`fulmen_fsdp`): its units and the parameters every
//! rank keeps whole, and what a step does with them (gradients averaged
//! into the shards, clipping by the norm over every shard, the full
//! parameters and optimizer states gathered for checkpoints and cut into
//! shards again, the model whole again at the end).
use super::prefetch::UnitOrder;
use super::settings::{FsdpOptions, ShardingStrategy};
use super::state;
use super::unit::{self, FsdpUnit, MixedPrecision, UnitGroups, UnitLinks, UnitSettings};
use super::wrap;
use crate::distributed::{DistContext, ProcessGroup};
use crate::error::{Error, Result};
use crate::nn::{move_in_place, Module};
use crate::optim::Optimizer;
use crate::tensor::device::{impl_identity, zeros_on_device_of, Device};
use crate::trainer::SharedModel;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tch::Tensor;

/// Locks `m`, taking the value of a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process groups a sharded model communicates in.
#[derive(Clone)]
pub(crate) struct FsdpGroups {
    /// The whole job: rank 0's state is broadcast in it, replicated
    /// parameters' gradients averaged over it.
    pub job: Arc<ProcessGroup>,
    /// The ranks a unit is sharded across: the job, or under a hybrid
    /// sharding the ranks of this node.
    pub shard: Arc<ProcessGroup>,
    /// Under a hybrid sharding across several nodes, the ranks of the other
    /// nodes holding the same shards (the same local rank on every node).
    pub replicas: Option<Arc<ProcessGroup>>,
}

impl FsdpGroups {
    /// The groups of `options`' sharding in the job of `ctx` over
    /// `num_nodes` nodes (a hybrid sharding makes the subgroups).
    pub fn new(ctx: &DistContext, options: &FsdpOptions, num_nodes: usize) -> Result<Self> {
        let job = Arc::clone(&ctx.group);
        if !options.sharding_strategy.is_hybrid() {
            return Ok(FsdpGroups { shard: Arc::clone(&job), job, replicas: None });
        }
        let (shard, replicas) = hybrid_groups(ctx, num_nodes)?;
        Ok(FsdpGroups { job, shard, replicas })
    }
}

/// The groups of a hybrid sharding over `nodes` nodes of equal size (torch's
/// `_init_intra_and_inter_node_groups`): this node's ranks, where a unit is
/// sharded, and this local rank's replicas on the other nodes (none with
/// one node). Every rank makes every group's name, in torch's order.
fn hybrid_groups(ctx: &DistContext, nodes: usize) -> Result<(Arc<ProcessGroup>, Option<Arc<ProcessGroup>>)> {
    let world = ctx.world_size();
    if nodes == 0 || world % nodes != 0 {
        return Err(Error::invalid(format!(
            "HYBRID_SHARD: the job's {world} ranks do not split into num_nodes={nodes} nodes of equal size"
        )));
    }
    if nodes == 1 {
        return Ok((Arc::clone(&ctx.group), None));
    }
    let per_node = world / nodes;
    let nodes_ranks: Vec<Vec<usize>> = (0..nodes).map(|n| (n * per_node..(n + 1) * per_node).collect()).collect();
    let replica_ranks: Vec<Vec<usize>> =
        (0..per_node).map(|l| (0..nodes).map(|n| n * per_node + l).collect()).collect();
    let missing = || Error::state("HYBRID_SHARD: this rank is in none of the groups");
    let shard = ctx.group.new_groups(&nodes_ranks)?.ok_or_else(missing)?;
    let replicas = ctx.group.new_groups(&replica_ranks)?.ok_or_else(missing)?;
    Ok((Arc::new(shard), Some(Arc::new(replicas))))
}

/// A model as FSDP shards it.
pub(crate) struct ShardedModel {
    model: SharedModel,
    /// The units, innermost first, the root last (empty under NO_SHARD).
    units: Vec<Arc<FsdpUnit>>,
    /// Parameters every rank holds whole, their gradients averaged at the
    /// step: all of them under NO_SHARD, else the 0-dim ones.
    replicated: Vec<Tensor>,
    groups: FsdpGroups,
    /// Nothing is sharded (NO_SHARD): clipping is local.
    whole: bool,
    /// Whether the current step's backward averages the gradients, shared
    /// with the units' hooks.
    sync: Arc<AtomicBool>,
    /// A training forward ran since the gradients were last averaged.
    pending: bool,
    /// Unlinked already ([`ShardedModel::unwrap`] or
    /// [`ShardedModel::abandon`]): dropping it does nothing more.
    released: bool,
    /// The order the units run in, for prefetching.
    order: Arc<UnitOrder>,
    /// The order the end of a backward reduces the units in (indices
    /// into `units`: the root first, then pre-order, as FSDP2).
    end_order: Vec<usize>,
    /// The parameters can hold host memory in place (`set_data` between
    /// their device's tensors and the CPU's): gathering to the host is
    /// possible (not for XLA's tensors, for one).
    host_moves: bool,
}

impl ShardedModel {
    /// Shards `model` as `options` says: checks that every rank has the
    /// same parameters, copies rank 0's parameters and buffers to every
    /// rank (torch's `sync_module_states`, unless off), marks the
    /// checkpointed modules, and makes the units (none under NO_SHARD).
    /// With `place_on`, a model not there yet moves to that device on the
    /// way, unit by unit (the buffers and the parameters kept whole first,
    /// then each unit's parameters just before it is sharded), so the
    /// device never holds the whole model; without it the model is on
    /// this rank's device already. With `sync_batchnorm` and several
    /// ranks, the BatchNorms normalise over the job's batch while the
    /// model is sharded. A model another FSDP wrapper still shards is
    /// refused.
    pub fn wrap(
        model: SharedModel,
        groups: &FsdpGroups,
        options: &FsdpOptions,
        sync_batchnorm: bool,
        place_on: Option<Device>,
    ) -> Result<Self> {
        let mut m = lock(&model);
        if m.is_linked_to_shards() {
            return Err(Error::state(
                "the model is already sharded by FSDP (a fulmen_fsdp wrapper or a running fit holds it): unwrap it \
                 first",
            ));
        }
        if m.is_tensor_parallel() {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                "FSDP of a tensor-parallel model (2-D parallelism) is not supported yet: unshard and free its \
                 fulmen_tensor_parallel wrapper first",
            ));
        }
        // A model built on the meta device gets its values in host memory,
        // unit by unit, as it is sharded.
        let place_on = if m.holds_meta() { place_on.or(Some(Device::Cpu)) } else { place_on };
        let off_device = match place_on {
            Some(d) => !everything_on(&m, d)?,
            None => false,
        };
        // The placement's collectives differ from the whole model's under
        // sync_module_states: the ranks agree (one rank's model off the
        // device makes every rank place unit by unit).
        let off_device = if options.sync_module_states && groups.job.world_size() > 1 {
            groups.job.reduce_decision(off_device, false)?
        } else {
            off_device
        };
        let place_on = place_on.filter(|_| off_device);
        let place_on = match place_on {
            // Where tensors cannot move one by one (XLA), the whole model first.
            Some(d) if !m.moves_in_place(d)? => {
                m.materialize().map_err(materializing)?;
                m.to_device(d)?;
                None
            }
            other => other,
        };
        let host_moves = m.moves_in_place(Device::Cpu)?;
        if options.cpu_offload && !host_moves {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                "fsdp_cpu_offload: this device's parameters cannot hold host memory in place (libtorch's set_data \
                 refuses it between the two tensor types, as for XLA)",
            ));
        }
        // Planned once the tensors are those the model keeps.
        let whole = options.sharding_strategy == ShardingStrategy::NoShard;
        let plan = |m: &Module| if whole { (Vec::new(), m.parameters()) } else { wrap::plan(m, options) };
        let (mut planned_units, mut replicated) = plan(&m);
        if m.holds_meta() {
            // Everything but the units' parameters gets its values now, each
            // unit's just before the unit shards them; planned again, for
            // the tensors the model now keeps.
            let held = held_by(&planned_units)?;
            m.materialize_where(&|t| impl_identity(t).is_ok_and(|id| !held.contains(&id))).map_err(materializing)?;
            (planned_units, replicated) = plan(&m);
        }
        if let Some(d) = place_on {
            let held = held_by(&planned_units)?;
            m.move_to_device_except(d, &|t| impl_identity(t).is_ok_and(|id| held.contains(&id)))
                .map_err(|e| e.context("moving the buffers and the parameters kept whole to the device"))?;
        }
        if options.sync_module_states {
            let params = m.parameters();
            let buffers: Vec<Tensor> = m.named_buffers().into_iter().map(|(_, t)| t).collect();
            match place_on {
                None => {
                    groups.job.verify_params(&params)?;
                    let state: Vec<Tensor> = params.iter().chain(&buffers).map(Tensor::shallow_clone).collect();
                    groups.job.broadcast_coalesced(&state, 0)?;
                }
                Some(d) => {
                    // The shapes from stand-ins on the device (the
                    // parameters are still on the host); the values unit by
                    // unit below, once each is on the device.
                    groups.job.verify_params(&stand_ins(&params, d)?)?;
                    let state: Vec<Tensor> = replicated.iter().chain(&buffers).map(Tensor::shallow_clone).collect();
                    groups.job.broadcast_coalesced(&state, 0)?;
                }
            }
        }
        wrap::mark_checkpointed(&mut m, &options.checkpoint_classes)?;
        if sync_batchnorm && groups.job.world_size() > 1 {
            m.set_batch_norm_sync(Some(Arc::new(crate::strategies::ddp::GroupSum(Arc::clone(&groups.job)))));
        }
        let sync = Arc::new(AtomicBool::new(true));
        let mut made = ShardedModel {
            model: Arc::clone(&model),
            units: Vec::new(),
            replicated,
            groups: groups.clone(),
            whole,
            sync,
            pending: false,
            released: false,
            order: UnitOrder::new(options.forward_prefetch, options.backward_prefetch),
            end_order: Vec::new(),
            host_moves,
        };
        if whole {
            return Ok(made);
        }
        let reshard = options.sharding_strategy.reshards_after_forward();
        let mp = MixedPrecision { param: options.param_dtype, reduce: options.reduce_dtype };
        let sync_values = options.sync_module_states.then_some(&*groups.job);
        for planned in planned_units {
            let unit_groups = UnitGroups { shard: Arc::clone(&groups.shard), replicas: groups.replicas.clone() };
            let after_forward = reshard && !planned.path.is_empty();
            let links =
                UnitLinks { sync: Arc::clone(&made.sync), order: Arc::clone(&made.order), index: made.units.len() };
            let settings = UnitSettings {
                reshard_after_forward: after_forward,
                mp,
                reduce_scatter_unused_params: options.reduce_scatter_unused_params,
                cpu_offload: options.cpu_offload,
            };
            let path = planned.path.clone();
            let unit = materialized(&m, planned.params).and_then(|params| {
                place_unit(&params, place_on, sync_values)?;
                FsdpUnit::new(planned.path, params, unit_groups, settings, links)
            });
            match unit {
                Ok(unit) => made.units.push(unit),
                Err(e) => {
                    // `made` then drops, unlinking the model (its lock
                    // released first): the units made so far keep their
                    // parameters' shards.
                    drop(m);
                    let unit = if path.is_empty() { "the root unit".to_string() } else { format!("unit {path:?}") };
                    return Err(e.context(format!(
                        "sharding FSDP {unit} failed part way: the parameters of the units made so far hold this \
                         rank's rows"
                    )));
                }
            }
        }
        made.order.set_units(&made.units);
        made.end_order = wrap::pre_order(&m, &made.units);
        if let Err(e) = wrap::link(&mut m, &made.units) {
            drop(m);
            return Err(e.context("linking the modules to their FSDP units"));
        }
        drop(m);
        Ok(made)
    }

    /// The units, innermost first.
    pub fn units(&self) -> &[Arc<FsdpUnit>] {
        &self.units
    }

    /// Whether the coming backward averages the gradients (false while
    /// accumulating them without communication).
    pub fn set_sync(&self, sync: bool) {
        self.sync.store(sync, Ordering::SeqCst);
    }

    /// Whether the current step's backward averages the gradients.
    pub fn syncs(&self) -> bool {
        self.sync.load(Ordering::SeqCst)
    }

    /// A training forward begins: each unit counts its gradients afresh,
    /// and the units' order is recorded anew.
    pub fn start_forward(&self) {
        self.order.begin_pass();
        for u in &self.units {
            u.start_backward_count();
        }
    }

    /// Drops the gathers started ahead and not taken (once finished).
    fn cancel_prefetches(&self) {
        if self.order.prefetches() {
            for u in &self.units {
                u.cancel_prefetch();
            }
        }
    }

    /// A training forward ran: the gradients it leads to are averaged at
    /// [`ShardedModel::finish_backward`].
    pub fn mark_pending(&mut self) {
        self.pending = true;
    }

    /// Whether a gradient arrived in a unit since the last forward began.
    pub fn gradients_arrived(&self) -> bool {
        self.units.iter().any(|u| u.gradients_arrived())
    }

    /// The first error a backward hook met, taken.
    pub fn take_hook_error(&self) -> Result<()> {
        for u in &self.units {
            if let Some(e) = u.take_hook_error() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Averages the gradients of a step into the shards (the units whose
    /// backward did not complete its count, and the replicated
    /// parameters), once after the backward passes of a step; the error of
    /// a backward hook first.
    pub fn finish_backward(&mut self) -> Result<()> {
        // The optimizers step next: nothing gathered ahead outlives that.
        self.cancel_prefetches();
        self.take_hook_error()?;
        if !std::mem::take(&mut self.pending) {
            return Ok(());
        }
        self.end_backward()?;
        self.units
            .iter()
            .try_for_each(|u| u.reduce_if_dirty())
            .and_then(|()| unit::reduce_replicated(&self.groups.job, &self.replicated))
            .map_err(|e| e.context("averaging the gradients over the FSDP shards"))
    }

    /// The end of a synchronising backward under
    /// `reduce_scatter_unused_params`: the units not reduced in it (the
    /// root, units fed the data, units without gradients, with zeros), in
    /// FSDP2's final-callback order (the root first, then pre-order).
    /// Nothing in the default mode or while accumulating.
    pub fn end_backward(&self) -> Result<()> {
        if !self.syncs() {
            return Ok(());
        }
        self.end_order
            .iter()
            .try_for_each(|i| self.units[*i].reduce_at_end_of_backward())
            .map_err(|e| e.context("averaging the gradients over the FSDP shards at the end of the backward"))?;
        // The next backward reduces every unit again.
        self.units.iter().for_each(|u| u.begin_backward_pass());
        Ok(())
    }

    /// Every unit sharded (between steps and batches), nothing gathered
    /// ahead; a new pass of the units begins.
    pub fn reshard_all(&self) -> Result<()> {
        self.cancel_prefetches();
        self.order.begin_pass();
        for u in &self.units {
            u.reshard()?;
        }
        Ok(())
    }

    /// An optimizer's zero_grad ran over the parameters at `ptrs`: the
    /// shard gradients set aside while their units are gathered are
    /// dropped, or zeroed.
    pub fn zero_parked(&self, ptrs: &std::collections::HashSet<usize>, set_to_none: bool) -> Result<()> {
        for u in &self.units {
            u.zero_parked(ptrs, set_to_none)?;
        }
        Ok(())
    }

    /// Every parameter's gradient, and the ones set aside, dropped (or
    /// zeroed): `model.zero_grad()` at any point of a step.
    pub fn zero_grad(&self, set_to_none: bool) -> Result<()> {
        let params = lock(&self.model).parameters();
        for p in &params {
            let g = p.grad();
            if !g.defined() {
                continue;
            }
            if set_to_none {
                crate::tensor::grad::set_grad(p, None)?;
            } else {
                let _ = tch::no_grad(|| g.shallow_clone().f_zero_())?;
            }
        }
        let ptrs = params.iter().map(|p| p.data_ptr() as usize).collect();
        self.zero_parked(&ptrs, set_to_none)
    }

    /// Clips the gradients of `params` (shards, replicated ones) by their
    /// norm over every rank's shards, as torch's FSDP `clip_grad_norm_`;
    /// returns the total norm before clipping (0-dim, on the gradients'
    /// device). Under NO_SHARD every rank holds the same averaged
    /// gradients and the norm is local.
    pub fn clip_norm(&self, params: &[Tensor], max_norm: f64) -> Result<Tensor> {
        if self.whole {
            let total = crate::tensor::grad::clip_grad_norm_on_device(params, max_norm, 2.0)?;
            return Ok(total.unwrap_or_else(|| Tensor::from(0.0)));
        }
        state::clip_norm_over_ranks(&self.groups.shard, params, &self.replicated, max_norm)
    }

    /// Every parameter of the model, as the optimizers hold them.
    pub fn parameters(&self) -> Vec<Tensor> {
        lock(&self.model).parameters()
    }

    /// Gathers every unit's full parameters in the shards' own dtype (a
    /// collective): what checkpoints hold. With `to_host` each unit's
    /// values go to the host's memory before the next is gathered, so the
    /// device never holds the whole model.
    pub fn gather_master(&self, to_host: bool) -> Result<()> {
        self.reshard_all()?;
        for u in &self.units {
            if to_host && self.host_moves {
                u.gather_master_to_host()?;
            } else {
                u.gather_master()?;
            }
        }
        Ok(())
    }

    /// After the gathered parameters (and the optimizers' full states)
    /// were given new values, every rank's shards take their rows of them
    /// and the optimizers' states theirs; the units are sharded again.
    pub fn reshard_from_params(&self, optimizers: &mut [&mut dyn Optimizer]) -> Result<()> {
        for u in &self.units {
            u.reshard_from_params()?;
        }
        for o in optimizers.iter_mut() {
            state::shard_optimizer_state(&self.units, &mut **o)?;
        }
        Ok(())
    }

    /// `optimizer`'s state with the sharded parameters' entries gathered
    /// into their full shapes (a collective), each in the host's memory
    /// with `to_host`, else where the shard's state is.
    pub fn full_optimizer_state(&self, optimizer: &dyn Optimizer, to_host: bool) -> Result<Vec<(String, Tensor)>> {
        state::full_optimizer_state(&self.units, optimizer, to_host)
    }

    /// The units' full parameters gathered into their own buffers and the
    /// optimizers' states loaded back in their full shapes (a collective),
    /// then [`ShardedModel::unwrap`].
    /// With `to_host` the parameters and states come back in the host's
    /// memory (see [`ShardedModel::unwrap`]).
    pub fn unwrap_with(self, optimizers: &mut [&mut dyn Optimizer], to_host: bool) -> Result<()> {
        let full: Vec<Vec<(String, Tensor)>> =
            optimizers.iter().map(|o| self.full_optimizer_state(&**o, to_host)).collect::<Result<_>>()?;
        self.unwrap(to_host)?;
        for (o, state) in optimizers.iter_mut().zip(full) {
            o.load_state_dict(&state).map_err(|e| e.context("the optimizer state after FSDP"))?;
        }
        Ok(())
    }

    /// Gives the model its full parameters back for good and unlinks it
    /// (a collective); with `to_host` each unit's parameters go to the
    /// host's memory once gathered (the end of a run, where the model goes
    /// there anyway), so the device never holds the whole model.
    pub fn unwrap(mut self, to_host: bool) -> Result<()> {
        let mut first = None;
        for u in &self.units {
            if let Err(e) = u.unshard_for_good(to_host && self.host_moves) {
                first.get_or_insert(e);
            }
        }
        let mut m = lock(&self.model);
        wrap::unlink(&mut m);
        m.set_batch_norm_sync(None);
        drop(m);
        self.released = true;
        first.map_or(Ok(()), Err)
    }

    /// Unlinks the model without a collective (the group is broken, or the
    /// host lets go): each parameter keeps what it holds now (this rank's
    /// shard, or its full value while gathered), without the units' hooks
    /// and without a gradient of another shape. Dropping a sharded model
    /// does the same.
    pub fn abandon(mut self) {
        self.detach();
    }

    /// Lets go of the gathers started ahead without waiting for them
    /// (the model is let go; the group may be broken).
    pub fn forget_prefetches(&self) {
        for u in &self.units {
            u.forget_prefetch();
        }
    }

    /// Unlinks the model, without waiting for a gather started ahead.
    fn detach(&mut self) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        self.forget_prefetches();
        for u in &self.units {
            u.detach_hooks();
        }
        let mut m = lock(&self.model);
        for p in m.parameters() {
            let g = p.grad();
            if g.defined() && g.size() != p.size() {
                let _ = crate::tensor::grad::set_grad(&p, None);
            }
        }
        wrap::unlink(&mut m);
        m.set_batch_norm_sync(None);
    }

    /// Holds every unit as it is (`true`, after
    /// [`ShardedModel::gather_master`]: forwards leave the full parameters
    /// alone) or lets the step's hooks run again.
    pub fn set_pinned(&self, pinned: bool) {
        for u in &self.units {
            u.set_pinned(pinned);
        }
    }

    /// A mark per parameter kept whole: whether it has a gradient and
    /// where that gradient lives (a backward makes or replaces it).
    pub fn replicated_grad_marks(&self) -> Vec<(bool, usize)> {
        self.replicated
            .iter()
            .map(|p| {
                let g = p.grad();
                if g.defined() {
                    (true, g.data_ptr() as usize)
                } else {
                    (false, 0)
                }
            })
            .collect()
    }
}

/// Whether every parameter and buffer of `m` is on `device`.
fn everything_on(m: &crate::nn::Module, device: Device) -> Result<bool> {
    let mut all = Ok(true);
    m.visit("", &mut |_, t, _| {
        if matches!(all, Ok(true)) {
            all = Device::of(t).map(|d| d == device);
        }
    });
    all
}

/// Tensors of the shapes and dtypes of `params` on `device` that hold one
/// element each (expanded views): what `verify_params` compares.
fn stand_ins(params: &[Tensor], device: Device) -> Result<Vec<Tensor>> {
    let cpu = Tensor::f_zeros([], (tch::Kind::Float, tch::Device::Cpu))?;
    let probe = crate::tensor::device::to_device(&cpu, device, false)?;
    params.iter().map(|p| Ok(zeros_on_device_of(&[], p.f_kind()?, &probe)?.f_expand(p.size(), false)?)).collect()
}

/// The TensorImpls of the planned units' parameters.
fn held_by(units: &[wrap::PlannedUnit]) -> Result<HashSet<usize>> {
    units.iter().flat_map(|u| &u.params).map(impl_identity).collect()
}

/// The error of a model built on the meta device that could not get its
/// values.
fn materializing(e: Error) -> Error {
    e.context("materializing the model built on the meta device")
}

/// A unit's parameters with values: those on the meta device replaced in
/// the model by the CPU tensors their recorded values make.
fn materialized(m: &Module, params: Vec<Tensor>) -> Result<Vec<Tensor>> {
    if !params.iter().any(crate::nn::meta_init::is_meta) {
        return Ok(params);
    }
    let ids = params.iter().map(impl_identity).collect::<Result<HashSet<usize>>>()?;
    let made = m.materialize_where(&|t| impl_identity(t).is_ok_and(|id| ids.contains(&id))).map_err(materializing)?;
    params.into_iter().map(|p| Ok(made.get(&impl_identity(&p)?).map(Tensor::shallow_clone).unwrap_or(p))).collect()
}

/// A unit's parameters moved to `place_on` (when it is given) just before
/// the unit shards them, and rank 0's values copied to every rank then
/// (`sync`: the job's group, with `sync_module_states`).
fn place_unit(params: &[Tensor], place_on: Option<Device>, sync: Option<&ProcessGroup>) -> Result<()> {
    let Some(device) = place_on else { return Ok(()) };
    for p in params {
        move_in_place(p, device)?;
    }
    match sync {
        Some(group) => group.broadcast_coalesced(params, 0),
        None => Ok(()),
    }
}

impl Drop for ShardedModel {
    fn drop(&mut self) {
        self.detach();
    }
}
