//! Fully sharded data parallel (Lightning's `FSDPStrategy`, torch's FSDP2
//! `fully_shard`): one process per device as for DDP, every parameter
//! sharded on dimension 0 across the ranks within units chosen by the wrap
//! policy (`wrap.rs`), gathered around each unit's forward and backward
//! (`unit.rs`; the next unit's gather started ahead, `prefetch.rs`),
//! gradients averaged into the shards before the optimizers
//! step on them, gradient clipping by the norm over all shards, and
//! checkpoints with the full state gathered (`state.rs`).
mod host;
mod prefetch;
mod settings;
mod sharded;
pub(crate) mod state;
mod unit;
mod wrap;

pub use host::FsdpHostLoop;
pub(crate) use settings::KEYS;
pub use settings::{FsdpOptions, ShardingStrategy};
pub(crate) use sharded::{FsdpGroups, ShardedModel};
pub(crate) use unit::point;

use super::ddp::{gathered_checkpoint_methods, job_methods, join_job};
use super::strategy::Strategy;
use crate::accelerators::Accelerator;
use crate::distributed::{self, DistContext};
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::tensor::device::Device;
use crate::trainer::device::Placement;
use crate::trainer::{ClipAlgorithm, LightningModule, OptimizerConfig, TrainerOptions};
use std::sync::{Arc, Mutex, MutexGuard};
use tch::Tensor;

/// FSDP state of a run.
pub(crate) struct FsdpStrategy {
    placement: Placement,
    ctx: Arc<DistContext>,
    options: FsdpOptions,
    /// The model while it is sharded.
    sharded: Mutex<Option<ShardedModel>>,
    /// The run failed: the group is gone, nothing may be gathered.
    failed: bool,
    /// Lightning's `sync_batchnorm`: the model's BatchNorms are
    /// SyncBatchNorms while it is sharded.
    sync_batchnorm: bool,
    /// The groups units communicate in.
    groups: FsdpGroups,
}

/// Locks `m`, taking the value of a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
        let groups = FsdpGroups::new(&ctx, &opts.strategy.fsdp, opts.strategy.num_nodes).map_err(|e| ctx.explain(e))?;
        Ok(FsdpStrategy {
            placement,
            ctx,
            options: opts.strategy.fsdp.clone(),
            sharded: Mutex::new(None),
            failed: false,
            sync_batchnorm: opts.strategy.ddp.sync_batchnorm,
            groups,
        })
    }

    /// The sharded model, locked (`None` before wrapping and after the run).
    fn sharded(&self) -> MutexGuard<'_, Option<ShardedModel>> {
        lock(&self.sharded)
    }

    /// Averages the gradients of a step into the shards, once after the
    /// backward passes of a step; the error of a backward hook first.
    fn finish_backward(&mut self) -> Result<()> {
        let finished = match self.sharded.get_mut().unwrap_or_else(|p| p.into_inner()) {
            Some(s) => s.finish_backward(),
            None => Ok(()),
        };
        finished.map_err(|e| self.ctx.explain(e))
    }

    /// Every unit sharded (between steps and batches).
    fn reshard_all(&self) -> Result<()> {
        self.sharded().as_ref().map_or(Ok(()), ShardedModel::reshard_all)
    }

    /// Gives the model its full parameters back and unlinks it.
    fn unwrap(&self) -> Result<()> {
        if self.failed {
            return Ok(());
        }
        let Some(s) = self.sharded().take() else { return Ok(()) };
        s.unwrap(self.unwraps_to_host()).map_err(|e| self.ctx.explain(e))
    }

    /// Whether the model comes back whole in the host's memory, unit by
    /// unit (where it goes at the end of a run anyway: Lightning's
    /// teardown), rather than on the device, which may not hold it whole.
    fn unwraps_to_host(&self) -> bool {
        self.placement.device != Device::Cpu
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

    /// A training forward ran: its gradients are averaged at the step.
    fn mark_pending(&mut self) {
        if let Some(s) = self.sharded.get_mut().unwrap_or_else(|p| p.into_inner()) {
            s.mark_pending();
        }
    }

    /// Runs `f` on the sharded model (nothing before wrapping).
    fn with_sharded(&self, f: impl FnOnce(&ShardedModel) -> Result<()>) -> Result<()> {
        self.sharded().as_ref().map_or(Ok(()), f).map_err(|e| self.ctx.explain(e))
    }

    /// Every unit sharded, the sharded parameters and where this rank's
    /// rows lie (`None` while the model is not sharded).
    fn shards(&self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        if self.sharded().is_none() {
            return Ok(None);
        }
        self.check_alive()?;
        self.reshard_all()?;
        let mut params = Vec::new();
        let sharded = self.sharded();
        for u in sharded.iter().flat_map(|s| s.units()) {
            for sp in u.lock_params().iter() {
                params.push(crate::checkpoint::dcp::ShardedParam {
                    param: sp.param.shallow_clone(),
                    cut: crate::checkpoint::dcp::Cut {
                        shape: sp.shape.clone(),
                        dim: 0,
                        per_rank: sp.rows,
                        padded: true,
                    },
                });
            }
        }
        drop(sharded);
        Ok(Some(crate::checkpoint::dcp::Sharding {
            group: Arc::clone(&self.ctx.group),
            params,
            model_key: "model",
            shard_rank: self.groups.shard.rank(),
            writes_shards: self.groups.replicas.as_ref().is_none_or(|r| r.rank() == 0),
        }))
    }
}

impl Strategy for FsdpStrategy {
    job_methods!();

    /// Lightning's `strategy.setup` for FSDP: the model cast for `*-true`
    /// precisions where it is, then sharded on its way to the device unit
    /// by unit ([`Strategy::wrap_model`]), so the device never holds it
    /// whole. On failure the device is torn down and the run failed.
    fn setup_model(&mut self, module: &dyn LightningModule, training: bool) -> Result<()> {
        self.placement.cast_model(module)?;
        if let Err(e) = self.wrap_model(module, training) {
            let e = self.placement.teardown_after(module, e);
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Shards the model for every run (Lightning wraps for evaluation
    /// too), moving it to the device unit by unit; a model already sharded
    /// (configure_model) is gathered and sharded again with what it holds
    /// now.
    fn wrap_model(&mut self, module: &dyn LightningModule, _training: bool) -> Result<()> {
        let Some(model) = module.model() else {
            return Err(Error::state(
                "fsdp needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        self.unwrap()?;
        let device = Some(self.placement.device);
        let sharded = ShardedModel::wrap(model, &self.groups, &self.options, self.sync_batchnorm, device)
            .map_err(|e| self.ctx.explain(e.context("sharding the model (fsdp)")))?;
        *self.sharded() = Some(sharded);
        Ok(())
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
        self.with_sharded(|s| {
            s.set_sync(sync);
            s.start_forward();
            Ok(())
        })
    }

    fn post_forward(&mut self, _loss: &Tensor) -> Result<()> {
        self.mark_pending();
        Ok(())
    }

    fn prepare_manual_backward(&mut self, _loss: &Tensor) -> Result<()> {
        self.mark_pending();
        Ok(())
    }

    /// The backward, then (FSDP2's wire) the units it left to its end.
    fn backward(&mut self, loss: &Tensor) -> Result<()> {
        self.mark_pending();
        self.placement.precision.backward(loss)?;
        self.with_sharded(ShardedModel::take_hook_error)?;
        self.with_sharded(ShardedModel::end_backward)
    }

    fn on_zero_grad(&mut self, optimizer: &dyn Optimizer, set_to_none: bool) -> Result<()> {
        let params = optimizer.param_groups().iter().flat_map(|g| g.params.iter());
        let ptrs: std::collections::HashSet<usize> = params.map(|p| p.data_ptr() as usize).collect();
        self.with_sharded(|s| s.zero_parked(&ptrs, set_to_none))
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
        let params: Vec<Tensor> = configs.iter().flat_map(|c| c.optimizer.param_tensors()).collect();
        self.clip_params(&params, value, algorithm)
    }

    fn clip_params(&self, params: &[Tensor], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        let whole = self.options.sharding_strategy == ShardingStrategy::NoShard;
        match algorithm {
            ClipAlgorithm::Norm if !whole && self.sharded().is_some() => {
                self.with_sharded(|s| s.clip_norm(params, value).map(drop))
            }
            _ => self.placement.precision.clip_params(params, value, algorithm),
        }
    }

    fn offloads_parameters(&self) -> bool {
        self.options.cpu_offload
    }

    fn closure_refusal(&self) -> Option<&'static str> {
        Some(
            "an optimizer that re-evaluates the loss in its step does not run under strategy \"fsdp\" (each rank \
             holds a shard of the parameters between steps): use ddp or one device",
        )
    }

    fn optimizer_step(&mut self, configs: &mut [OptimizerConfig]) -> Result<Vec<crate::precision::StepMade>> {
        self.finish_backward()?;
        let mut opts: Vec<&mut dyn Optimizer> = configs.iter_mut().map(|c| c.optimizer.as_mut() as _).collect();
        self.placement.precision.optimizer_step(&mut opts)
    }

    gathered_checkpoint_methods!();

    fn unshard_params(&mut self) -> Result<()> {
        self.check_alive()?;
        // Unit by unit into the host's memory on a device (Lightning's full
        // state dict with offload_to_cpu): the device never holds it whole.
        let to_host = self.unwraps_to_host();
        self.with_sharded(|s| s.gather_master(to_host))
    }

    fn reshard_params(&mut self, configs: &mut [OptimizerConfig], restored: bool) -> Result<()> {
        if restored {
            let mut opts: Vec<&mut dyn Optimizer> = configs.iter_mut().map(|c| c.optimizer.as_mut() as _).collect();
            self.with_sharded(|s| s.reshard_from_params(&mut opts))?;
        }
        self.reshard_all()
    }

    fn sharded_checkpoint(&mut self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        if !self.options.sharded_checkpoints {
            return Ok(None);
        }
        // After a fit the model is whole again (teardown): a checkpoint
        // saved then is written whole, as with "full".
        self.shards()
    }

    fn local_shards(&mut self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        Ok(self.shards()?.filter(|s| !s.params.is_empty()))
    }

    fn optimizer_state_for_checkpoint(&self, optimizer: &dyn Optimizer) -> Result<Vec<(String, Tensor)>> {
        match self.sharded().as_ref() {
            Some(s) => s.full_optimizer_state(optimizer, true).map_err(|e| self.ctx.explain(e)),
            None => optimizer.state_dict(),
        }
    }

    /// Each optimizer's state gathered into the full shapes and loaded back
    /// once the model is whole ([`Strategy::teardown`] follows).
    fn teardown_optimizers(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.check_alive()?;
        let Some(s) = self.sharded().take() else { return Ok(()) };
        let mut opts: Vec<&mut dyn Optimizer> = configs.iter_mut().map(|c| c.optimizer.as_mut() as _).collect();
        s.unwrap_with(&mut opts, self.unwraps_to_host()).map_err(|e| self.ctx.explain(e))
    }

    fn teardown(&self, module: &dyn LightningModule) -> Result<()> {
        let unwrapped = self.unwrap();
        let torn = self.placement.teardown(module);
        unwrapped.and(torn)
    }

    fn fail(&mut self, e: Error) -> Error {
        let e = self.ctx.fail(e);
        self.failed = true;
        // The group is broken: the model is unlinked without gathering.
        if let Some(s) = self.sharded().take() {
            s.abandon();
        }
        distributed::abort();
        e
    }
}
