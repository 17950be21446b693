//! Fully sharded data parallel (Lightning's `FSDPStrategy`, torch's FSDP2
//! `fully_shard`): one process per device as for DDP, every parameter
//! sharded on dimension 0 across the ranks within units chosen by the wrap
//! policy (`wrap.rs`), gathered around each unit's forward and backward
//! (`unit.rs`), gradients averaged into the shards before the optimizers
//! step on them, gradient clipping by the norm over all shards, and
//! checkpoints with the full state gathered (`state.rs`).
mod settings;
mod state;
mod unit;
mod wrap;

pub(crate) use settings::KEYS;
pub use settings::{FsdpOptions, ShardingStrategy};

use super::ddp::{job_methods, join_job};
use super::strategy::Strategy;
use crate::accelerators::Accelerator;
use crate::distributed::{self, DistContext};
use crate::error::{Error, ErrorCode, Result};
use crate::optim::Optimizer;
use crate::tensor::device::Device;
use crate::trainer::device::Placement;
use crate::trainer::{ClipAlgorithm, LightningModule, OptimizerConfig, SharedModel, TrainerOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tch::Tensor;
use unit::{FsdpUnit, MixedPrecision, UnitGroups};

/// A model as the strategy shards it.
struct Wrapped {
    model: SharedModel,
    /// The units, innermost first, the root last (empty under NO_SHARD).
    units: Vec<Arc<FsdpUnit>>,
    /// Parameters every rank holds whole, their gradients averaged at the
    /// step: all of them under NO_SHARD, else the 0-dim ones.
    replicated: Vec<Tensor>,
}

/// FSDP state of a run.
pub(crate) struct FsdpStrategy {
    placement: Placement,
    ctx: Arc<DistContext>,
    options: FsdpOptions,
    wrapped: Mutex<Option<Wrapped>>,
    /// A training forward ran since the gradients were last averaged.
    pending: bool,
    /// Whether the current step's backward averages the gradients.
    sync: Arc<AtomicBool>,
    /// The run failed: the group is gone, nothing may be gathered.
    failed: bool,
    /// Lightning's `sync_batchnorm`: the model's BatchNorms are
    /// SyncBatchNorms while it is sharded.
    sync_batchnorm: bool,
    /// The ranks a unit is sharded across: the job, or under a hybrid
    /// sharding the ranks of this node.
    shard_group: Arc<distributed::ProcessGroup>,
    /// Under a hybrid sharding across several nodes, the ranks of the other
    /// nodes holding the same shards (the same local rank on every node).
    replicas: Option<Arc<distributed::ProcessGroup>>,
}

/// Locks `m`, taking the value of a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FsdpStrategy {
    /// Joins the distributed job as DDP does.
    pub(crate) fn connect(acc: Arc<dyn Accelerator>, list: &[Device], opts: &TrainerOptions) -> Result<Self> {
        let (mut placement, ctx) = join_job(acc, list, opts, false)?;
        if let Some(scaler) = placement.precision.scaler_mut() {
            // 16-mixed: each rank checks its shards; any rank's inf or NaN
            // skips the step on every rank (torch's ShardedGradScaler).
            let group = Arc::clone(&ctx.group);
            let sync = move |found_inf: bool| group.reduce_decision(found_inf, false);
            scaler.set_found_inf_sync(Some(crate::precision::grad_scaler::FoundInfSync(Arc::new(sync))));
        }
        opts.strategy.fsdp.validate()?;
        let (shard_group, replicas) = if opts.strategy.fsdp.sharding_strategy.is_hybrid() {
            hybrid_groups(&ctx, opts.strategy.num_nodes).map_err(|e| ctx.explain(e))?
        } else {
            (Arc::clone(&ctx.group), None)
        };
        Ok(FsdpStrategy {
            placement,
            ctx,
            options: opts.strategy.fsdp.clone(),
            wrapped: Mutex::new(None),
            pending: false,
            sync: Arc::new(AtomicBool::new(true)),
            failed: false,
            sync_batchnorm: opts.strategy.ddp.sync_batchnorm,
            shard_group,
            replicas,
        })
    }

    /// Averages the gradients of a step into the shards, once after the
    /// backward passes of a step; the error of a backward hook first.
    fn finish_backward(&mut self) -> Result<()> {
        let guard = lock(&self.wrapped);
        let Some(w) = guard.as_ref() else { return Ok(()) };
        for u in &w.units {
            if let Some(e) = u.take_hook_error() {
                return Err(self.ctx.explain(e));
            }
        }
        if !std::mem::take(&mut self.pending) {
            return Ok(());
        }
        let reduced = w
            .units
            .iter()
            .try_for_each(|u| u.reduce_if_dirty())
            .and_then(|()| unit::reduce_replicated(&self.ctx.group, &w.replicated));
        reduced.map_err(|e| self.ctx.explain(e.context("averaging the gradients over the FSDP shards")))
    }

    /// Every unit sharded (between steps and batches).
    fn reshard_all(&self) -> Result<()> {
        if let Some(w) = lock(&self.wrapped).as_ref() {
            for u in &w.units {
                u.reshard()?;
            }
        }
        Ok(())
    }

    /// Gives the model its full parameters back and unlinks it.
    fn unwrap(&self) -> Result<()> {
        if self.failed {
            return Ok(());
        }
        let Some(w) = lock(&self.wrapped).take() else { return Ok(()) };
        let mut first = None;
        for u in &w.units {
            if let Err(e) = u.unshard_for_good() {
                first.get_or_insert(e);
            }
        }
        let mut m = lock(&w.model);
        wrap::unlink(&mut m);
        m.set_batch_norm_sync(None);
        drop(m);
        first.map_or(Ok(()), |e| Err(self.ctx.explain(e)))
    }

    /// Shards the module's model into units (or, NO_SHARD, keeps it whole).
    fn wrap(&mut self, model: SharedModel) -> Result<()> {
        let mut m = lock(&model);
        let params = m.parameters();
        let buffers: Vec<Tensor> = m.named_buffers().into_iter().map(|(_, t)| t).collect();
        // Every rank starts from rank 0's state (torch's sync_module_states).
        self.ctx.group.verify_params(&params)?;
        let state: Vec<Tensor> = params.iter().chain(&buffers).map(Tensor::shallow_clone).collect();
        self.ctx.group.broadcast_coalesced(&state, 0)?;
        wrap::mark_checkpointed(&mut m, &self.options.checkpoint_classes)?;
        if self.sync_batchnorm && self.ctx.world_size() > 1 {
            m.set_batch_norm_sync(Some(Arc::new(crate::strategies::ddp::GroupSum(Arc::clone(&self.ctx.group)))));
        }
        if self.options.sharding_strategy == ShardingStrategy::NoShard {
            drop(m);
            *lock(&self.wrapped) = Some(Wrapped { model, units: Vec::new(), replicated: params });
            return Ok(());
        }
        let reshard = self.options.sharding_strategy.reshards_after_forward();
        let mut units = Vec::new();
        let (planned_units, replicated) = wrap::plan(&m, &self.options);
        for planned in planned_units {
            let groups = UnitGroups { shard: Arc::clone(&self.shard_group), replicas: self.replicas.clone() };
            let mp = MixedPrecision { param: self.options.param_dtype, reduce: self.options.reduce_dtype };
            let after_forward = reshard && !planned.path.is_empty();
            units.push(FsdpUnit::new(planned.path, planned.params, groups, after_forward, mp, Arc::clone(&self.sync))?);
        }
        wrap::link(&mut m, &units);
        drop(m);
        *lock(&self.wrapped) = Some(Wrapped { model, units, replicated });
        Ok(())
    }

    /// The units, for checkpoints.
    fn units(&self) -> Vec<Arc<FsdpUnit>> {
        lock(&self.wrapped).as_ref().map(|w| w.units.clone()).unwrap_or_default()
    }

    /// The parameters every rank holds whole.
    fn replicated(&self) -> Vec<Tensor> {
        lock(&self.wrapped)
            .as_ref()
            .map(|w| w.replicated.iter().map(Tensor::shallow_clone).collect())
            .unwrap_or_default()
    }

    /// Refuses to gather after the run failed.
    fn check_alive(&self) -> Result<()> {
        if self.failed {
            return Err(Error::state(
                "the FSDP run failed and its process group is gone: the model holds this rank's shards and cannot \
                 be gathered into a checkpoint",
            ));
        }
        Ok(())
    }
}

/// The groups of a hybrid sharding over `nodes` nodes of equal size (torch's
/// `_init_intra_and_inter_node_groups`): this node's ranks, where a unit is
/// sharded, and this local rank's replicas on the other nodes (none with
/// one node). Every rank makes every group's name, in torch's order.
fn hybrid_groups(
    ctx: &DistContext,
    nodes: usize,
) -> Result<(Arc<distributed::ProcessGroup>, Option<Arc<distributed::ProcessGroup>>)> {
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

impl Strategy for FsdpStrategy {
    job_methods!();

    /// Shards the model for every run (Lightning wraps for evaluation
    /// too); a model already sharded (configure_model) is gathered and
    /// sharded again with what it holds now.
    fn wrap_model(&mut self, module: &dyn LightningModule, _training: bool) -> Result<()> {
        let Some(model) = module.model() else {
            return Err(Error::state(
                "fsdp needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        self.unwrap()?;
        self.wrap(model).map_err(|e| self.ctx.explain(e.context("sharding the model (fsdp)")))
    }

    /// Before each batch every unit is sharded again (the root unit and
    /// units an evaluation forward left gathered).
    fn batch_to_device(&self, batch: Vec<Tensor>) -> Result<Vec<Tensor>> {
        self.reshard_all()?;
        self.placement.prepare_batch(batch)
    }

    /// `sync` false: the backward keeps the full-sized gradients
    /// (accumulation without communication until the stepping micro-batch).
    fn pre_forward(&mut self, sync: bool) -> Result<()> {
        self.sync.store(sync, Ordering::SeqCst);
        for u in self.units() {
            u.start_backward_count();
        }
        Ok(())
    }

    fn post_forward(&mut self, _loss: &Tensor) -> Result<()> {
        self.pending = true;
        Ok(())
    }

    fn prepare_manual_backward(&mut self, _loss: &Tensor) -> Result<()> {
        self.pending = true;
        Ok(())
    }

    fn backward(&mut self, loss: &Tensor) -> Result<()> {
        self.pending = true;
        self.placement.precision.backward(loss)?;
        for u in self.units() {
            if let Some(e) = u.take_hook_error() {
                return Err(self.ctx.explain(e));
            }
        }
        Ok(())
    }

    fn on_zero_grad(&mut self, optimizer: &dyn Optimizer, set_to_none: bool) -> Result<()> {
        let params = optimizer.param_groups().iter().flat_map(|g| g.params.iter());
        let ptrs: std::collections::HashSet<usize> = params.map(|p| p.data_ptr() as usize).collect();
        for u in self.units() {
            u.zero_parked(&ptrs, set_to_none)?;
        }
        Ok(())
    }

    fn unscale_gradients(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.finish_backward()?;
        let opts: Vec<&mut dyn Optimizer> = configs.iter_mut().map(|c| c.optimizer.as_mut() as _).collect();
        self.placement.precision.unscale_gradients(&opts)
    }

    fn unscale_gradients_once(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.finish_backward()?;
        let opts: Vec<&mut dyn Optimizer> = configs.iter_mut().map(|c| c.optimizer.as_mut() as _).collect();
        self.placement.precision.unscale_gradients_once(&opts)
    }

    /// By value: each shard's entries; by norm: the norm over every rank's
    /// shards, as torch's FSDP `clip_grad_norm_`.
    fn clip_gradients(&mut self, configs: &mut [OptimizerConfig], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        self.finish_backward()?;
        let params: Vec<Tensor> = configs
            .iter()
            .flat_map(|c| c.optimizer.param_groups().iter().flat_map(|g| g.params.iter().map(Tensor::shallow_clone)))
            .collect();
        self.clip_params(&params, value, algorithm)
    }

    fn clip_params(&self, params: &[Tensor], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        let whole = self.options.sharding_strategy == ShardingStrategy::NoShard;
        match algorithm {
            ClipAlgorithm::Norm if !whole => {
                let replicated = self.replicated();
                state::clip_norm_over_ranks(&self.shard_group, params, &replicated, value)
                    .map_err(|e| self.ctx.explain(e))
            }
            _ => self.placement.precision.clip_params(params, value, algorithm),
        }
    }

    fn closure_refusal(&self) -> Option<&'static str> {
        Some(
            "an optimizer that re-evaluates the loss in its step does not run under strategy \"fsdp\" (each rank \
             holds a shard of the parameters between steps): use ddp or one device",
        )
    }

    fn optimizer_step(&mut self, configs: &mut [OptimizerConfig]) -> Result<Vec<bool>> {
        self.finish_backward()?;
        let mut opts: Vec<&mut dyn Optimizer> = configs.iter_mut().map(|c| c.optimizer.as_mut() as _).collect();
        self.placement.precision.optimizer_step(&mut opts)
    }

    /// Every rank takes part in gathering a checkpoint; rank 0 writes it.
    fn saves_checkpoints(&self) -> bool {
        true
    }

    fn gathers_checkpoints(&self) -> bool {
        true
    }

    fn writes_checkpoints(&self) -> bool {
        self.ctx.is_global_zero()
    }

    fn unshard_params(&mut self) -> Result<()> {
        self.check_alive()?;
        self.reshard_all()?;
        for u in self.units() {
            u.gather_master().map_err(|e| self.ctx.explain(e))?;
        }
        Ok(())
    }

    fn reshard_params(&mut self, configs: &mut [OptimizerConfig], restored: bool) -> Result<()> {
        let units = self.units();
        if restored {
            for u in &units {
                u.reshard_from_params()?;
            }
            for c in configs.iter_mut() {
                state::shard_optimizer_state(&units, c.optimizer.as_mut())?;
            }
        }
        self.reshard_all()
    }

    fn sharded_checkpoint(&mut self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        // After a fit the model is whole again (teardown): a checkpoint
        // saved then is written whole, as with "full".
        if !self.options.sharded_checkpoints || lock(&self.wrapped).is_none() {
            return Ok(None);
        }
        self.check_alive()?;
        self.reshard_all()?;
        let mut params = Vec::new();
        for u in self.units() {
            for sp in u.lock_params().iter() {
                params.push(crate::checkpoint::dcp::ShardedParam {
                    param: sp.param.shallow_clone(),
                    shape: sp.shape.clone(),
                    rows: sp.rows,
                });
            }
        }
        Ok(Some(crate::checkpoint::dcp::Sharding {
            group: Arc::clone(&self.ctx.group),
            params,
            shard_rank: self.shard_group.rank(),
            writes_shards: self.replicas.as_ref().is_none_or(|r| r.rank() == 0),
        }))
    }

    fn optimizer_state_for_checkpoint(&self, optimizer: &dyn Optimizer) -> Result<Vec<(String, Tensor)>> {
        state::full_optimizer_state(&self.units(), optimizer).map_err(|e| self.ctx.explain(e))
    }

    /// Each optimizer's state gathered into the full shapes and loaded back
    /// once the model is whole ([`Strategy::teardown`] follows).
    fn teardown_optimizers(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.check_alive()?;
        let units = self.units();
        let full: Vec<Vec<(String, Tensor)>> = configs
            .iter()
            .map(|c| state::full_optimizer_state(&units, c.optimizer.as_ref()))
            .collect::<Result<_>>()
            .map_err(|e| self.ctx.explain(e))?;
        self.unwrap()?;
        for (c, state) in configs.iter_mut().zip(full) {
            c.optimizer.load_state_dict(&state).map_err(|e| e.context("the optimizer state after FSDP"))?;
        }
        Ok(())
    }

    fn teardown(&self, module: &dyn LightningModule) -> Result<()> {
        let unwrapped = self.unwrap();
        let torn = self.placement.teardown(module);
        unwrapped.and(torn)
    }

    fn fail(&mut self, e: Error) -> Error {
        if matches!(e.code, ErrorCode::Torch | ErrorCode::Distributed) {
            let _ = self.ctx.await_child_failure(std::time::Duration::from_secs(1));
        }
        let e = self.ctx.explain(e);
        self.failed = true;
        // The group is broken: the model is unlinked without gathering.
        if let Some(w) = lock(&self.wrapped).take() {
            for u in &w.units {
                u.detach_hooks();
            }
            let mut m = lock(&w.model);
            wrap::unlink(&mut m);
            m.set_batch_norm_sync(None);
        }
        distributed::abort();
        e
    }
}
