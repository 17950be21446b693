//! The strategy trait (Lightning's `Strategy`): what a run's loops ask of
//! the way the run is spread over devices and processes. Every strategy
//! owns its [`Placement`] (accelerator, device, precision plugin); the
//! provided methods are the one-device behaviour on it, and each strategy
//! overrides what it does differently (as Lightning's subclasses do).
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::precision::{AutocastGuard, PrecisionPlugin};
use crate::tensor::device::Device;
use crate::trainer::device::Placement;
use crate::trainer::metrics::ReduceFx;
use crate::trainer::{BatchSource, ClipAlgorithm, LightningModule, OptimizerConfig};
use tch::Tensor;

/// How a run is spread: one device (`single_device.rs`), DDP (`ddp.rs`,
/// also for `xla.rs`) or DP (`dp.rs`).
pub(crate) trait Strategy {
    /// The accelerator, device and precision plugin.
    fn placement(&self) -> &Placement;

    /// The placement, for the precision plugin's state and steps.
    fn placement_mut(&mut self) -> &mut Placement;

    /// Whether this process is rank 0 (always, in one process).
    fn is_global_zero(&self) -> bool {
        true
    }

    /// This process's rank.
    fn global_rank(&self) -> usize {
        0
    }

    /// Number of processes.
    fn world_size(&self) -> usize {
        1
    }

    /// This node's index in the job (Lightning's `node_rank`).
    fn node_rank(&self) -> usize {
        0
    }

    /// This process's index on its node (Lightning's `local_rank`).
    fn local_rank(&self) -> usize {
        0
    }

    /// Whether the parameters the optimizers step live in the host's
    /// memory while the model computes on the device (FSDP's CPU offload).
    fn offloads_parameters(&self) -> bool {
        false
    }

    /// Why an optimizer that re-evaluates the loss in its step (LBFGS)
    /// cannot run under this strategy; `None` when it can.
    fn closure_refusal(&self) -> Option<&'static str> {
        None
    }

    /// Whether the run is DataParallel (replicas in one process).
    fn is_data_parallel(&self) -> bool {
        false
    }

    /// Lightning's `strategy.setup`: moves the module's model to the
    /// device (cast for `*-true` precisions), then wraps it
    /// ([`Strategy::wrap_model`]). On failure the device is torn down and
    /// the run failed ([`Strategy::fail`]).
    fn setup_model(&mut self, module: &dyn LightningModule, training: bool) -> Result<()> {
        self.placement().prepare_model(module)?;
        let wrapped = self.wrap_model(module, training);
        if let Err(e) = wrapped {
            let e = self.placement().teardown_after(module, e);
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Wraps the model already on the device, for fitting when `training`
    /// (DDP) or for every run (DP's replicas); nothing on one device.
    fn wrap_model(&mut self, _module: &dyn LightningModule, _training: bool) -> Result<()> {
        Ok(())
    }

    /// The source this rank reads: its shard of a DataLoader when
    /// `use_sampler` (Lightning's `use_distributed_sampler`) and the world
    /// has several ranks, else the source itself.
    fn shard<'a>(&self, source: &'a dyn BatchSource, _use_sampler: bool) -> Sharded<'a> {
        Sharded::Borrowed(source)
    }

    /// Lightning's `strategy.batch_to_device`: the batch on the device,
    /// floating inputs cast for `*-true` precisions.
    fn batch_to_device(&self, batch: Vec<Tensor>) -> Result<Vec<Tensor>> {
        self.placement().prepare_batch(batch)
    }

    /// The precision plugin's step context: autocast for `*-mixed`.
    fn forward_context(&self) -> Result<Option<AutocastGuard>> {
        self.placement().forward_context()
    }

    /// Before a training forward: `sync` is false on the micro-batches of
    /// gradient accumulation that do not step (DDP's no_sync).
    fn pre_forward(&mut self, _sync: bool) -> Result<()> {
        Ok(())
    }

    /// After a training forward that produced `loss`, before backward():
    /// arms gradient averaging when the step synchronizes.
    fn post_forward(&mut self, _loss: &Tensor) -> Result<()> {
        Ok(())
    }

    /// Before a manual backward of `loss` (manual optimization): arms
    /// gradient averaging for it (Lightning's `prepare_for_backward`).
    fn prepare_manual_backward(&mut self, _loss: &Tensor) -> Result<()> {
        Ok(())
    }

    /// Around an evaluation forward inside fit (no grad), as Lightning runs
    /// validation through the DDP wrapper.
    fn eval_forward(&mut self) -> Result<()> {
        Ok(())
    }

    /// Runs `step` on `batch`: once, or for DP once per chunk with the
    /// chunk's replica of the model (the trainer's `split` collects the
    /// results).
    fn for_each_chunk(&self, batch: &[Tensor], step: &mut dyn FnMut(&[Tensor]) -> Result<()>) -> Result<()> {
        step(batch)
    }

    /// The loss of a batch from the losses of its chunks.
    fn gather_loss(&self, losses: Vec<Tensor>) -> Result<Tensor> {
        losses.into_iter().next().ok_or_else(|| Error::state("no loss was produced"))
    }

    /// The prediction of a batch from those of its chunks.
    fn gather_output(&self, outputs: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
        Ok(outputs.into_iter().next().flatten())
    }

    /// Lightning's `strategy.backward` -> `precision.backward`: backward
    /// of `loss` (scaled for `16-mixed`); under DDP it averages the
    /// gradients when the step synchronizes.
    fn backward(&mut self, loss: &Tensor) -> Result<()> {
        self.placement().precision.backward(loss)
    }

    /// `optimizer`'s `zero_grad` just ran (`set_to_none`, or zeros in
    /// place): FSDP drops (or zeros) the shard gradients of its parameters
    /// it set aside while they were gathered.
    fn on_zero_grad(&mut self, _optimizer: &dyn Optimizer, _set_to_none: bool) -> Result<()> {
        Ok(())
    }

    /// Before the `on_before_optimizer_step` hook: unscales the gradients
    /// (`16-mixed`), so the hook and clipping see their true values.
    fn unscale_gradients(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.placement_mut().precision.unscale_gradients(&optimizers_of(configs))
    }

    /// As [`Strategy::unscale_gradients`], skipping optimizers already
    /// unscaled since the last scale update.
    fn unscale_gradients_once(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.placement_mut().precision.unscale_gradients_once(&optimizers_of(configs))
    }

    /// Lightning's `strategy.clip_gradients` -> `precision.clip_gradients`.
    fn clip_gradients(&mut self, configs: &mut [OptimizerConfig], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        self.placement().precision.clip_gradients(&optimizers_of(configs), value, algorithm)
    }

    /// Clips the gradients of `params` (the closure of an optimizer that
    /// re-evaluates the loss, which steps outside the run's list).
    fn clip_params(&self, params: &[Tensor], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        self.placement().precision.clip_params(params, value, algorithm)
    }

    /// Lightning's `strategy.optimizer_step` -> `precision.optimizer_step`:
    /// every optimizer steps on its device unless (`16-mixed`) its
    /// gradients are inf/NaN; the loss scale is updated.
    fn optimizer_step(&mut self, configs: &mut [OptimizerConfig]) -> Result<Vec<crate::precision::StepMade>> {
        self.placement_mut().precision.optimizer_step(&mut optimizers_of(configs))
    }

    /// Reduces `values` over ranks in place with `op` (sync_dist with a
    /// `reduce_fx`): one collective.
    fn reduce(&self, _values: &mut [f64], _op: ReduceFx) -> Result<()> {
        Ok(())
    }

    /// torch's `new_group(ranks)` over the job (every rank calls it with
    /// the same ranks, in the same order as its other groups): this
    /// process's membership, `None` when it is not one of `ranks` or the
    /// job has one process (a group of one reduces nothing).
    fn new_group(&self, ranks: &[usize]) -> Result<Option<crate::distributed::ProcessGroup>> {
        crate::distributed::group::check_group_ranks(ranks, self.world_size())?;
        Ok(None)
    }

    /// Reduces `values` over `group` (one [`Strategy::new_group`] made)
    /// in place with `op`: one collective among its members.
    fn reduce_over(&self, group: &crate::distributed::ProcessGroup, values: &mut [f64], op: ReduceFx) -> Result<()> {
        group.reduce_values(values, reduce_op(op))
    }

    /// Lightning's `reduce_boolean_decision(all=False)`: true when any rank
    /// says true.
    fn any(&self, decision: bool) -> Result<bool> {
        Ok(decision)
    }

    /// Lightning's `reduce_boolean_decision(all=True)`: true when every
    /// rank says true.
    fn all(&self, decision: bool) -> Result<bool> {
        Ok(decision)
    }

    /// Waits for every rank.
    fn barrier(&self) -> Result<()> {
        Ok(())
    }

    /// Whether this process writes the checkpoints the run saves
    /// (Lightning's `strategy.save_checkpoint`: rank 0 only; the others
    /// wait for it at a barrier).
    fn saves_checkpoints(&self) -> bool {
        self.is_global_zero()
    }

    /// Whether this process writes the checkpoint files the run gathers
    /// (rank 0; under FSDP every rank gathers, rank 0 writes).
    fn writes_checkpoints(&self) -> bool {
        self.is_global_zero()
    }

    /// Whether every rank takes part in gathering a checkpoint (FSDP), so
    /// the ranks must agree on each save.
    fn gathers_checkpoints(&self) -> bool {
        false
    }

    /// Before a checkpoint is gathered or restored: every parameter holds
    /// its full value (FSDP gathers its shards, a collective on every rank).
    fn unshard_params(&mut self) -> Result<()> {
        Ok(())
    }

    /// After it: the parameters sharded again; with `restored`, from the
    /// values just loaded into them, and the optimizers' states with them.
    fn reshard_params(&mut self, _configs: &mut [OptimizerConfig], _restored: bool) -> Result<()> {
        Ok(())
    }

    /// At the end of a fit, before [`Strategy::teardown`]: the optimizers'
    /// states as they will be after it (FSDP gathers the shards' states,
    /// since the model becomes whole again).
    fn teardown_optimizers(&mut self, _configs: &mut [OptimizerConfig]) -> Result<()> {
        Ok(())
    }

    /// Under FSDP's `state_dict_type="sharded"` and model_parallel's
    /// `save_distributed_checkpoint`: the parameters in their sharded
    /// state, and what a sharded checkpoint directory needs to know of them
    /// (each rank then writes its own parts); `None` where checkpoints are
    /// gathered whole (every other strategy).
    fn sharded_checkpoint(&mut self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        Ok(None)
    }

    /// The parameters in their sharded state and where this rank's parts
    /// lie, whatever the checkpoints' type: what a rank-local read of a
    /// sharded checkpoint needs. `None` where no parameter is sharded.
    fn local_shards(&mut self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        Ok(None)
    }

    /// An optimizer's state as a checkpoint holds it (FSDP gathers the
    /// shards' states into the full shapes).
    fn optimizer_state_for_checkpoint(&self, optimizer: &dyn Optimizer) -> Result<Vec<(String, Tensor)>> {
        optimizer.state_dict()
    }

    /// The precision plugin (its state goes into checkpoints).
    fn precision(&self) -> &PrecisionPlugin {
        &self.placement().precision
    }

    /// The precision plugin, to restore its state.
    fn precision_mut(&mut self) -> &mut PrecisionPlugin {
        &mut self.placement_mut().precision
    }

    /// The device the model trains on (the root device under `dp`).
    fn root_device(&self) -> Device {
        self.placement().device
    }

    /// The root device's random state for a checkpoint (`None` on the
    /// CPU, whose generator the checkpoint holds anyway).
    fn device_rng_state(&self) -> Result<Option<Tensor>> {
        let p = self.placement();
        if p.device == Device::Cpu {
            return Ok(None);
        }
        p.accelerator.rng_state(p.device)
    }

    /// Restores the root device's random state from a checkpoint.
    fn set_device_rng_state(&self, state: &Tensor) -> Result<()> {
        let p = self.placement();
        if p.device == Device::Cpu {
            return Ok(());
        }
        p.accelerator.set_rng_state(p.device, state)
    }

    /// Lightning's `strategy.teardown`: moves the module's model back to the
    /// CPU and tears the accelerator down.
    fn teardown(&self, module: &dyn LightningModule) -> Result<()> {
        self.placement().teardown(module)
    }

    /// Tears down after the run failed with `err`, which stays the error
    /// reported; a failing teardown's error is attached to its message.
    fn teardown_after(&self, module: &dyn LightningModule, err: Error) -> Error {
        self.placement().teardown_after(module, err)
    }

    /// A failed run (Lightning's `on_exception`): the error names a failed
    /// rank when one is known, and a DDP job is ended (a broken group would
    /// make later runs hang).
    fn fail(&mut self, e: Error) -> Error {
        e
    }
}

/// The optimizers of a run's configurations, for the precision plugin.
pub(crate) fn optimizers_of(configs: &mut [OptimizerConfig]) -> Vec<&mut dyn Optimizer> {
    configs.iter_mut().map(|c| c.optimizer.as_mut() as &mut dyn Optimizer).collect()
}

/// A data source as one rank sees it.
pub(crate) enum Sharded<'a> {
    /// The rank's own shard.
    Owned(Box<dyn BatchSource + Send>),
    /// The whole source.
    Borrowed(&'a dyn BatchSource),
}

impl Sharded<'_> {
    /// The source to iterate.
    pub fn get(&self) -> &dyn BatchSource {
        match self {
            Sharded::Owned(b) => b.as_ref(),
            Sharded::Borrowed(b) => *b,
        }
    }
}

/// The collective of a `reduce_fx`.
pub(crate) fn reduce_op(op: ReduceFx) -> crate::distributed::ReduceOp {
    use crate::distributed::ReduceOp;
    match op {
        ReduceFx::Mean => ReduceOp::Mean,
        ReduceFx::Sum => ReduceOp::Sum,
        ReduceFx::Max => ReduceOp::Max,
        ReduceFx::Min => ReduceOp::Min,
    }
}
