//! FSDP for a host-owned loop (`fulmen_fsdp`): the host runs forward,
//! backward and the optimizers itself, and tells the sharded model where a
//! step is (torch's `fully_shard` model in a plain PyTorch loop). The same
//! [`ShardedModel`] as the trainer's `fsdp` strategy.
use super::{FsdpGroups, ShardedModel};
use crate::distributed::DistContext;
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::strategies::gathered_optimizers::GatheredOptimizers;
use crate::strategies::StrategySpec;
use crate::tensor::device::Device;
use crate::trainer::SharedModel;
use std::sync::Arc;

/// A model sharded for a host loop, and where its step is.
pub struct FsdpHostLoop {
    /// Unlinks the model when dropped (with the wrapper).
    sharded: ShardedModel,
    ctx: Arc<DistContext>,
    /// A training forward was prepared and its gradients not yet averaged
    /// by [`FsdpHostLoop::finish_backward`].
    step_open: bool,
    /// The parameters hold their full values ([`FsdpHostLoop::unshard`]).
    unsharded: bool,
    /// The gradients of the parameters every rank keeps whole as the last
    /// forward found them: a backward since changes them.
    replicated_marks: Vec<(bool, usize)>,
    /// The optimizers whose states [`FsdpHostLoop::unshard`] gathered
    /// (their addresses), which [`FsdpHostLoop::reshard`] must cut again.
    unsharded_optimizers: GatheredOptimizers,
}

impl FsdpHostLoop {
    /// Shards `model` (on this rank's device) in the job of `ctx` with
    /// `spec`'s FSDP settings (and its `sync_batchnorm` and `num_nodes`),
    /// after copying rank 0's parameters and buffers to every rank. A model
    /// built on the meta device gets its values unit by unit and goes to
    /// the device the job's collectives use (this rank's CUDA device under
    /// nccl, the CPU under gloo).
    pub fn new(ctx: Arc<DistContext>, model: SharedModel, spec: &StrategySpec) -> Result<Self> {
        spec.fsdp.validate()?;
        let groups = FsdpGroups::new(&ctx, &spec.fsdp, spec.num_nodes).map_err(|e| ctx.explain(e))?;
        let on_meta = model.lock().unwrap_or_else(|p| p.into_inner()).holds_meta();
        let place_on = on_meta.then(|| Device::from_tch(ctx.group.device()));
        let sharded = ShardedModel::wrap(model, &groups, &spec.fsdp, spec.ddp.sync_batchnorm, place_on)
            .map_err(|e| ctx.explain(e.context("sharding the model (fsdp)")))?;
        Ok(FsdpHostLoop {
            sharded,
            ctx,
            step_open: false,
            unsharded: false,
            replicated_marks: Vec::new(),
            unsharded_optimizers: GatheredOptimizers::default(),
        })
    }

    /// Refuses a step's work while the parameters are whole.
    fn check_sharded(&self, what: &str) -> Result<()> {
        if self.unsharded {
            return Err(Error::state(format!(
                "{what}: the model is unsharded (fulmen_fsdp_unshard); call fulmen_fsdp_reshard first"
            )));
        }
        Ok(())
    }

    /// Refuses to begin something new while a backward's gradients wait to
    /// be averaged.
    fn check_step_finished(&self, what: &str) -> Result<()> {
        let s = &self.sharded;
        if self.step_open && (s.gradients_arrived() || s.replicated_grad_marks() != self.replicated_marks) {
            return Err(Error::state(format!(
                "{what}: the last backward's gradients were not averaged (call fulmen_fsdp_finish_backward after \
                 backward, before the optimizer step)"
            )));
        }
        Ok(())
    }

    /// torch's `no_sync()` while `sync` is false: backward passes keep
    /// full-sized gradients and accumulate them without communication;
    /// the next synchronized backward averages the sum into the shards.
    pub fn set_sync(&self, sync: bool) -> Result<()> {
        self.sharded.set_sync(sync);
        Ok(())
    }

    /// Before a forward of the model: every unit sharded again, and under
    /// grad mode the units count the coming backward's gradients.
    pub fn prepare_forward(&mut self, grad_enabled: bool) -> Result<()> {
        self.check_sharded("fulmen_fsdp_prepare_forward")?;
        self.check_step_finished("fulmen_fsdp_prepare_forward")?;
        let s = &mut self.sharded;
        s.reshard_all().map_err(|e| self.ctx.explain(e))?;
        if grad_enabled {
            s.start_forward();
            s.mark_pending();
            self.step_open = s.syncs();
            self.replicated_marks = s.replicated_grad_marks();
        }
        Ok(())
    }

    /// After the backward passes of a step that synchronizes: the
    /// gradients averaged into the shards (the units whose backward did
    /// not complete, and the parameters every rank holds whole); while
    /// accumulating only a backward hook's error is reported.
    pub fn finish_backward(&mut self) -> Result<()> {
        if !self.sharded.syncs() {
            return self.sharded.take_hook_error().map_err(|e| self.ctx.explain(e));
        }
        self.step_open = false;
        self.sharded.finish_backward().map_err(|e| self.ctx.explain(e))
    }

    /// Clips every parameter's gradient by the norm over every rank's
    /// shards (after [`FsdpHostLoop::finish_backward`]); returns the total
    /// norm before clipping.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64> {
        self.check_sharded("fulmen_fsdp_clip_grad_norm")?;
        self.check_step_finished("fulmen_fsdp_clip_grad_norm")?;
        let s = &self.sharded;
        let params = s.parameters();
        let total = s.clip_norm(&params, max_norm).map_err(|e| self.ctx.explain(e))?;
        Ok(total.f_double_value(&[])?)
    }

    /// Every gradient dropped (`set_to_none`) or zeroed, those set aside
    /// while a unit is gathered included: `model.zero_grad()`.
    pub fn zero_grad(&self, set_to_none: bool) -> Result<()> {
        self.sharded.zero_grad(set_to_none)
    }

    /// Gathers every parameter's full value (in the shards' dtype) and the
    /// `optimizers`' states into their full shapes, on every rank (a
    /// collective): the model and optimizers can be saved, read or loaded
    /// as unsharded ones. Nothing when already unsharded.
    pub fn unshard(&mut self, optimizers: &mut [&mut dyn Optimizer]) -> Result<()> {
        if self.unsharded {
            return Ok(());
        }
        self.check_step_finished("fulmen_fsdp_unshard")?;
        let s = &self.sharded;
        let full: Vec<Vec<(String, tch::Tensor)>> = optimizers
            .iter()
            .map(|o| s.full_optimizer_state(&**o, false))
            .collect::<Result<_>>()
            .map_err(|e| self.ctx.explain(e))?;
        s.gather_master(false).map_err(|e| self.ctx.explain(e))?;
        // Whole from here: forwards leave the units alone until reshard,
        // which cuts every optimizer given here.
        s.set_pinned(true);
        self.unsharded = true;
        self.unsharded_optimizers.record(optimizers);
        for (o, state) in optimizers.iter_mut().zip(full) {
            o.load_state_dict(&state).map_err(|e| e.context("the optimizer's state in full shapes"))?;
        }
        Ok(())
    }

    /// After [`FsdpHostLoop::unshard`]: every rank keeps its rows of the
    /// parameters' current values (loaded ones included) and of the
    /// `optimizers`' states, and the model is sharded again.
    pub fn reshard(&mut self, optimizers: &mut [&mut dyn Optimizer]) -> Result<()> {
        if !self.unsharded {
            return Err(Error::state(
                "fulmen_fsdp_reshard: the model is sharded already (it follows fulmen_fsdp_unshard)",
            ));
        }
        self.unsharded_optimizers.check(optimizers, "fulmen_fsdp_reshard", "fulmen_fsdp_unshard")?;
        let s = &self.sharded;
        s.set_pinned(false);
        let cut = s.reshard_from_params(optimizers);
        if cut.is_err() {
            s.set_pinned(true);
        }
        cut.map_err(|e| self.ctx.explain(e))?;
        self.unsharded = false;
        self.unsharded_optimizers.clear();
        Ok(())
    }
}

impl Drop for FsdpHostLoop {
    /// Lets the model go without a collective: it keeps its full values
    /// after [`FsdpHostLoop::unshard`], else this rank's shards (the
    /// [`ShardedModel`] unlinks it as it drops).
    fn drop(&mut self) {
        // No collective is waited for here: a peer may be gone.
        self.sharded.forget_prefetches();
        if !self.unsharded {
            let _ = self.sharded.reshard_all();
        }
    }
}
