//! The strategy of one run, the head of Lightning's chain loop -> strategy
//! -> precision -> accelerator. [`setup`] resolves the options into one of
//! the strategies of `src/strategies/` (one device, DDP over the process's
//! distributed context, DP), each behind the `Strategy` trait and owning
//! the accelerator, device and precision plugin; the loops reach the
//! model's device, the backward pass, the optimizer steps and the other
//! ranks only through it.
use super::hooks::DeviceSync;
use super::options::TrainerOptions;
use super::source::BatchSource;
use crate::accelerators::{registry, Accelerator, DevicesSpec};
use crate::distributed::{ClusterEnv, ProcessGroup};
use crate::error::{Error, Result, ResultExt};
use crate::strategies::{
    xla, DdpStrategy, DpStrategy, FsdpStrategy, ModelParallelStrategy, Sharded, SingleDeviceStrategy, Strategy,
    StrategyKind,
};
use crate::tensor::device::Device;
use crate::trainer::metrics::ReduceFx;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use tch::Tensor;

/// The strategy of a run (Lightning's `trainer.strategy`): it derefs to
/// the `Strategy` the options chose, and adds what the loops need of any
/// strategy (collecting a step's results, device queries).
pub(crate) struct RunStrategy {
    strategy: Box<dyn Strategy>,
    /// Devices the run uses on this node (Lightning's `num_devices`).
    num_devices: usize,
    /// The groups the run made with `new_group`, in order (group `n` at
    /// `n - 1`): this process's membership, `None` outside them.
    groups: std::sync::Mutex<Vec<Option<ProcessGroup>>>,
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
    if s.kind == StrategyKind::Xla || s.name == "single_xla" {
        xla::check_accelerator(acc.as_ref(), &s.name)?;
    }
    let kind = match s.kind {
        // Lightning's choice for several XLA devices: its XLAStrategy.
        StrategyKind::Auto if list.len() > 1 && acc.name() == "xla" => StrategyKind::Xla,
        StrategyKind::Auto if list.len() > 1 || s.num_nodes > 1 || external_world()? => StrategyKind::Ddp,
        StrategyKind::Auto => StrategyKind::SingleDevice,
        k => k,
    };
    let strategy: Box<dyn Strategy> = match kind {
        StrategyKind::Dp => Box::new(DpStrategy::connect(acc, list, opts)?),
        StrategyKind::Ddp => Box::new(DdpStrategy::connect(acc, &list, opts)?),
        StrategyKind::Fsdp => Box::new(FsdpStrategy::connect(acc, &list, opts)?),
        StrategyKind::ModelParallel => Box::new(ModelParallelStrategy::connect(acc, &list, opts)?),
        StrategyKind::Xla => Box::new(xla::connect(acc, &list, opts)?),
        _ => Box::new(SingleDeviceStrategy::connect(acc, &list, opts)?),
    };
    Ok(RunStrategy { strategy, num_devices, groups: Default::default() })
}

/// Most groups a run makes with `new_group` (group ids fit 16 bits of the
/// C API's log flags).
const MAX_GROUPS: usize = 0xFFFF;

impl Deref for RunStrategy {
    type Target = dyn Strategy;

    fn deref(&self) -> &Self::Target {
        &*self.strategy
    }
}

impl DerefMut for RunStrategy {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.strategy
    }
}

impl RunStrategy {
    /// torch's `new_group(ranks)`: makes a group of the job's `ranks`
    /// (every rank calls it with the same ranks, in the same order) and
    /// returns its id for `sync_dist_group`, the same on every rank: 1 for
    /// the first group of the run, 2 for the next...
    pub fn new_group(&self, ranks: &[usize]) -> Result<u32> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if groups.len() >= MAX_GROUPS {
            return Err(Error::invalid(format!("new_group: a run makes at most {} groups", MAX_GROUPS)));
        }
        groups.push(self.strategy.new_group(ranks)?);
        Ok(groups.len() as u32)
    }

    /// Reduces `values` in place with `op` over `group`: 0 for the whole
    /// job, otherwise a group of [`RunStrategy::new_group`], among its
    /// members (a rank outside it keeps its values, as torch's collectives
    /// on a group without the rank).
    pub fn reduce_in(&self, values: &mut [f64], op: ReduceFx, group: u32) -> Result<()> {
        if group == 0 {
            return self.strategy.reduce(values, op);
        }
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        match groups.get(group as usize - 1) {
            Some(Some(g)) => self.strategy.reduce_over(g, values, op),
            Some(None) => Ok(()),
            None => Err(Error::invalid(format!(
                "sync_dist_group {group}: the run made {} group(s) with new_group",
                groups.len()
            ))),
        }
    }

    /// Devices the run uses on this node (Lightning's `num_devices`).
    pub fn num_devices(&self) -> usize {
        self.num_devices
    }

    /// Runs a step on `batch`: once, or for DP once per chunk with the
    /// chunk's replica of the model; the step's results in chunk order.
    pub fn split<T>(&self, batch: &[Tensor], step: &mut dyn FnMut(&[Tensor]) -> Result<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.strategy.for_each_chunk(batch, &mut |chunk| {
            out.push(step(chunk)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// `Strategy::shard` of a source the run owns (one a module's
    /// dataloader hook gave).
    pub fn shard_owned(&self, source: Box<dyn BatchSource + Send>, use_sampler: bool) -> Box<dyn BatchSource + Send> {
        let shard = match self.strategy.shard(source.as_ref(), use_sampler) {
            Sharded::Owned(b) => Some(b),
            Sharded::Borrowed(_) => None,
        };
        shard.unwrap_or(source)
    }

    /// Starts copying a training batch to this rank's device ahead of its
    /// step ([`super::prefetch`]).
    pub(super) fn copy_ahead(&self, batch: Vec<Tensor>) -> Result<super::prefetch::Prefetched> {
        super::prefetch::copy_ahead(self.strategy.placement(), batch)
    }

    /// This rank's device.
    pub fn device(&self) -> Device {
        self.strategy.placement().device
    }

    /// The root device to synchronize before timing code reads a clock
    /// (the accelerator's `synchronize`); `None` on the CPU.
    pub fn device_sync(&self) -> Option<DeviceSync> {
        let p = self.strategy.placement();
        (p.device != Device::Cpu).then(|| DeviceSync(Arc::clone(&p.accelerator), p.device))
    }

    /// The device's statistics (Lightning's `accelerator.get_device_stats`);
    /// `cpu_stats` true adds the CPU's on another device, false gives none
    /// on a CPU device (DeviceStatsMonitor's `cpu_stats`).
    pub fn device_stats(&self, cpu_stats: Option<bool>) -> Result<Vec<(String, f64)>> {
        let p = self.strategy.placement();
        let on_cpu = p.device == Device::Cpu;
        if on_cpu && cpu_stats == Some(false) {
            return Ok(Vec::new());
        }
        let mut stats = p.accelerator.get_device_stats(p.device)?;
        if !on_cpu && cpu_stats == Some(true) {
            // The registered CPU accelerator: its cpu_percent counts since its last reading.
            let cpu = registry::get("cpu")?;
            stats.extend(cpu.get_device_stats(Device::Cpu)?);
        }
        Ok(stats)
    }
}
