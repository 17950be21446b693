//! The strategy of one run: single device, or DDP over the process's
//! distributed context (gradient averaging by c10d's Reducer, sharded data,
//! synchronized metrics and decisions, rank-zero-only files).
use super::data_parallel::DpRun;
use super::device::Placement;
use super::module::LightningModule;
use super::options::TrainerOptions;
use super::source::BatchSource;
use crate::accelerators::{registry, DevicesSpec};
use crate::distributed::{self, ClusterEnv, DistContext, JoinOptions, ReduceOp, Reducer};
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::strategies::StrategyKind;
use std::sync::Arc;
use tch::{Device, Tensor};

/// DDP state of a run.
pub(crate) struct DdpRun {
    ctx: Arc<DistContext>,
    reducer: Option<Reducer>,
    find_unused: bool,
    bucket_cap_mb: f64,
    /// Buffers broadcast from rank 0 before each training forward
    /// (DDP's broadcast_buffers).
    buffers: Vec<Tensor>,
}

/// How a run is spread.
pub(crate) enum RunStrategy {
    /// One process, one device.
    Single,
    /// Distributed data parallel.
    Ddp(DdpRun),
    /// DataParallel: one process, replicas on several devices.
    Dp(DpRun),
}

/// Resolves accelerator, devices, precision and strategy; joins the
/// distributed job when the strategy is DDP (starting the other local
/// ranks when no launcher did).
pub(crate) fn setup(opts: &TrainerOptions) -> Result<(Placement, RunStrategy)> {
    let acc = registry::get_available(&opts.accelerator)?;
    let spec = DevicesSpec::parse(&opts.devices)?;
    let parsed =
        acc.parse_devices(&spec).ctx(format!("devices={:?} for accelerator {:?}", opts.devices, acc.name()))?;
    let list = acc.get_parallel_devices(&parsed)?;
    if list.is_empty() {
        return Err(Error::invalid(format!("devices={:?} selects no device", opts.devices)));
    }
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
            Ok((placement, RunStrategy::Dp(DpRun::new(list))))
        }
        StrategyKind::Ddp | StrategyKind::Xla => {
            let ctx = distributed::join(&JoinOptions {
                devices_per_node: list.len(),
                num_nodes: s.num_nodes,
                backend: s.process_group_backend.clone(),
                cuda: list[0].is_cuda(),
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
            let ddp = DdpRun {
                ctx,
                reducer: None,
                find_unused: s.find_unused_parameters,
                bucket_cap_mb: s.bucket_cap_mb,
                buffers: Vec::new(),
            };
            Ok((placement, RunStrategy::Ddp(ddp)))
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
            Ok((Placement::on(acc, list[0], &opts.precision, opts.grad_scaler)?, RunStrategy::Single))
        }
    }
}

impl RunStrategy {
    /// Whether this process is rank 0 (always, for a single device).
    pub fn is_global_zero(&self) -> bool {
        match self {
            RunStrategy::Single | RunStrategy::Dp(_) => true,
            RunStrategy::Ddp(d) => d.ctx.is_global_zero(),
        }
    }

    /// This process's rank.
    pub fn global_rank(&self) -> usize {
        match self {
            RunStrategy::Single | RunStrategy::Dp(_) => 0,
            RunStrategy::Ddp(d) => d.ctx.rank(),
        }
    }

    /// Number of processes.
    pub fn world_size(&self) -> usize {
        match self {
            RunStrategy::Single | RunStrategy::Dp(_) => 1,
            RunStrategy::Ddp(d) => d.ctx.world_size(),
        }
    }

    /// After the model is on its device: checks every rank has the same
    /// parameters, copies rank 0's parameters and buffers to all ranks, and
    /// (for training) hooks the Reducer.
    pub fn setup_model(&mut self, module: &dyn LightningModule, training: bool) -> Result<()> {
        if let RunStrategy::Dp(d) = self {
            return d.setup_model(module);
        }
        let RunStrategy::Ddp(d) = self else { return Ok(()) };
        let Some(model) = module.model() else {
            return Err(Error::state(
                "ddp needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        let (params, state) = {
            let m = model.lock().unwrap_or_else(|p| p.into_inner());
            let params: Vec<Tensor> = m.parameters().into_iter().filter(Tensor::requires_grad).collect();
            let state: Vec<Tensor> = m.state_dict().into_iter().map(|(_, t)| t).collect();
            d.buffers = m.named_buffers().into_iter().map(|(_, t)| t).collect();
            (params, state)
        };
        let group = &d.ctx.group;
        group.verify_params(&params).map_err(|e| d.ctx.explain(e))?;
        group.broadcast_coalesced(&state, 0).map_err(|e| d.ctx.explain(e))?;
        if training {
            d.reducer = Some(Reducer::new(Arc::clone(group), &params, d.find_unused, d.bucket_cap_mb)?);
        }
        Ok(())
    }

    /// Before a training forward: `sync` is false on the micro-batches of
    /// gradient accumulation that do not step (DDP's no_sync).
    pub fn pre_forward(&mut self, sync: bool) -> Result<()> {
        let RunStrategy::Ddp(d) = self else { return Ok(()) };
        if !d.buffers.is_empty() {
            d.ctx.group.broadcast_coalesced(&d.buffers, 0).map_err(|e| d.ctx.explain(e))?;
        }
        if sync {
            if let Some(r) = d.reducer.as_mut() {
                r.prepare_for_forward()?;
            }
        }
        Ok(())
    }

    /// Between the forward and backward(): arms gradient averaging when
    /// `sync`.
    pub fn pre_backward(&mut self, loss: &Tensor, sync: bool) -> Result<()> {
        let RunStrategy::Ddp(d) = self else { return Ok(()) };
        if let (true, Some(r)) = (sync, d.reducer.as_mut()) {
            let outputs = if d.find_unused { vec![loss.shallow_clone()] } else { Vec::new() };
            r.prepare_for_backward(&outputs)?;
        }
        Ok(())
    }

    /// Averages `values` over ranks in place (sync_dist).
    pub fn mean(&self, values: &mut [f64]) -> Result<()> {
        let RunStrategy::Ddp(d) = self else { return Ok(()) };
        if values.is_empty() {
            return Ok(());
        }
        let t = Tensor::from_slice(values);
        d.ctx.group.all_reduce(&[t.shallow_clone()], ReduceOp::Mean).map_err(|e| d.ctx.explain(e))?;
        values.copy_from_slice(&Vec::<f64>::try_from(&t)?);
        Ok(())
    }

    /// Lightning's `reduce_boolean_decision(all=False)`: true when any rank
    /// says true.
    pub fn any(&self, decision: bool) -> Result<bool> {
        let RunStrategy::Ddp(d) = self else { return Ok(decision) };
        let t = Tensor::from_slice(&[i64::from(decision)]);
        d.ctx.group.all_reduce(&[t.shallow_clone()], ReduceOp::Max).map_err(|e| d.ctx.explain(e))?;
        Ok(t.int64_value(&[0]) > 0)
    }

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<()> {
        match self {
            RunStrategy::Single | RunStrategy::Dp(_) => Ok(()),
            RunStrategy::Ddp(d) => d.ctx.group.barrier().map_err(|e| d.ctx.explain(e)),
        }
    }

    /// Runs a step on `batch`: once, or for DP once per chunk with the
    /// chunk's replica of the model.
    pub fn split<T>(&self, batch: &[Tensor], step: &mut dyn FnMut(&[Tensor]) -> Result<T>) -> Result<Vec<T>> {
        match self {
            RunStrategy::Dp(d) => d.run(batch, step),
            _ => Ok(vec![step(batch)?]),
        }
    }

    /// The loss of a batch from the losses [`RunStrategy::split`] produced.
    pub fn gather_loss(&self, losses: Vec<Tensor>) -> Result<Tensor> {
        match self {
            RunStrategy::Dp(d) => d.gather_loss(losses),
            _ => losses.into_iter().next().ok_or_else(|| Error::state("no loss was produced")),
        }
    }

    /// The prediction of a batch from those [`RunStrategy::split`] produced.
    pub fn gather_output(&self, outputs: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
        match self {
            RunStrategy::Dp(d) => d.gather_outputs(outputs),
            _ => Ok(outputs.into_iter().next().flatten()),
        }
    }

    /// The source this rank reads: its shard of a DataLoader (padded to
    /// equal length, reshuffled per epoch), or the source itself.
    pub fn shard<'a>(&self, source: &'a dyn BatchSource) -> Sharded<'a> {
        match self {
            RunStrategy::Ddp(d) if d.ctx.world_size() > 1 => match source.shard(d.ctx.rank(), d.ctx.world_size()) {
                Some(owned) => Sharded::Owned(owned),
                None => Sharded::Borrowed(source),
            },
            _ => Sharded::Borrowed(source),
        }
    }

    /// A failed run: the error names a failed rank when one is known, and
    /// the job is ended (a broken group would make later runs hang).
    pub fn fail(&mut self, e: Error) -> Error {
        let RunStrategy::Ddp(d) = self else { return e };
        // A dead child rank is usually noticed by a collective first; give
        // the launcher's watcher a moment so the error can name it.
        if matches!(e.code, ErrorCode::Torch | ErrorCode::Distributed) {
            let _ = d.ctx.await_child_failure(std::time::Duration::from_secs(1));
        }
        let e = d.ctx.explain(e);
        d.reducer = None;
        distributed::abort();
        e
    }
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
