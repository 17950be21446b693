//! A sharding unit: the parameters one module owns (those of its subtree
//! not owned by a nested unit), each sharded on dimension 0 across the
//! ranks as torch's FSDP2 does: dimension 0 padded to a multiple of the
//! world size, rank r holding rows `r * rows .. (r + 1) * rows`.
//!
//! Life cycle (docs/ARCHITECTURE.md): sharded (every parameter holds this
//! rank's rows, which the optimizer steps) -> gathered before the unit's
//! forward (one all-gather of the unit's shards into full buffers the
//! parameters view) -> freed after it under FULL_SHARD (the buffers'
//! storage released in place, hooks left on the outputs) -> gathered again
//! when the first output's gradient arrives -> gradients averaged and
//! scattered to the shards before the optimizer step -> sharded. A gather
//! may have been started ahead by the unit that ran before it
//! (`prefetch.rs`); the gather then takes its result.
//!
//! With a `param_dtype` (torch's `MixedPrecisionPolicy`) the shards keep
//! the parameters' own dtype for the optimizers, while the gathered
//! parameters, and so the forward and backward, are in `param_dtype`;
//! gradients are reduce-scattered in `reduce_dtype` and land in the
//! shards in their dtype. Gathering for a checkpoint or for the end of a
//! run ([`FsdpUnit::gather_master`]) gives the shards' own values.
//!
//! With CPU offload (torch's `CPUOffloadPolicy`) the shards live in the
//! host's memory (pinned under CUDA; their gradients are not), so the
//! optimizers step there: each gather copies the unit's shards to the
//! device first, and each reduce-scatter's result is copied back into the
//! host's gradients. The full buffers, and so the forward and backward,
//! stay on the device.
use super::prefetch::UnitOrder;
use crate::distributed::group::PendingGather;
use crate::distributed::{ProcessGroup, ReduceOp};
use crate::error::{Error, Result};
use crate::nn::ShardHook;
use crate::shim;
use crate::tensor::device::{empty_on_device_of, to_device, to_device_of, zeros_on_device_of, Device};
use crate::tensor::dtype::is_floating;
use crate::tensor::grad::set_grad;
use libc::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tch::{Kind, Tensor};

/// FSDP's mixed precision (torch's `MixedPrecisionPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct MixedPrecision {
    /// The dtype of the gathered parameters and of the compute; `None`:
    /// the parameters' own.
    pub param: Option<Kind>,
    /// The dtype gradients are reduced in; `None`: `param`'s.
    pub reduce: Option<Kind>,
}

impl MixedPrecision {
    /// The dtype a parameter or input of dtype `own` computes in.
    pub fn compute(&self, own: Kind) -> Kind {
        match self.param {
            Some(k) if is_floating(own) => k,
            _ => own,
        }
    }

    /// The dtype gradients of parameters of dtype `own` are reduced in.
    fn reduction(&self, own: Kind) -> Kind {
        match self.reduce {
            Some(k) if is_floating(own) => k,
            _ => self.compute(own),
        }
    }
}

/// The groups a unit communicates in.
pub(crate) struct UnitGroups {
    /// The ranks its parameters are sharded across.
    pub shard: Arc<ProcessGroup>,
    /// Under a hybrid sharding, the ranks holding the same shards on the
    /// other nodes: its gradient shards are averaged across them too.
    pub replicas: Option<Arc<ProcessGroup>>,
}

/// One parameter of a unit.
#[derive(Debug)]
pub(crate) struct ShardedParam {
    /// The module's parameter: a shallow clone, so the same leaf tensor the
    /// model, the host's handles and the optimizers hold.
    pub param: Tensor,
    /// Its full shape.
    pub shape: Vec<i64>,
    /// Its dimension 0 (1 for a 0-dim parameter).
    dim0: i64,
    /// Rows of the padded dimension 0 each rank holds.
    pub rows: i64,
    /// The padded full parameter, `[world * rows, shape[1..]]`, in the
    /// compute dtype, on the device the unit computes and communicates
    /// on; its storage holds no memory while the unit is sharded.
    full: Tensor,
    /// Size of `full`'s storage when gathered.
    full_bytes: usize,
    /// This rank's rows, `[rows, shape[1..]]`: the parameter's data while
    /// sharded, the tensor the optimizer updates (in the host's memory
    /// with CPU offload).
    pub shard: Tensor,
}

impl ShardedParam {
    /// Elements of one rank's shard.
    fn shard_numel(&self) -> i64 {
        self.shard.numel() as i64
    }

    /// Shape of `[rows, shape[1..]]` stacked `n` times on dimension 0.
    fn rows_shape(&self, n: i64) -> Vec<i64> {
        let mut s = vec![n * self.rows];
        s.extend(self.shape.iter().skip(1));
        s
    }

    /// `t` (this parameter's full shape) padded and cut into this rank's
    /// rows: what rank `rank` of `world` holds of it.
    pub fn rows_of(&self, t: &Tensor, rank: usize, world: usize) -> Result<Tensor> {
        Ok(self.rows_of_all(t, world)?.f_narrow(0, rank as i64 * self.rows, self.rows)?.f_contiguous()?.copy())
    }

    /// `t` (the full shape) padded to `[world * rows, ...]`.
    fn rows_of_all(&self, t: &Tensor, world: usize) -> Result<Tensor> {
        let padded = zeros_on_device_of(&self.rows_shape(world as i64), t.kind(), t)?;
        padded.f_narrow(0, 0, self.dim0)?.f_copy_(&t.f_reshape(self.real_shape())?)?;
        Ok(padded)
    }

    /// The full shape with dimension 0 explicit (`[1]` for a 0-dim one).
    fn real_shape(&self) -> Vec<i64> {
        let mut real = vec![self.dim0];
        real.extend(self.shape.iter().skip(1));
        real
    }
}

/// A unit's parameters, locked ([`FsdpUnit::lock_params`]).
pub(crate) struct ParamsGuard<'a>(std::sync::MutexGuard<'a, UnitState>);

impl ParamsGuard<'_> {
    /// The parameters.
    pub fn iter(&self) -> std::slice::Iter<'_, ShardedParam> {
        self.0.params.iter()
    }
}

/// A unit's shared state.
#[derive(Debug)]
struct UnitState {
    params: Vec<ShardedParam>,
    gathered: bool,
    /// Gathered in the shards' own dtype ([`FsdpUnit::gather_master`]), not
    /// the compute dtype (only ever true with a `param_dtype`).
    gathered_master: bool,
    /// The gathered values are copies in the host's memory
    /// ([`FsdpUnit::gather_master_to_host`]): a gather for the device
    /// gathers again.
    on_host: bool,
    /// Shard-shaped gradients parked while the parameters are gathered
    /// (a gradient accumulated over earlier steps, or zeroed in place),
    /// added to the next averaged shard gradient.
    parked: Vec<Option<Tensor>>,
    /// The shard gradients the last averaging set (told apart from a
    /// full-sized gradient of the same shape by identity).
    reduced: Vec<Option<Tensor>>,
    /// Parameters whose gradient arrived in the current backward.
    arrived: usize,
    /// Parameters that require grad at the start of the current step's
    /// forward: the count that completes a backward.
    expected: usize,
    /// A gradient arrived since the unit's gradients were last averaged.
    dirty: bool,
    /// A gradient arrived since the current forward began.
    seen: bool,
    /// The gather started ahead ([`FsdpUnit::prefetch`]), taken by the
    /// next gather in the compute dtype.
    prefetched: Option<Prefetched>,
}

/// A gather started ahead, with the versions of the shards it read (a
/// shard changed since, by an optimizer step or a load, makes it stale).
#[derive(Debug)]
struct Prefetched {
    gather: PendingGather,
    versions: Vec<i64>,
}

/// The versions of the shards' values (in-place changes through the
/// parameter or the shard count).
fn shard_versions(params: &[ShardedParam]) -> Result<Vec<i64>> {
    params.iter().map(|p| Ok(p.param.f_internal_version()? + p.shard.f_internal_version()?)).collect()
}

/// How a unit gathers, frees and reduces.
pub(crate) struct UnitSettings {
    /// Free the gathered parameters after the forward (FULL_SHARD, not the
    /// root unit).
    pub reshard_after_forward: bool,
    /// The dtypes of gathering and reducing.
    pub mp: MixedPrecision,
    /// FSDP2's `reduce_scatter_unused_params`: no flags in the
    /// reduce-scatter, every parameter given a gradient.
    pub reduce_scatter_unused_params: bool,
    /// The shards and their gradients live in the host's memory.
    pub cpu_offload: bool,
}

/// What a unit shares with the model's other units.
pub(crate) struct UnitLinks {
    /// Whether this step's backward averages the gradients.
    pub sync: Arc<AtomicBool>,
    /// The order the units run in, for prefetching.
    pub order: Arc<UnitOrder>,
    /// This unit's index in `order`.
    pub index: usize,
}

/// A sharding unit (see the module comment).
pub(crate) struct FsdpUnit {
    /// The module's dotted path ("" for the root).
    pub path: String,
    state: Mutex<UnitState>,
    group: Arc<ProcessGroup>,
    /// The other nodes' ranks with the same shards (hybrid sharding).
    replicas: Option<Arc<ProcessGroup>>,
    rank: usize,
    world: usize,
    /// Free the gathered parameters after the forward (FULL_SHARD, not the
    /// root unit).
    reshard_after_forward: bool,
    /// The dtypes of gathering and reducing.
    mp: MixedPrecision,
    /// The reduce-scatter carries no flags: every parameter gets a
    /// gradient, zeros where no rank had one (FSDP2's wire).
    reduce_scatter_unused_params: bool,
    /// The first error of a hook that ran inside autograd's backward.
    hook_error: Mutex<Option<Error>>,
    /// Whether this step's backward averages the gradients (false on the
    /// micro-batches of gradient accumulation that do not step), shared
    /// by the strategy's units.
    sync: Arc<AtomicBool>,
    /// Held gathered for the host (`fulmen_fsdp_unshard`): forwards and
    /// backwards leave the parameters as they are.
    pinned: AtomicBool,
    /// An input of the unit's own module required a gradient in this
    /// training forward. With `reduce_scatter_unused_params` (FSDP2's
    /// wire) only such a unit's gradients are averaged in backward, as
    /// soon as they are all there (FSDP2's post-backward hook on the
    /// inputs); the others (the root, a unit fed the data) at the end of
    /// the backward, in `ShardedModel::end_backward`'s order (FSDP2's
    /// final callback).
    inputs_need_grad: AtomicBool,
    /// The unit's gradients were averaged since this training forward
    /// began.
    reduced_this_pass: AtomicBool,
    /// The unit was gathered for a forward or backward since it was made
    /// (FSDP2 reduces a unit only once it has its unsharded parameters).
    ever_gathered: AtomicBool,
    /// The units' order, and this unit's index in it.
    order: Arc<UnitOrder>,
    index: usize,
}

/// Locks `m`, taking the value of a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Resizes the storage under `t` in place.
fn resize_storage(t: &Tensor, nbytes: usize) -> Result<()> {
    // SAFETY: `t` is a live tensor; the shim only swaps its storage's memory.
    shim::call("resizing a sharded parameter's storage", |err, len| unsafe {
        shim::fulmen_cxx_storage_resize(t.as_ptr() as *const c_void, nbytes, err, len)
    })
}

/// Sets aside the shard gradients the last averaging gave the parameters
/// (told apart from full-sized ones by identity), so that what comes next
/// adds to them.
fn park_shard_grads(st: &mut UnitState) -> Result<()> {
    for ((p, parked), reduced) in st.params.iter().zip(st.parked.iter_mut()).zip(st.reduced.iter()) {
        let g = p.param.grad();
        let is_shard = reduced.as_ref().is_some_and(|r| g.defined() && r.data_ptr() == g.data_ptr());
        if is_shard {
            *parked = Some(g);
            set_grad(&p.param, None)?;
        }
    }
    Ok(())
}

/// The size of the storage under `t`.
fn storage_bytes(t: &Tensor) -> Result<usize> {
    let mut n = 0usize;
    // SAFETY: `t` is a live tensor; `n` outlives the call.
    shim::call("reading a storage's size", |err, len| unsafe {
        shim::fulmen_cxx_storage_nbytes(t.as_ptr() as *const c_void, &mut n, err, len)
    })?;
    Ok(n)
}

/// `t` copied into the host's memory for CPU offload, pinned when it
/// comes from a CUDA device (copies between pinned memory and the device
/// run at the bus's speed; torch's `CPUOffloadPolicy(pin_memory=True)`).
fn offloaded(t: &Tensor) -> Result<Tensor> {
    let host = t.f_to_device(tch::Device::Cpu)?;
    match Device::of(t)? {
        Device::Cuda(i) => Ok(host.f_pin_memory(tch::Device::Cuda(i))?),
        _ => Ok(host),
    }
}

/// Makes `param` (the same leaf, whoever holds it) hold `data`: torch's
/// `param.data = data`.
pub(crate) fn point(param: &Tensor, data: &Tensor) -> Result<()> {
    Ok(param.shallow_clone().f_set_data(data)?)
}

impl FsdpUnit {
    /// Shards `params` (already equal on every rank) across the shard
    /// group: each parameter keeps this rank's rows and the full buffers
    /// are freed.
    pub fn new(
        path: String,
        params: Vec<Tensor>,
        groups: UnitGroups,
        settings: UnitSettings,
        links: UnitLinks,
    ) -> Result<Arc<Self>> {
        let UnitSettings { reshard_after_forward, mp, reduce_scatter_unused_params, cpu_offload } = settings;
        let UnitLinks { sync, order, index } = links;
        let UnitGroups { shard: group, replicas } = groups;
        let (rank, world) = (group.rank(), group.world_size());
        let mut sharded = Vec::with_capacity(params.len());
        tch::no_grad(|| -> Result<()> {
            for param in params {
                let shape = param.size();
                let dim0 = shape.first().copied().unwrap_or(1);
                let rows = (dim0 + world as i64 - 1) / world as i64;
                let mut full_shape = vec![rows * world as i64];
                full_shape.extend(shape.iter().skip(1));
                let full = zeros_on_device_of(&full_shape, mp.compute(param.kind()), &param)?;
                let mut sp = ShardedParam { param, shape, dim0, rows, full, full_bytes: 0, shard: Tensor::new() };
                let rows = sp.rows_of(&sp.param.f_detach()?, rank, world)?;
                sp.shard = if cpu_offload { offloaded(&rows)? } else { rows };
                sp.full_bytes = storage_bytes(&sp.full)?;
                point(&sp.param, &sp.shard)?;
                resize_storage(&sp.full, 0)?;
                sharded.push(sp);
            }
            Ok(())
        })?;
        let parked = sharded.iter().map(|_| None).collect();
        let reduced = sharded.iter().map(|_| None).collect();
        let unit = Arc::new(FsdpUnit {
            path,
            state: Mutex::new(UnitState {
                params: sharded,
                gathered: false,
                gathered_master: false,
                on_host: false,
                parked,
                reduced,
                arrived: 0,
                expected: 0,
                dirty: false,
                seen: false,
                prefetched: None,
            }),
            group,
            replicas,
            rank,
            world,
            reshard_after_forward,
            mp,
            reduce_scatter_unused_params,
            hook_error: Mutex::new(None),
            sync,
            pinned: AtomicBool::new(false),
            inputs_need_grad: AtomicBool::new(false),
            reduced_this_pass: AtomicBool::new(false),
            ever_gathered: AtomicBool::new(false),
            order,
            index,
        });
        for p in lock(&unit.state).params.iter() {
            set_post_accumulate(&p.param, Some(Arc::downgrade(&unit)))?;
        }
        Ok(unit)
    }

    /// Holds the unit as it is (`true`: forwards and backwards neither
    /// gather, free nor average it) or lets the step's hooks run again.
    pub fn set_pinned(&self, pinned: bool) {
        self.pinned.store(pinned, Ordering::SeqCst);
    }

    fn is_pinned(&self) -> bool {
        self.pinned.load(Ordering::SeqCst)
    }

    /// The unit's parameters, locked.
    pub fn lock_params(&self) -> ParamsGuard<'_> {
        ParamsGuard(lock(&self.state))
    }

    /// The unit's process group.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// Gathers the full parameters from every rank's shards in the compute
    /// dtype (nothing when they are gathered already): one all-gather for
    /// the unit.
    pub fn gather(&self) -> Result<()> {
        self.gather_as(false)?;
        self.ever_gathered.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Gathers the full parameters in the shards' own dtype: what
    /// checkpoints hold and the model keeps after the run.
    pub fn gather_master(&self) -> Result<()> {
        self.gather_as(self.mp.param.is_some())
    }

    /// [`FsdpUnit::gather_master`], then the values copied to the host's
    /// memory and the device's buffers released, so that a checkpoint
    /// holds one unit at a time on the device (Lightning's full state dict
    /// with `offload_to_cpu`). The parameters hold the copies until
    /// [`FsdpUnit::reshard`] or [`FsdpUnit::reshard_from_params`].
    pub fn gather_master_to_host(&self) -> Result<()> {
        self.gather_master()?;
        let mut st = lock(&self.state);
        if !st.gathered {
            return Ok(());
        }
        tch::no_grad(|| -> Result<()> {
            for p in st.params.iter() {
                point(&p.param, &p.param.f_detach()?.f_to_device(tch::Device::Cpu)?)?;
                resize_storage(&p.full, 0)?;
            }
            Ok(())
        })?;
        st.on_host = true;
        Ok(())
    }

    /// [`FsdpUnit::gather`] (`master` false) or
    /// [`FsdpUnit::gather_master`].
    fn gather_as(&self, master: bool) -> Result<()> {
        let mut st = lock(&self.state);
        if st.gathered && (st.gathered_master != master || st.on_host) {
            drop(st);
            self.reshard()?;
            st = lock(&self.state);
        }
        if st.gathered || st.params.is_empty() {
            st.gathered = true;
            st.on_host = false;
            st.gathered_master = master;
            return Ok(());
        }
        let st = &mut *st;
        // A gather started ahead, in the compute dtype, of the shards as
        // they are now (the same decision on every rank).
        let ahead = match st.prefetched.take() {
            Some(p) if !master && p.versions == shard_versions(&st.params)? => Some(p.gather),
            _ => None,
        };
        tch::no_grad(|| -> Result<()> {
            park_shard_grads(st)?;
            let all = match ahead {
                Some(gather) => gather.wait()?,
                None => {
                    let local = self.flat_shards(&st.params, master)?;
                    if self.world == 1 {
                        local.view([1, -1])
                    } else {
                        self.group.all_gather_flat(&local)?
                    }
                }
            };
            let mut offset = 0;
            for p in st.params.iter() {
                let n = p.shard_numel();
                let full = if master {
                    // Its own buffer, in the shard's dtype, dropped when the
                    // parameter holds its shard again.
                    empty_on_device_of(&p.rows_shape(self.world as i64), p.shard.kind(), &p.full)?
                } else {
                    resize_storage(&p.full, p.full_bytes)?;
                    p.full.shallow_clone()
                };
                full.view([self.world as i64, n]).f_copy_(&all.f_narrow(1, offset, n)?)?;
                offset += n;
                point(&p.param, &full.f_narrow(0, 0, p.dim0)?.f_reshape(&p.shape)?)?;
            }
            Ok(())
        })?;
        st.gathered = true;
        st.on_host = false;
        st.gathered_master = master;
        Ok(())
    }

    /// This rank's shards flattened into one tensor on the device the
    /// unit communicates on (copied there from the host's memory under
    /// CPU offload), in the shards' own dtype (`master`) or the compute
    /// dtype: what a gather sends.
    fn flat_shards(&self, params: &[ShardedParam], master: bool) -> Result<Tensor> {
        let flats = params
            .iter()
            .map(|p| {
                let kind = if master { p.shard.kind() } else { self.mp.compute(p.shard.kind()) };
                Ok(p.shard.view([-1]).f_to_kind(kind)?)
            })
            .collect::<Result<Vec<Tensor>>>()?;
        let flat = Tensor::f_cat(&flats, 0)?;
        match params.first() {
            // One copy of the unit's shards where they are offloaded.
            Some(p) => to_device_of(&flat, &p.full),
            None => Ok(flat),
        }
    }

    /// Starts gathering the parameters in the compute dtype without
    /// waiting (the unit runs next): the next gather takes the result.
    /// Nothing when the unit is gathered, held, already started or alone.
    pub fn prefetch(&self) -> Result<()> {
        if self.world == 1 || self.is_pinned() {
            return Ok(());
        }
        let mut st = lock(&self.state);
        if st.gathered || st.prefetched.is_some() || st.params.is_empty() {
            return Ok(());
        }
        let versions = shard_versions(&st.params)?;
        let local = tch::no_grad(|| self.flat_shards(&st.params, false))?;
        let gather = self.group.start_all_gather_flat(&local)?;
        st.prefetched = Some(Prefetched { gather, versions });
        Ok(())
    }

    /// Drops a gather started ahead and not taken, once it finished.
    pub fn cancel_prefetch(&self) {
        let prefetched = lock(&self.state).prefetched.take();
        drop(prefetched);
    }

    /// Lets go of a gather started ahead without waiting (the group may be
    /// broken): dropped if it finished, else left to the backend.
    pub fn forget_prefetch(&self) {
        if let Some(p) = lock(&self.state).prefetched.take() {
            p.gather.abandon();
        }
    }

    /// Starts the gather of the unit `order` says runs after this one in a
    /// forward (`backward` false) or a backward.
    fn prefetch_next(&self, backward: bool) -> Result<()> {
        if !self.order.prefetches() {
            // Nothing to record the order for.
            return Ok(());
        }
        let next = if backward { self.order.backward_began(self.index) } else { self.order.forward_began(self.index) };
        match next.and_then(|i| self.order.unit(i)) {
            Some(unit) => unit.prefetch().map_err(|e| e.context(format!("prefetching FSDP unit {:?}", unit.path))),
            None => Ok(()),
        }
    }

    /// Gives every parameter back its shard and frees the full buffers.
    pub fn reshard(&self) -> Result<()> {
        let mut st = lock(&self.state);
        if !st.gathered {
            return Ok(());
        }
        let st = &mut *st;
        for ((p, parked), reduced) in st.params.iter().zip(st.parked.iter_mut()).zip(st.reduced.iter()) {
            point(&p.param, &p.shard)?;
            resize_storage(&p.full, 0)?;
            // A full-sized gradient kept for accumulation goes on in the
            // reduction's dtype (FSDP2's accumulated gradient), not in the
            // compute dtype.
            let g = p.param.grad();
            let red = self.mp.reduction(p.shard.kind());
            let is_shard = reduced.as_ref().is_some_and(|r| g.defined() && r.data_ptr() == g.data_ptr());
            if g.defined() && !is_shard && g.kind() != red {
                set_grad(&p.param, Some(&tch::no_grad(|| g.f_to_kind(red))?))?;
            }
            if !p.param.grad().defined() {
                if let Some(g) = parked.take() {
                    set_grad(&p.param, Some(&g))?;
                }
            }
        }
        st.gathered = false;
        st.on_host = false;
        st.gathered_master = false;
        Ok(())
    }

    /// The post-accumulate hook of each parameter: once every parameter's
    /// gradient of this backward arrived, and the step synchronizes, the
    /// unit's gradients are averaged into the shards at once (freeing the
    /// full-sized ones while the backward goes on). A failure is kept for
    /// the strategy.
    fn gradient_arrived(&self) {
        if self.is_pinned() {
            return;
        }
        let mut st = lock(&self.state);
        st.dirty = true;
        st.seen = true;
        st.arrived += 1;
        if st.arrived < st.expected {
            return;
        }
        st.arrived = 0;
        drop(st);
        let at_end = self.reduce_scatter_unused_params && !self.inputs_need_grad.load(Ordering::SeqCst);
        if !self.sync.load(Ordering::SeqCst) || at_end {
            // Accumulating; or reduced at the end of the backward (dirty).
            return;
        }
        if let Err(e) = self.reduce_gradients() {
            lock(&self.hook_error).get_or_insert(e.context(format!("averaging FSDP unit {:?}'s gradients", self.path)));
        }
    }

    /// An optimizer's zero_grad ran over the parameters at `ptrs` (their
    /// data pointers now): their set-aside shard gradients are dropped, or
    /// zeroed in place.
    pub fn zero_parked(&self, ptrs: &std::collections::HashSet<usize>, set_to_none: bool) -> Result<()> {
        let mut st = lock(&self.state);
        let st = &mut *st;
        for (p, parked) in st.params.iter().zip(st.parked.iter_mut()) {
            if parked.is_none() || !ptrs.contains(&(p.param.data_ptr() as usize)) {
                continue;
            }
            if set_to_none {
                *parked = None;
            } else if let Some(g) = parked.as_ref() {
                let _ = tch::no_grad(|| g.shallow_clone().f_zero_())?;
            }
        }
        Ok(())
    }

    /// A training forward begins: the count of arrived gradients restarts
    /// (a backward's gradients complete the unit when every parameter that
    /// requires grad now has one).
    pub fn start_backward_count(&self) {
        self.inputs_need_grad.store(false, Ordering::SeqCst);
        self.reduced_this_pass.store(false, Ordering::SeqCst);
        let mut st = lock(&self.state);
        st.arrived = 0;
        st.seen = false;
        st.expected = st.params.iter().filter(|p| p.param.requires_grad()).count();
    }

    /// Whether a gradient arrived since the current forward began.
    pub fn gradients_arrived(&self) -> bool {
        lock(&self.state).seen
    }

    /// The strategy's end of a step: averages the unit's gradients unless
    /// they were since the last backward (parameters without a gradient in
    /// this backward left the count short).
    pub fn reduce_if_dirty(&self) -> Result<()> {
        let dirty = {
            let mut st = lock(&self.state);
            st.arrived = 0;
            st.dirty
        };
        if dirty {
            self.reduce_gradients()?;
        }
        Ok(())
    }

    /// A backward ended: the next one reduces the unit again.
    pub fn begin_backward_pass(&self) {
        self.reduced_this_pass.store(false, Ordering::SeqCst);
    }

    /// The end of a synchronising backward under
    /// `reduce_scatter_unused_params` (FSDP2's final callback): averages
    /// the unit's gradients unless they were in this pass, zeros for a
    /// unit without any, once the unit was ever gathered (FSDP2's
    /// `post_backward` for every group not reduced yet). Nothing in the
    /// default mode, where a unit reduces as its gradients arrive.
    pub fn reduce_at_end_of_backward(&self) -> Result<()> {
        if !self.reduce_scatter_unused_params
            || self.is_pinned()
            || self.reduced_this_pass.load(Ordering::SeqCst)
            || !self.ever_gathered.load(Ordering::SeqCst)
        {
            return Ok(());
        }
        {
            let mut st = lock(&self.state);
            st.arrived = 0;
            if !st.gathered {
                // A sharded unit: its shard gradients from an earlier
                // step are added to, as FSDP2 adds to its sharded grads.
                tch::no_grad(|| park_shard_grads(&mut st))?;
            }
        }
        self.reduce_gradients()
    }

    /// After the unit's own module ran forward: under FULL_SHARD the
    /// parameters are freed, and a hook on each output that needs a
    /// gradient gathers them again before the unit's backward; outputs
    /// without one (evaluation) free them under every strategy.
    ///
    /// Every module linked to the unit (`owns` false for the ones below its
    /// own module) leaves the hook on its outputs, so a backward that
    /// reaches them after a reshard gathers the unit again, whoever freed
    /// it.
    pub fn after_forward(self: &Arc<Self>, outputs: &[Tensor], owns: bool) -> Result<()> {
        if self.is_pinned() {
            return Ok(());
        }
        let needs_grad: Vec<&Tensor> = outputs.iter().filter(|t| t.defined() && t.requires_grad()).collect();
        for t in &needs_grad {
            register_pre_backward(t, Arc::clone(self))?;
        }
        if !owns {
            return Ok(());
        }
        if needs_grad.is_empty() || self.reshard_after_forward {
            return self.reshard();
        }
        Ok(())
    }

    /// The pre-backward hook: gathers, and starts the gather of the unit
    /// whose backward comes next; a failure is kept for the strategy to
    /// report after the backward, and when the gather failed the buffers
    /// are allocated (zeros) so the backward reads valid memory.
    fn pre_backward(&self) {
        if self.is_pinned() {
            return;
        }
        let Err(e) = self.gather() else {
            if let Err(e) = self.prefetch_next(true) {
                lock(&self.hook_error).get_or_insert(e);
            }
            return;
        };
        let mut st = lock(&self.state);
        for p in st.params.iter() {
            let _ = resize_storage(&p.full, p.full_bytes);
            let _ = tch::no_grad(|| p.full.shallow_clone().f_zero_());
            let _ = point(&p.param, &p.full.narrow(0, 0, p.dim0).reshape(&p.shape));
        }
        st.gathered = true;
        st.on_host = false;
        st.gathered_master = false;
        lock(&self.hook_error).get_or_insert(e.context(format!("gathering FSDP unit {:?} for backward", self.path)));
    }

    /// The device the unit gathers and computes on (`None` for a unit
    /// without parameters).
    pub fn compute_device(&self) -> Result<Option<crate::tensor::device::Device>> {
        lock(&self.state).params.first().map(|p| crate::tensor::device::Device::of(&p.full)).transpose()
    }

    /// The first error a backward hook met, taken.
    pub fn take_hook_error(&self) -> Option<Error> {
        lock(&self.hook_error).take()
    }

    /// Averages the gradients of the unit's parameters over the ranks and
    /// leaves each parameter sharded with its shard of the average as
    /// `.grad` (one reduce-scatter, and under a hybrid sharding one
    /// all-reduce of the shards across the nodes; a parameter no rank has
    /// a gradient for keeps none, as on one device, unless
    /// `reduce_scatter_unused_params`, when it gets zeros).
    pub fn reduce_gradients(&self) -> Result<()> {
        let mut st = lock(&self.state);
        let st = &mut *st;
        if st.params.is_empty() {
            return Ok(());
        }
        let world = self.world as i64;
        let unused_as_zeros = self.reduce_scatter_unused_params;
        // Each parameter's place in the reduce-scatter: all of them, then
        // one flag each (whether any rank had a gradient); or, as FSDP2
        // does, those with a gradient or requiring one, without flags.
        let carried: Vec<bool> =
            st.params.iter().map(|p| !unused_as_zeros || p.param.grad().defined() || p.param.requires_grad()).collect();
        let count = if unused_as_zeros { 0 } else { st.params.len() as i64 };
        tch::no_grad(|| -> Result<()> {
            let total: i64 = st.params.iter().zip(&carried).filter(|(_, c)| **c).map(|(p, _)| p.shard_numel()).sum();
            let first = &st.params[0];
            let buf = zeros_on_device_of(&[world, total + count], self.mp.reduction(first.shard.kind()), &first.full)?;
            // Where the unit's shards live, when not beside the buffers:
            // the host's memory under CPU offload (asked once a reduction).
            let shard_device = Device::of(&first.shard)?;
            let offloaded_to = (shard_device != Device::of(&buf)?).then_some(shard_device);
            let mut offset = 0;
            for (i, p) in st.params.iter().enumerate().filter(|(i, _)| carried[*i]) {
                let n = p.shard_numel();
                let g = p.param.grad();
                if g.defined() {
                    let padded = p.rows_of_all(&g, self.world)?;
                    buf.f_narrow(1, offset, n)?.f_copy_(&padded.view([world, n]))?;
                    if count > 0 {
                        let _ = buf.f_narrow(1, total + i as i64, 1)?.f_fill_(1.0)?;
                    }
                }
                offset += n;
            }
            let ranks = world * self.replicas.as_ref().map_or(1, |r| r.world_size() as i64);
            let (pre, post) = divide_factors(ranks, buf.kind());
            if pre != 1.0 {
                let _ = buf.f_narrow(1, 0, total)?.f_div_scalar_(pre)?;
            }
            // FSDP2 issues no reduce-scatter for a unit with nothing to carry.
            let mine = if self.world > 1 && total + count > 0 {
                self.group.reduce_scatter_flat(&buf, ReduceOp::Sum)?
            } else {
                buf.f_select(0, 0)?
            };
            drop(buf);
            if let Some(replicas) = &self.replicas {
                if total + count > 0 {
                    replicas.all_reduce(&[mine.shallow_clone()], ReduceOp::Sum)?;
                }
            }
            let flags = if count > 0 {
                host_values(&mine.f_narrow(0, total, count)?)?
            } else {
                carried.iter().map(|c| if *c { 1.0 } else { 0.0 }).collect()
            };
            let mut offset = 0;
            for ((((p, flag), parked), reduced), carried) in
                st.params.iter().zip(flags).zip(st.parked.iter_mut()).zip(st.reduced.iter_mut()).zip(&carried)
            {
                let n = p.shard_numel();
                point(&p.param, &p.shard)?;
                let grad = if flag > 0.0 {
                    // Its own storage: optimizers detach and zero gradients in place.
                    let g = mine.f_narrow(0, offset, n)?.f_reshape(p.shard.size())?.f_div_scalar(post)?;
                    let g = if g.kind() == p.shard.kind() { g } else { g.f_to_kind(p.shard.kind())? };
                    let g = match offloaded_to {
                        Some(host) => to_device(&g, host, false)?,
                        None => g,
                    };
                    match parked.take() {
                        Some(earlier) => {
                            let _ = earlier.shallow_clone().f_add_(&g)?;
                            Some(earlier)
                        }
                        None => Some(g),
                    }
                } else {
                    parked.take()
                };
                set_grad(&p.param, grad.as_ref())?;
                *reduced = grad.as_ref().map(Tensor::shallow_clone);
                resize_storage(&p.full, 0)?;
                if *carried {
                    offset += n;
                }
            }
            Ok(())
        })?;
        st.gathered = false;
        st.on_host = false;
        st.gathered_master = false;
        st.dirty = false;
        st.arrived = 0;
        self.reduced_this_pass.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Gathers the full parameters and hands them to the module for good
    /// (the end of a run), without a gradient: each parameter keeps
    /// viewing its full buffer (never freed again, so a graph still alive
    /// reads valid memory), or with `to_host` holds a copy in the host's
    /// memory, so that the device holds one unit at a time while a model
    /// bigger than it comes back whole.
    pub fn unshard_for_good(&self, to_host: bool) -> Result<()> {
        self.gather_master()?;
        let mut st = lock(&self.state);
        tch::no_grad(|| -> Result<()> {
            for p in st.params.iter() {
                set_grad(&p.param, None)?;
                set_post_accumulate(&p.param, None)?;
                if to_host {
                    point(&p.param, &p.param.f_detach()?.f_to_device(tch::Device::Cpu)?)?;
                }
            }
            Ok(())
        })?;
        st.params.clear();
        st.parked.clear();
        st.gathered = false;
        st.on_host = false;
        st.gathered_master = false;
        Ok(())
    }

    /// Removes the unit's hooks from its parameters, leaving them as they
    /// are (a failed run: no collective may run).
    pub fn detach_hooks(&self) {
        for p in lock(&self.state).params.iter() {
            let _ = set_post_accumulate(&p.param, None);
        }
    }

    /// After a checkpoint was loaded into the gathered parameters: each
    /// rank's shard takes its rows of the loaded values, then the unit is
    /// sharded again.
    pub fn reshard_from_params(&self) -> Result<()> {
        let st = lock(&self.state);
        if !st.gathered {
            // The parameters hold the shards already (nothing to cut).
            return Ok(());
        }
        tch::no_grad(|| -> Result<()> {
            for p in st.params.iter() {
                let rows = p.rows_of(&p.param.f_detach()?, self.rank, self.world)?;
                p.shard.shallow_clone().f_copy_(&rows)?;
            }
            Ok(())
        })?;
        drop(st);
        self.reshard()
    }
}

impl std::fmt::Debug for FsdpUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsdpUnit").field("path", &self.path).field("world", &self.world).finish()
    }
}

/// A unit as the modules see it ([`ShardHook`]).
#[derive(Debug)]
pub(crate) struct UnitHook(pub Arc<FsdpUnit>);

impl ShardHook for UnitHook {
    fn before_forward(&self) -> Result<()> {
        if self.0.is_pinned() {
            return Ok(());
        }
        self.0.gather().map_err(|e| e.context(format!("gathering FSDP unit {:?} for its forward", self.0.path)))?;
        self.0.prefetch_next(false)
    }

    fn after_forward(&self, outputs: &[Tensor], owns: bool) -> Result<()> {
        self.0.after_forward(outputs, owns)
    }

    fn input_kind(&self) -> Option<Kind> {
        if self.0.is_pinned() {
            return None;
        }
        self.0.mp.param
    }

    fn note_inputs(&self, requires_grad: bool) {
        if requires_grad {
            self.0.inputs_need_grad.store(true, Ordering::SeqCst);
        }
    }
}

/// Registers the pre-backward hook of `unit` on `output`.
fn register_pre_backward(output: &Tensor, unit: Arc<FsdpUnit>) -> Result<()> {
    extern "C" fn fire(ctx: *mut c_void) {
        // SAFETY: `ctx` is the Box made below, alive until `drop` runs.
        let unit = unsafe { &*(ctx as *const Arc<FsdpUnit>) };
        // A panic must not unwind into autograd's engine.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unit.pre_backward())).is_err() {
            lock(&unit.hook_error).get_or_insert(Error::state("the FSDP pre-backward hook panicked"));
        }
    }
    extern "C" fn release(ctx: *mut c_void) {
        // SAFETY: made by Box::into_raw below; the shim calls this once.
        drop(unsafe { Box::from_raw(ctx as *mut Arc<FsdpUnit>) });
    }
    let ctx = Box::into_raw(Box::new(unit)) as *mut c_void;
    // SAFETY: the shim owns `ctx` from here and calls `release` exactly once.
    shim::call("registering the FSDP pre-backward hook", |err, len| unsafe {
        shim::fulmen_cxx_register_grad_hook(output.as_ptr() as *const c_void, fire, ctx, release, err, len)
    })
}

/// Sets (`Some`) or clears the post-accumulate hook of `param` that tells
/// `unit` a gradient arrived; the hook holds the unit weakly (the unit
/// holds the parameter).
fn set_post_accumulate(param: &Tensor, unit: Option<std::sync::Weak<FsdpUnit>>) -> Result<()> {
    extern "C" fn fire(ctx: *mut c_void) {
        // SAFETY: `ctx` is the Box made below, alive until `release` runs.
        let unit = unsafe { &*(ctx as *const std::sync::Weak<FsdpUnit>) };
        if let Some(unit) = unit.upgrade() {
            // A panic must not unwind into autograd's engine.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unit.gradient_arrived())).is_err() {
                lock(&unit.hook_error).get_or_insert(Error::state("the FSDP post-accumulate hook panicked"));
            }
        }
    }
    extern "C" fn release(ctx: *mut c_void) {
        // SAFETY: made by Box::into_raw below; the shim calls this once.
        drop(unsafe { Box::from_raw(ctx as *mut std::sync::Weak<FsdpUnit>) });
    }
    let (f, ctx, r) = match unit {
        Some(u) => (
            Some(fire as extern "C" fn(*mut c_void)),
            Box::into_raw(Box::new(u)) as *mut c_void,
            Some(release as extern "C" fn(*mut c_void)),
        ),
        None => (None, std::ptr::null_mut(), None),
    };
    // SAFETY: the shim owns `ctx` from here and calls `release` exactly once.
    shim::call("setting the FSDP post-accumulate hook", |err, len| unsafe {
        shim::fulmen_cxx_set_post_accumulate_hook(param.as_ptr() as *const c_void, f, ctx, r, err, len)
    })
}

/// Averages the gradients of replicated `params` over `group` (NO_SHARD):
/// one all-reduce of their flattened gradients; a parameter no rank has a
/// gradient for keeps none.
pub(crate) fn reduce_replicated(group: &ProcessGroup, params: &[Tensor]) -> Result<()> {
    let Some(first) = params.first() else { return Ok(()) };
    let world = group.world_size();
    tch::no_grad(|| -> Result<()> {
        let total: i64 = params.iter().map(|p| p.numel() as i64).sum();
        let count = params.len() as i64;
        let buf = zeros_on_device_of(&[total + count], first.kind(), first)?;
        let mut offset = 0;
        for (i, p) in params.iter().enumerate() {
            let n = p.numel() as i64;
            let g = p.grad();
            if g.defined() {
                buf.f_narrow(0, offset, n)?.f_copy_(&g.view([-1]))?;
                let _ = buf.f_narrow(0, total + i as i64, 1)?.f_fill_(1.0)?;
            }
            offset += n;
        }
        if world > 1 {
            group.all_reduce(&[buf.shallow_clone()], ReduceOp::Sum)?;
        }
        let flags = host_values(&buf.f_narrow(0, total, count)?)?;
        let mut offset = 0;
        for (p, flag) in params.iter().zip(flags) {
            let n = p.numel() as i64;
            if flag > 0.0 {
                // Its own storage: optimizers detach and zero gradients in place.
                let g = buf.f_narrow(0, offset, n)?.f_reshape(p.size())?.f_div_scalar(world as f64)?;
                set_grad(p, Some(&g))?;
            } else {
                set_grad(p, None)?;
            }
            offset += n;
        }
        Ok(())
    })
}

/// How the gradient sum over `ranks` ranks is divided: by `pre` before the
/// reduction and `post` after. Half precision divides by about the square
/// root of `ranks` before, so the sum cannot overflow, as torch's
/// `_get_gradient_divide_factors` does (the same factors); float32 and
/// bfloat16 divide once, after.
fn divide_factors(ranks: i64, kind: Kind) -> (f64, f64) {
    let factor = ranks as f64;
    if !matches!(kind, Kind::Half | Kind::Double) {
        return (1.0, factor);
    }
    let mut pre = 1.0;
    while factor % pre == 0.0 && factor / pre > pre {
        pre *= 2.0;
    }
    (pre, factor / pre)
}

/// The values of a 1-D tensor, on the host.
fn host_values(t: &Tensor) -> Result<Vec<f64>> {
    Ok(Vec::<f64>::try_from(&t.f_to_kind(Kind::Double)?.f_to_device(tch::Device::Cpu)?)?)
}
