//! Distributed data parallel (Lightning's `DDPStrategy`): one process per
//! device in the process's distributed job, the model wrapped as torch's
//! DistributedDataParallel for fitting, DataLoaders sharded per rank,
//! metrics and decisions reduced over the ranks, rank 0 alone writing
//! checkpoints, BatchNorms synchronized over the ranks while fitting
//! (`sync_batchnorm`), and the job ended when the run fails.
use super::strategy::Strategy;
use crate::accelerators::Accelerator;
use crate::distributed::{self, Ddp, DdpOptions, DeviceBackend, DistContext, JoinOptions, ProcessGroup, ReduceOp};
use crate::error::{Error, ErrorCode, Result};
use crate::nn::layers::rank_ops::RankComm;
use crate::nn::layers::sync_batch_norm::RankSum;
use crate::tensor::device::{Device, DeviceType};
use crate::trainer::device::Placement;
use crate::trainer::metrics::ReduceFx;
use crate::trainer::{LightningModule, TrainerOptions};
use std::sync::Arc;
use tch::Tensor;

/// SyncBatchNorm's sums over the job's process group (DDP's and FSDP's),
/// and the collectives of tensor-parallel layers.
pub(crate) struct GroupSum(pub Arc<ProcessGroup>);

impl std::fmt::Debug for GroupSum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupSum")
    }
}

impl RankSum for GroupSum {
    fn sum_in_place(&self, t: &Tensor) -> Result<()> {
        self.0.all_reduce(&[t.shallow_clone()], ReduceOp::Sum)
    }
}

impl RankComm for GroupSum {
    fn rank(&self) -> usize {
        self.0.rank()
    }

    fn world_size(&self) -> usize {
        self.0.world_size()
    }

    fn sum(&self, t: &Tensor) -> Result<Tensor> {
        let copy = t.f_contiguous()?.f_detach_copy()?;
        self.sum_in_place(&copy)?;
        Ok(copy)
    }

    fn gather(&self, t: &Tensor, dim: i64) -> Result<Tensor> {
        let all = self.0.all_gather(t)?;
        Ok(Tensor::f_cat(&all.f_unbind(0)?, dim)?)
    }
}

/// DDP state of a run.
pub(crate) struct DdpStrategy {
    placement: Placement,
    ctx: Arc<DistContext>,
    options: DdpOptions,
    /// The model wrapped as torch's DistributedDataParallel (fit only:
    /// Lightning wraps the model for fitting, not for evaluation runs).
    ddp: Option<Ddp>,
}

impl DdpStrategy {
    /// Joins the distributed job (starting the other local ranks when no
    /// launcher did) and sets this rank's device up: `list[LOCAL_RANK]`,
    /// or the CPU for every rank of a CPU job.
    pub(crate) fn connect(acc: Arc<dyn Accelerator>, list: &[Device], opts: &TrainerOptions) -> Result<Self> {
        let (placement, ctx) = join_job(acc, list, opts, false)?;
        Ok(DdpStrategy { placement, ctx, options: opts.strategy.ddp.clone(), ddp: None })
    }
}

/// Joins the distributed job (starting the other local ranks when no
/// launcher did) and sets this rank's device up: `list[LOCAL_RANK]`, or the
/// CPU for every rank of a CPU job. DDP's, FSDP's and XLA's start; with
/// `host_collectives` the job's group reduces CPU tensors only (the XLA
/// strategy copies what it reduces to the host).
pub(crate) fn join_job(
    acc: Arc<dyn Accelerator>,
    list: &[Device],
    opts: &TrainerOptions,
    host_collectives: bool,
) -> Result<(Placement, Arc<DistContext>)> {
    let s = &opts.strategy;
    let ctx = distributed::join(&JoinOptions {
        devices_per_node: list.len(),
        num_nodes: s.num_nodes,
        backend: s.process_group_backend.clone(),
        cuda: list[0].is_cuda(),
        devices: if host_collectives { None } else { device_backend(acc.as_ref(), list, &s.name)? },
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
    Ok((placement, ctx))
}

/// Reduces `values` over the job's ranks with `op` (sync_dist).
pub(crate) fn reduce_with(ctx: &DistContext, values: &mut [f64], op: ReduceFx) -> Result<()> {
    reduce_in_group(ctx, &ctx.group, values, op)
}

/// Reduces `values` over `group` (the job's or one made with
/// `new_group`) with `op`, a failure explained with the job's context.
pub(crate) fn reduce_in_group(
    ctx: &DistContext,
    group: &crate::distributed::ProcessGroup,
    values: &mut [f64],
    op: ReduceFx,
) -> Result<()> {
    group.reduce_values(values, crate::strategies::strategy::reduce_op(op)).map_err(|e| ctx.explain(e))
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

/// The `Strategy` methods every strategy of one process per device shares
/// (DDP, FSDP, model_parallel): the placement, the ranks from the job's
/// context `ctx`, and the job's reductions and barrier.
macro_rules! job_methods_common {
    () => {
        fn placement(&self) -> &Placement {
            &self.placement
        }

        fn placement_mut(&mut self) -> &mut Placement {
            &mut self.placement
        }

        fn is_global_zero(&self) -> bool {
            self.ctx.is_global_zero()
        }

        fn global_rank(&self) -> usize {
            self.ctx.rank()
        }

        fn world_size(&self) -> usize {
            self.ctx.world_size()
        }

        fn node_rank(&self) -> usize {
            self.ctx.env.node_rank
        }

        fn local_rank(&self) -> usize {
            self.ctx.env.local_rank
        }

        fn reduce(&self, values: &mut [f64], op: crate::trainer::metrics::ReduceFx) -> crate::error::Result<()> {
            crate::strategies::ddp::reduce_with(&self.ctx, values, op)
        }

        fn new_group(&self, ranks: &[usize]) -> crate::error::Result<Option<crate::distributed::ProcessGroup>> {
            self.ctx.group.new_groups(&[ranks.to_vec()]).map_err(|e| self.ctx.explain(e))
        }

        fn reduce_over(
            &self,
            group: &crate::distributed::ProcessGroup,
            values: &mut [f64],
            op: crate::trainer::metrics::ReduceFx,
        ) -> crate::error::Result<()> {
            crate::strategies::ddp::reduce_in_group(&self.ctx, group, values, op)
        }

        fn any(&self, decision: bool) -> crate::error::Result<bool> {
            self.ctx.group.reduce_decision(decision, false).map_err(|e| self.ctx.explain(e))
        }

        fn all(&self, decision: bool) -> crate::error::Result<bool> {
            self.ctx.group.reduce_decision(decision, true).map_err(|e| self.ctx.explain(e))
        }

        fn barrier(&self) -> crate::error::Result<()> {
            self.ctx.group.barrier().map_err(|e| self.ctx.explain(e))
        }
    };
}
pub(crate) use job_methods_common;

/// [`job_methods_common`] and `shard`: each rank reads its shard of a
/// DataLoader (Lightning's DistributedSampler: padded to equal length,
/// reshuffled per epoch).
macro_rules! job_methods {
    () => {
        crate::strategies::ddp::job_methods_common!();

        fn shard<'a>(
            &self,
            source: &'a dyn crate::trainer::BatchSource,
            use_sampler: bool,
        ) -> crate::strategies::Sharded<'a> {
            if !use_sampler || self.ctx.world_size() <= 1 {
                return crate::strategies::Sharded::Borrowed(source);
            }
            match source.shard(self.ctx.rank(), self.ctx.world_size()) {
                Some(owned) => crate::strategies::Sharded::Owned(owned),
                None => crate::strategies::Sharded::Borrowed(source),
            }
        }
    };
}
pub(crate) use job_methods;

/// The `Strategy` methods of a strategy whose checkpoints every rank
/// gathers and rank 0 writes (FSDP, model_parallel).
macro_rules! gathered_checkpoint_methods {
    () => {
        fn saves_checkpoints(&self) -> bool {
            true
        }

        fn gathers_checkpoints(&self) -> bool {
            true
        }

        fn writes_checkpoints(&self) -> bool {
            self.ctx.is_global_zero()
        }
    };
}
pub(crate) use gathered_checkpoint_methods;

impl DdpStrategy {
    /// Gives the model's BatchNorms back their plain forward.
    fn unsync_batch_norms(&self, module: &dyn LightningModule) {
        if let (true, Some(model)) = (self.options.sync_batchnorm, module.model()) {
            model.lock().unwrap_or_else(|p| p.into_inner()).set_batch_norm_sync(None);
        }
    }
}

impl Strategy for DdpStrategy {
    job_methods!();

    /// For fitting, wraps the model as torch's DistributedDataParallel;
    /// evaluation runs leave it unwrapped, as Lightning does.
    fn wrap_model(&mut self, module: &dyn LightningModule, training: bool) -> Result<()> {
        if !training {
            return Ok(());
        }
        let Some(model) = module.model() else {
            return Err(Error::state(
                "ddp needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
        if self.options.sync_batchnorm && self.ctx.world_size() > 1 {
            m.set_batch_norm_sync(Some(Arc::new(GroupSum(Arc::clone(&self.ctx.group)))));
        }
        self.ddp =
            Some(Ddp::new(Arc::clone(&self.ctx.group), &m, self.options.clone()).map_err(|e| self.ctx.explain(e))?);
        Ok(())
    }

    /// The model's BatchNorms plain again (`sync_batchnorm` lasts a fit),
    /// then Lightning's teardown.
    fn teardown(&self, module: &dyn LightningModule) -> Result<()> {
        self.unsync_batch_norms(module);
        self.placement.teardown(module)
    }

    fn teardown_after(&self, module: &dyn LightningModule, err: Error) -> Error {
        self.unsync_batch_norms(module);
        self.placement.teardown_after(module, err)
    }

    fn pre_forward(&mut self, sync: bool) -> Result<()> {
        let DdpStrategy { ctx, ddp: Some(ddp), .. } = self else { return Ok(()) };
        ddp.set_sync(sync);
        ddp.pre_forward(true).map_err(|e| ctx.explain(e))
    }

    fn post_forward(&mut self, loss: &Tensor) -> Result<()> {
        let DdpStrategy { ctx, ddp: Some(ddp), .. } = self else { return Ok(()) };
        ddp.post_forward(std::slice::from_ref(loss), true).map_err(|e| ctx.explain(e))
    }

    fn prepare_manual_backward(&mut self, loss: &Tensor) -> Result<()> {
        let DdpStrategy { ctx, ddp: Some(ddp), .. } = self else { return Ok(()) };
        ddp.prepare_manual_backward(loss).map_err(|e| ctx.explain(e))
    }

    /// Buffers are broadcast when the last forward synchronized.
    fn eval_forward(&mut self) -> Result<()> {
        let DdpStrategy { ctx, ddp: Some(ddp), .. } = self else { return Ok(()) };
        ddp.pre_forward(false).map_err(|e| ctx.explain(e))?;
        ddp.post_forward(&[], false).map_err(|e| ctx.explain(e))
    }

    fn fail(&mut self, e: Error) -> Error {
        let e = self.ctx.fail(e);
        self.ddp = None;
        distributed::abort();
        e
    }
}
