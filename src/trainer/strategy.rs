//! The strategy of one run, the head of Lightning's chain loop -> strategy
//! -> precision -> accelerator: it owns the accelerator, device and
//! precision plugin ([`Placement`]) and how the run is spread (one device,
//! DDP over the process's distributed context, or DP), and the loops reach
//! the model's device, the backward pass and the optimizer steps only
//! through it.
use super::data_parallel::DpRun;
use super::device::Placement;
use super::metrics::ReduceFx;
use super::module::{LightningModule, OptimizerConfig};
use super::options::{ClipAlgorithm, TrainerOptions};
use super::source::BatchSource;
use crate::accelerators::Accelerator;
use crate::accelerators::{registry, DevicesSpec};
use crate::distributed::{self, ClusterEnv, Ddp, DdpOptions, DeviceBackend, DistContext, JoinOptions, ReduceOp};
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::optim::Optimizer;
use crate::precision::{AutocastGuard, PrecisionPlugin};
use crate::strategies::StrategyKind;
use crate::tensor::device::{Device, DeviceType};
use std::sync::Arc;
use tch::Tensor;

/// DDP state of a run.
pub(crate) struct DdpRun {
    ctx: Arc<DistContext>,
    options: DdpOptions,
    /// The model wrapped as torch's DistributedDataParallel (fit only:
    /// Lightning wraps the model for fitting, not for evaluation runs).
    ddp: Option<Ddp>,
}

/// How a run is spread.
enum Parallel {
    /// One process, one device.
    Single,
    /// Distributed data parallel.
    Ddp(DdpRun),
    /// DataParallel: one process, replicas on several devices.
    Dp(DpRun),
}

/// The strategy of a run, with its accelerator, device and precision.
pub(crate) struct RunStrategy {
    placement: Placement,
    parallel: Parallel,
    /// Devices the run uses on this node (Lightning's `num_devices`).
    num_devices: usize,
}

/// The accelerator `opts` names and the devices a run with them uses on
/// this node (Lightning's `parallel_devices`), resolved without starting
/// anything.
pub(crate) fn parallel_devices(opts: &TrainerOptions) -> Result<(Arc<dyn Accelerator>, Vec<Device>)> {
    let acc = registry::get_available(&opts.accelerator)?;
    let spec = DevicesSpec::parse(&opts.devices)?;
    let parsed =
        acc.parse_devices(&spec).ctx(format!("devices={:?} for accelerator {:?}", opts.devices, acc.name()))?;
    let list = acc.get_parallel_devices(&parsed)?;
    if list.is_empty() {
        return Err(Error::invalid(format!("devices={:?} selects no device", opts.devices)));
    }
    Ok((acc, list))
}

/// Resolves accelerator, devices, precision and strategy; joins the
/// distributed job when the strategy is DDP (starting the other local
/// ranks when no launcher did).
pub(crate) fn setup(opts: &TrainerOptions) -> Result<RunStrategy> {
    let (acc, list) = parallel_devices(opts)?;
    let num_devices = list.len();
    let s = &opts.strategy;
    // A job someone else launched (torchrun, SLURM, env:// variables) is
    // distributed; its layout must agree with `devices` and `num_nodes`.
    let external_world = || -> Result<bool> {
        if !ClusterEnv::launched_externally() {
            return Ok(false);
        }
        Ok(ClusterEnv::detect(list.len(), s.num_nodes)?.world_size > 1)
    };
    if s.kind == StrategyKind::Xla && acc.name() != "xla" {
        return Err(Error::invalid(format!(
            "strategy \"xla\" runs on the xla accelerator, not {:?}: set accelerator=\"xla\" (or \"tpu\")",
            acc.name()
        )));
    }
    let kind = match s.kind {
        StrategyKind::Auto if list.len() > 1 || s.num_nodes > 1 || external_world()? => StrategyKind::Ddp,
        StrategyKind::Auto => StrategyKind::SingleDevice,
        k => k,
    };
    match kind {
        StrategyKind::Dp => {
            let placement = Placement::on(acc, list[0], &opts.precision, opts.grad_scaler)?;
            Ok(RunStrategy { placement, parallel: Parallel::Dp(DpRun::new(list)), num_devices })
        }
        StrategyKind::Ddp | StrategyKind::Xla => {
            let ctx = distributed::join(&JoinOptions {
                devices_per_node: list.len(),
                num_nodes: s.num_nodes,
                backend: s.process_group_backend.clone(),
                cuda: list[0].is_cuda(),
                devices: device_backend(acc.as_ref(), &list, &s.name)?,
                timeout: s.timeout,
            })?;
            let local = ctx.env.local_rank;
            let device = match list.get(local) {
                Some(d) => *d,
                None if list[0] == Device::Cpu => Device::Cpu,
                None => {
                    return Err(Error::invalid(format!(
                        "local rank {local} has no device: devices={:?} selects {} of {:?}",
                        opts.devices,
                        list.len(),
                        acc.name()
                    )))
                }
            };
            let placement = Placement::on(acc, device, &opts.precision, opts.grad_scaler)?;
            let ddp = DdpRun { ctx, options: s.ddp.clone(), ddp: None };
            Ok(RunStrategy { placement, parallel: Parallel::Ddp(ddp), num_devices })
        }
        _ => {
            if list.len() > 1 {
                return Err(Error::invalid(format!(
                    "devices={:?} selects {} devices of {:?}, but strategy {:?} runs on one: use strategy=\"ddp\" \
                     (or \"auto\") or devices=1",
                    opts.devices,
                    list.len(),
                    acc.name(),
                    s.name
                )));
            }
            let placement = Placement::on(acc, list[0], &opts.precision, opts.grad_scaler)?;
            Ok(RunStrategy { placement, parallel: Parallel::Single, num_devices })
        }
    }
}

/// What the job's group reduces on `list`'s devices besides the CPU and
/// CUDA: the accelerator's own collectives, or gloo through the CPU. c10d
/// dispatches collectives for CPU, CUDA and PrivateUse1 tensors only.
fn device_backend(acc: &dyn Accelerator, list: &[Device], strategy: &str) -> Result<Option<DeviceBackend>> {
    let hook = acc.collectives();
    match list.iter().find(|d| matches!(d, Device::Other(..))).copied() {
        Some(Device::Other(kind, _)) if kind != DeviceType::PrivateUse1 => Err(Error::new(
            ErrorCode::Unsupported,
            format!(
                "strategy {strategy:?} on {} devices: libtorch's c10d runs collectives on CPU, CUDA and \
                 PrivateUse1 tensors only",
                kind.name()
            ),
        )),
        Some(_) => Ok(Some(DeviceBackend { devices: list.to_vec(), hook, abort: None })),
        None if list.iter().all(|d| *d == Device::Cpu) && hook.is_some() => {
            Ok(Some(DeviceBackend { devices: list.to_vec(), hook, abort: None }))
        }
        None => Ok(None),
    }
}

impl RunStrategy {
    /// Whether this process is rank 0 (always, for a single device).
    pub fn is_global_zero(&self) -> bool {
        match &self.parallel {
            Parallel::Single | Parallel::Dp(_) => true,
            Parallel::Ddp(d) => d.ctx.is_global_zero(),
        }
    }

    /// Whether the run is DataParallel (replicas in one process).
    pub fn is_data_parallel(&self) -> bool {
        matches!(self.parallel, Parallel::Dp(_))
    }

    /// This process's rank.
    pub fn global_rank(&self) -> usize {
        match &self.parallel {
            Parallel::Single | Parallel::Dp(_) => 0,
            Parallel::Ddp(d) => d.ctx.rank(),
        }
    }

    /// This node's index in the job (Lightning's `node_rank`: 0 but
    /// under DDP).
    pub fn node_rank(&self) -> usize {
        match &self.parallel {
            Parallel::Single | Parallel::Dp(_) => 0,
            Parallel::Ddp(d) => d.ctx.env.node_rank,
        }
    }

    /// Devices the run uses on this node (Lightning's `num_devices`).
    pub fn num_devices(&self) -> usize {
        self.num_devices
    }

    /// Number of processes.
    pub fn world_size(&self) -> usize {
        match &self.parallel {
            Parallel::Single | Parallel::Dp(_) => 1,
            Parallel::Ddp(d) => d.ctx.world_size(),
        }
    }

    /// Lightning's `strategy.setup`: moves the module's model to the
    /// device (cast for `*-true` precisions), then for fitting wraps it as
    /// torch's DistributedDataParallel (DDP) or replicates it (DP).
    /// Evaluation runs under DDP leave the model unwrapped, as Lightning
    /// does. On failure the device is torn down and a DDP job ended.
    pub fn setup_model(&mut self, module: &dyn LightningModule, training: bool) -> Result<()> {
        self.placement.prepare_model(module)?;
        let wrapped = self.wrap_model(module, training);
        if let Err(e) = wrapped {
            let e = self.placement.teardown_after(module, e);
            return Err(self.fail(e));
        }
        Ok(())
    }

    fn wrap_model(&mut self, module: &dyn LightningModule, training: bool) -> Result<()> {
        let d = match &mut self.parallel {
            Parallel::Dp(d) => return d.setup_model(module),
            Parallel::Ddp(d) if training => d,
            _ => return Ok(()),
        };
        let Some(model) = module.model() else {
            return Err(Error::state(
                "ddp needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        d.ddp = Some(Ddp::new(Arc::clone(&d.ctx.group), &m, d.options.clone()).map_err(|e| d.ctx.explain(e))?);
        Ok(())
    }

    /// Lightning's `strategy.batch_to_device`: the batch on the device,
    /// floating inputs cast for `*-true` precisions.
    pub fn batch_to_device(&self, batch: Vec<Tensor>) -> Result<Vec<Tensor>> {
        self.placement.prepare_batch(batch)
    }

    /// The precision plugin's step context: autocast for `*-mixed`.
    pub fn forward_context(&self) -> Result<Option<AutocastGuard>> {
        self.placement.forward_context()
    }

    /// The precision plugin (its state goes into checkpoints).
    pub fn precision(&self) -> &PrecisionPlugin {
        &self.placement.precision
    }

    /// The precision plugin, to restore its state.
    pub fn precision_mut(&mut self) -> &mut PrecisionPlugin {
        &mut self.placement.precision
    }

    /// Lightning's `strategy.teardown`: moves the module's model back to the
    /// CPU and tears the accelerator down.
    pub fn teardown(&self, module: &dyn LightningModule) -> Result<()> {
        self.placement.teardown(module)
    }

    /// Tears down after the run failed with `err`, which stays the error
    /// reported; a failing teardown's error is attached to its message.
    pub fn teardown_after(&self, module: &dyn LightningModule, err: Error) -> Error {
        self.placement.teardown_after(module, err)
    }

    /// Before a training forward: `sync` is false on the micro-batches of
    /// gradient accumulation that do not step (DDP's no_sync).
    pub fn pre_forward(&mut self, sync: bool) -> Result<()> {
        let Parallel::Ddp(DdpRun { ctx, ddp: Some(ddp), .. }) = &mut self.parallel else { return Ok(()) };
        ddp.set_sync(sync);
        ddp.pre_forward(true).map_err(|e| ctx.explain(e))
    }

    /// After a training forward that produced `loss`, before backward():
    /// arms gradient averaging when the step synchronizes.
    pub fn post_forward(&mut self, loss: &Tensor) -> Result<()> {
        let Parallel::Ddp(DdpRun { ctx, ddp: Some(ddp), .. }) = &mut self.parallel else { return Ok(()) };
        ddp.post_forward(std::slice::from_ref(loss), true).map_err(|e| ctx.explain(e))
    }

    /// Before a manual backward of `loss` (manual optimization): arms
    /// gradient averaging for it (Lightning's `prepare_for_backward`).
    pub fn prepare_manual_backward(&mut self, loss: &Tensor) -> Result<()> {
        let Parallel::Ddp(DdpRun { ctx, ddp: Some(ddp), .. }) = &mut self.parallel else { return Ok(()) };
        ddp.prepare_manual_backward(loss).map_err(|e| ctx.explain(e))
    }

    /// Around an evaluation forward inside fit (no grad), as Lightning runs
    /// validation through the DDP wrapper: buffers are broadcast when the
    /// last forward synchronized.
    pub fn eval_forward(&mut self) -> Result<()> {
        let Parallel::Ddp(DdpRun { ctx, ddp: Some(ddp), .. }) = &mut self.parallel else { return Ok(()) };
        ddp.pre_forward(false).map_err(|e| ctx.explain(e))?;
        ddp.post_forward(&[], false).map_err(|e| ctx.explain(e))
    }

    /// Lightning's `strategy.backward` -> `precision.backward`: backward
    /// of `loss` (scaled for `16-mixed`); under DDP it averages the
    /// gradients when the step synchronizes.
    pub fn backward(&mut self, loss: &Tensor) -> Result<()> {
        self.placement.precision.backward(loss)
    }

    /// Before the `on_before_optimizer_step` hook: unscales the gradients
    /// (`16-mixed`), so the hook and clipping see their true values.
    pub fn unscale_gradients(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.placement.precision.unscale_gradients(&optimizers_of(configs))
    }

    /// Lightning's `strategy.clip_gradients` -> `precision.clip_gradients`.
    pub fn clip_gradients(
        &mut self,
        configs: &mut [OptimizerConfig],
        value: f64,
        algorithm: ClipAlgorithm,
    ) -> Result<()> {
        self.placement.precision.clip_gradients(&optimizers_of(configs), value, algorithm)
    }

    /// Clips the gradients of `params` (the closure of an optimizer that
    /// re-evaluates the loss, which steps outside the run's list).
    pub fn clip_params(&self, params: &[Tensor], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        self.placement.precision.clip_params(params, value, algorithm)
    }

    /// Lightning's `strategy.optimizer_step` -> `precision.optimizer_step`:
    /// every optimizer steps on its device unless (`16-mixed`) its
    /// gradients are inf/NaN; the loss scale is updated.
    pub fn optimizer_step(&mut self, configs: &mut [OptimizerConfig]) -> Result<Vec<bool>> {
        self.placement.precision.optimizer_step(&mut optimizers_of(configs))
    }

    /// The device the model trains on (the root device under `dp`).
    pub fn root_device(&self) -> Device {
        self.placement.device
    }

    /// The root device to synchronize before timing code reads a clock
    /// (the accelerator's `synchronize`); `None` on the CPU.
    pub fn device_sync(&self) -> Option<super::hooks::DeviceSync> {
        (self.placement.device != Device::Cpu)
            .then(|| super::hooks::DeviceSync(Arc::clone(&self.placement.accelerator), self.placement.device))
    }

    /// The root device's random state for a checkpoint (`None` on the
    /// CPU, whose generator the checkpoint holds anyway).
    pub fn device_rng_state(&self) -> Result<Option<Tensor>> {
        if self.placement.device == Device::Cpu {
            return Ok(None);
        }
        self.placement.accelerator.rng_state(self.placement.device)
    }

    /// Restores the root device's random state from a checkpoint.
    pub fn set_device_rng_state(&self, state: &Tensor) -> Result<()> {
        if self.placement.device == Device::Cpu {
            return Ok(());
        }
        self.placement.accelerator.set_rng_state(self.placement.device, state)
    }

    /// The device's statistics (Lightning's `accelerator.get_device_stats`);
    /// `cpu_stats` true adds the CPU's on another device, false gives none
    /// on a CPU device (DeviceStatsMonitor's `cpu_stats`).
    pub fn device_stats(&self, cpu_stats: Option<bool>) -> Result<Vec<(String, f64)>> {
        let on_cpu = self.placement.device == Device::Cpu;
        if on_cpu && cpu_stats == Some(false) {
            return Ok(Vec::new());
        }
        let mut stats = self.placement.accelerator.get_device_stats(self.placement.device)?;
        if !on_cpu && cpu_stats == Some(true) {
            // The registered CPU accelerator: its cpu_percent counts since its last reading.
            let cpu = crate::accelerators::registry::get("cpu")?;
            stats.extend(cpu.get_device_stats(Device::Cpu)?);
        }
        Ok(stats)
    }

    /// Reduces `values` over ranks in place with `op` (sync_dist with a
    /// `reduce_fx`): one collective.
    pub fn reduce(&self, values: &mut [f64], op: ReduceFx) -> Result<()> {
        let Parallel::Ddp(d) = &self.parallel else { return Ok(()) };
        let op = match op {
            ReduceFx::Mean => ReduceOp::Mean,
            ReduceFx::Sum => ReduceOp::Sum,
            ReduceFx::Max => ReduceOp::Max,
            ReduceFx::Min => ReduceOp::Min,
        };
        d.ctx.group.reduce_values(values, op).map_err(|e| d.ctx.explain(e))
    }

    /// Lightning's `reduce_boolean_decision(all=False)`: true when any rank
    /// says true.
    pub fn any(&self, decision: bool) -> Result<bool> {
        let Parallel::Ddp(d) = &self.parallel else { return Ok(decision) };
        d.ctx.group.reduce_decision(decision, false).map_err(|e| d.ctx.explain(e))
    }

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<()> {
        match &self.parallel {
            Parallel::Single | Parallel::Dp(_) => Ok(()),
            Parallel::Ddp(d) => d.ctx.group.barrier().map_err(|e| d.ctx.explain(e)),
        }
    }

    /// Runs a step on `batch`: once, or for DP once per chunk with the
    /// chunk's replica of the model.
    pub fn split<T>(&self, batch: &[Tensor], step: &mut dyn FnMut(&[Tensor]) -> Result<T>) -> Result<Vec<T>> {
        match &self.parallel {
            Parallel::Dp(d) => d.run(batch, step),
            _ => Ok(vec![step(batch)?]),
        }
    }

    /// The loss of a batch from the losses [`RunStrategy::split`] produced.
    pub fn gather_loss(&self, losses: Vec<Tensor>) -> Result<Tensor> {
        match &self.parallel {
            Parallel::Dp(d) => d.gather_loss(losses),
            _ => losses.into_iter().next().ok_or_else(|| Error::state("no loss was produced")),
        }
    }

    /// The prediction of a batch from those [`RunStrategy::split`] produced.
    pub fn gather_output(&self, outputs: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
        match &self.parallel {
            Parallel::Dp(d) => d.gather_outputs(outputs),
            _ => Ok(outputs.into_iter().next().flatten()),
        }
    }

    /// The source this rank reads: its shard of a DataLoader (padded to
    /// equal length, reshuffled per epoch) when `use_sampler` (Lightning's
    /// `use_distributed_sampler`), or the source itself.
    pub fn shard<'a>(&self, source: &'a dyn BatchSource, use_sampler: bool) -> Sharded<'a> {
        match &self.parallel {
            Parallel::Ddp(d) if use_sampler && d.ctx.world_size() > 1 => {
                match source.shard(d.ctx.rank(), d.ctx.world_size()) {
                    Some(owned) => Sharded::Owned(owned),
                    None => Sharded::Borrowed(source),
                }
            }
            _ => Sharded::Borrowed(source),
        }
    }

    /// [`RunStrategy::shard`] of a source the run owns (one a module's
    /// dataloader hook gave).
    pub fn shard_owned(&self, source: Box<dyn BatchSource + Send>, use_sampler: bool) -> Box<dyn BatchSource + Send> {
        let shard = match self.shard(source.as_ref(), use_sampler) {
            Sharded::Owned(b) => Some(b),
            Sharded::Borrowed(_) => None,
        };
        shard.unwrap_or(source)
    }

    /// A failed run: the error names a failed rank when one is known, and
    /// the job is ended (a broken group would make later runs hang).
    pub fn fail(&mut self, e: Error) -> Error {
        let Parallel::Ddp(d) = &mut self.parallel else { return e };
        // A dead child rank is usually noticed by a collective first; give
        // the launcher's watcher a moment so the error can name it.
        if matches!(e.code, ErrorCode::Torch | ErrorCode::Distributed) {
            let _ = d.ctx.await_child_failure(std::time::Duration::from_secs(1));
        }
        let e = d.ctx.explain(e);
        d.ddp = None;
        distributed::abort();
        e
    }
}

/// The optimizers of a run's configurations, for the precision plugin.
fn optimizers_of(configs: &mut [OptimizerConfig]) -> Vec<&mut dyn Optimizer> {
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
