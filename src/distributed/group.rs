//! A c10d process group (libtorch's `ProcessGroupGloo`, or NCCL on CUDA
//! builds; for other devices a custom accelerator's collectives or gloo
//! through the CPU) reached through the C++ shim `csrc/distributed.cpp`,
//! with its collectives.
use super::collectives::{into_cxx, DeviceBackend, KeyStore};
use super::failures::FailureBoard;
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use crate::tensor::device::{empty_on_device_of, Device, DeviceType};
use libc::{c_int, c_void};
use std::ffi::CString;
use std::sync::Arc;
use std::time::Duration;
use tch::Tensor;

/// Whether this build has the gloo backend (CPU process groups).
pub fn gloo_available() -> bool {
    // SAFETY: takes no arguments and cannot fail.
    unsafe { shim::fulmen_cxx_dist_backends() & 1 != 0 }
}

/// Whether this build has the NCCL backend (CUDA process groups).
pub fn nccl_available() -> bool {
    // SAFETY: takes no arguments and cannot fail.
    unsafe { shim::fulmen_cxx_dist_backends() & 2 != 0 }
}

/// How a reduction combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum over ranks.
    Sum,
    /// Product over ranks.
    Product,
    /// Minimum over ranks.
    Min,
    /// Maximum over ranks.
    Max,
    /// Mean over ranks (a sum divided by the world size, as Lightning does
    /// on gloo, which has no average).
    Mean,
}

impl ReduceOp {
    /// Parses "sum", "product", "min", "max", "mean" (also "avg").
    pub fn parse(text: &str) -> Result<ReduceOp> {
        match text.to_ascii_lowercase().as_str() {
            "sum" => Ok(ReduceOp::Sum),
            "product" | "prod" => Ok(ReduceOp::Product),
            "min" => Ok(ReduceOp::Min),
            "max" => Ok(ReduceOp::Max),
            "mean" | "avg" => Ok(ReduceOp::Mean),
            other => {
                Err(Error::invalid(format!("unknown reduce op {other:?}; expected sum, product, min, max or mean")))
            }
        }
    }

    fn code(self) -> c_int {
        match self {
            ReduceOp::Sum | ReduceOp::Mean => 0,
            ReduceOp::Product => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
        }
    }
}

/// Where and how ranks meet: the store address, this rank, the world.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendezvous {
    /// Address of the TCPStore (rank 0's host).
    pub master_addr: String,
    /// Port of the TCPStore.
    pub master_port: u16,
    /// This process's global rank.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// Every rank is a store client (torchrun's agent store,
    /// `TORCHELASTIC_USE_AGENT_STORE=True`); otherwise rank 0 serves it.
    pub all_clients: bool,
    /// Bound on the rendezvous and on every collective.
    pub timeout: Duration,
}

/// The job's TCPStore, joined by this rank.
struct Store(*mut c_void);

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: made by fulmen_cxx_store_new, freed once.
        unsafe { shim::fulmen_cxx_store_free(self.0) }
    }
}

/// How long one attempt to reach rank 0's store may take before `abort`
/// is asked again.
const CONNECT_SLICE: Duration = Duration::from_secs(10);

/// Waits until the store's address accepts TCP connections (plain probes:
/// libtorch's client logs every failed attempt), asking `abort` between
/// probes.
fn wait_for_listener(rv: &Rendezvous, left: &dyn Fn() -> Duration, abort: &dyn Fn() -> Option<String>) -> Result<()> {
    use std::net::{TcpStream, ToSocketAddrs};
    let target = format!("{}:{}", rv.master_addr, rv.master_port);
    loop {
        let reachable = target
            .to_socket_addrs()
            .map(|mut addrs| addrs.any(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok()));
        if matches!(reachable, Ok(true)) {
            return Ok(());
        }
        if let Some(why) = abort() {
            return Err(Error::distributed(format!("{why}; the store at {target} was never reached")));
        }
        if left().is_zero() {
            return Err(Error::distributed(format!(
                "the store at {target} (rank 0) could not be reached within the timeout of {:?}",
                rv.timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Store {
    /// Connects to the store (retrying while rank 0 is not up yet) and
    /// waits until all `world` ranks have counted themselves in it, asking
    /// `abort` between tries.
    fn join(
        rv: &Rendezvous,
        rank: c_int,
        world: c_int,
        addr: &CString,
        abort: &dyn Fn() -> Option<String>,
    ) -> Result<Store> {
        let start = std::time::Instant::now();
        let left = || rv.timeout.saturating_sub(start.elapsed());
        let timeout_ms = i64::try_from(rv.timeout.as_millis()).unwrap_or(i64::MAX).max(1);
        let serving = !rv.all_clients && rv.rank == 0;
        if !serving {
            wait_for_listener(rv, &left, abort)?;
        }
        let store = loop {
            let slice = if serving { rv.timeout } else { left().min(CONNECT_SLICE) };
            let connect_ms = i64::try_from(slice.as_millis()).unwrap_or(i64::MAX).max(1);
            let mut raw: *mut c_void = std::ptr::null_mut();
            // SAFETY: the address lives through the call; `raw` receives an owned store.
            let made = call("connecting to the store", |err, len| unsafe {
                shim::fulmen_cxx_store_new(
                    addr.as_ptr(),
                    c_int::from(rv.master_port),
                    rank,
                    world,
                    c_int::from(rv.all_clients),
                    connect_ms,
                    timeout_ms,
                    &mut raw,
                    err,
                    len,
                )
            });
            match made {
                Ok(()) => break Store(raw),
                Err(e) if serving || left().is_zero() => return Err(classify(e)),
                Err(e) => {
                    if let Some(why) = abort() {
                        return Err(Error::distributed(format!("{why}; {}", e.message)));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        loop {
            let mut joined = 0i64;
            // SAFETY: `store` is live; `joined` receives the count.
            call("counting the ranks that joined", |err, len| unsafe {
                shim::fulmen_cxx_store_joined(store.0, &mut joined, err, len)
            })
            .map_err(classify)?;
            if joined >= i64::from(world) {
                return Ok(store);
            }
            if let Some(why) = abort() {
                return Err(Error::distributed(format!("{why}, before all {world} ranks joined ({joined} did)")));
            }
            if left().is_zero() {
                return Err(Error::distributed(format!(
                    "only {joined} of {world} ranks joined within the timeout of {:?}",
                    rv.timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The identity of `devices`' hook (0 without one).
fn hook_id(devices: Option<&DeviceBackend>) -> usize {
    devices.and_then(|d| d.hook.as_ref()).map_or(0, |h| Arc::as_ptr(h) as *const () as usize)
}

/// A process group: the ranks of one training job and their collectives.
pub struct ProcessGroup {
    raw: *mut c_void,
    rank: usize,
    world_size: usize,
    backend: String,
    device: tch::Device,
    /// The type of the devices the group reduces besides the CPU and CUDA.
    device_type: DeviceType,
    /// Which collectives hook reduces them (its address; 0 for none).
    hook_id: usize,
    /// The groups named so far in the job through this group (Python's
    /// `group_count`: the default group is "0"); `None` for a subgroup,
    /// which is not split further.
    groups_named: Option<std::sync::atomic::AtomicUsize>,
    /// Where the job's ranks record why they failed (the default group
    /// only; `None` for a subgroup or where the store refused it).
    failures: Option<FailureBoard>,
}

// SAFETY: c10d process groups are used from any thread in PyTorch; fulmen
// serializes calls on one group through `&mut`/ownership where it matters.
unsafe impl Send for ProcessGroup {}
// SAFETY: the collectives take `&self` and c10d's backends queue work
// internally; concurrent collectives on one group must be issued in the same
// order on every rank, as in PyTorch.
unsafe impl Sync for ProcessGroup {}

fn raw_list(tensors: &[Tensor]) -> Vec<*mut c_void> {
    tensors.iter().map(|t| t.as_ptr() as *mut c_void).collect()
}

fn check_rank(what: &str, rank: usize, world: usize) -> Result<c_int> {
    if rank >= world {
        return Err(Error::invalid(format!("{what}: rank {rank} is outside the world of {world} processes")));
    }
    c_int::try_from(rank).map_err(|_| Error::invalid(format!("{what}: rank {rank} is too large")))
}

impl ProcessGroup {
    /// Meets the other ranks at the store and creates the group with
    /// `backend` ("gloo", "nccl", or the name of `devices`' hook). With
    /// `devices`, the group also reduces tensors on this rank's device
    /// (`devices.devices[device_index]`): through the accelerator's hook,
    /// or through the CPU for gloo. Until every rank has arrived, `abort`
    /// is asked every few milliseconds whether to give up (a launched rank
    /// that has ended will never come); a rank that does not arrive within
    /// `rv.timeout` is a `Distributed` error.
    pub fn new(
        rv: &Rendezvous,
        backend: &str,
        device_index: usize,
        devices: Option<&DeviceBackend>,
        abort: &dyn Fn() -> Option<String>,
    ) -> Result<ProcessGroup> {
        if rv.world_size == 0 {
            return Err(Error::invalid("process group: world_size must be at least 1"));
        }
        let rank = check_rank("process group", rv.rank, rv.world_size)?;
        let world = c_int::try_from(rv.world_size).map_err(|_| Error::invalid("process group: world too large"))?;
        let addr = CString::new(rv.master_addr.as_str())
            .map_err(|_| Error::invalid("process group: MASTER_ADDR contains a NUL byte"))?;
        let name = CString::new(backend).map_err(|_| Error::invalid("process group: backend contains a NUL byte"))?;
        let timeout_ms = i64::try_from(rv.timeout.as_millis()).unwrap_or(i64::MAX).max(1);
        let device = c_int::try_from(device_index).unwrap_or(0);
        let what = format!(
            "joining the {backend} process group as rank {} of {} at {}:{}",
            rv.rank, rv.world_size, rv.master_addr, rv.master_port
        );
        let store = Store::join(rv, rank, world, &addr, abort).map_err(|e| e.context(&what))?;
        let (device_type, hooks) = match devices {
            None if backend == "nccl" => (DeviceType::Cuda, None),
            None => (DeviceType::Cpu, None),
            Some(d) => {
                let device = d.devices.get(device_index).or(d.devices.first()).copied().unwrap_or(Device::Cpu);
                let hooks = match &d.hook {
                    Some(h) => {
                        // Per attempt: torchrun's agent store outlives restarts.
                        let attempt = std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|_| "0".into());
                        let prefix = format!("fulmen/collectives/{}/{attempt}/", h.name());
                        let keys = KeyStore::prefixed(store.0, &prefix, rv.timeout, d.abort.clone())?;
                        let group = h
                            .new_group(Arc::new(keys), rv.rank, rv.world_size, device)
                            .map_err(|e| e.context(format!("opening the {} group", h.name())))?;
                        Some(into_cxx(group))
                    }
                    None => None,
                };
                (device.kind(), hooks)
            }
        };
        let hooks_ptr = hooks.as_ref().map_or(std::ptr::null(), |h| h as *const _);
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: the store, strings and hooks live through the call; `raw`
        // receives an owned group that keeps its own reference to the store;
        // the shim owns the hooks' context from here on.
        call(&what, |err, len| unsafe {
            shim::fulmen_cxx_pg_new(
                store.0,
                rank,
                world,
                timeout_ms,
                addr.as_ptr(),
                name.as_ptr(),
                device,
                device_type.c10(),
                hooks_ptr,
                &mut raw,
                err,
                len,
            )
        })
        .map_err(classify)?;
        let device = if backend == "nccl" { tch::Device::Cuda(device_index) } else { tch::Device::Cpu };
        let failures = FailureBoard::open(store.0).ok();
        Ok(ProcessGroup {
            raw,
            rank: rv.rank,
            world_size: rv.world_size,
            backend: backend.to_owned(),
            device,
            device_type,
            hook_id: hook_id(devices),
            groups_named: Some(std::sync::atomic::AtomicUsize::new(1)),
            failures,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Splits the job into groups (torch's `new_group(ranks)` for each
    /// part of `partition` in order, named "1", "2", ... in the job's
    /// store as Python numbers them): every rank calls it with the same
    /// partition, and gets the group it is a member of (its rank there in
    /// the order of its part), or `None` when no part holds it. Groups of
    /// an accelerator's collectives hook have no subgroups
    /// (`Unsupported`).
    pub fn new_groups(&self, partition: &[Vec<usize>]) -> Result<Option<ProcessGroup>> {
        use std::sync::atomic::Ordering;
        let Some(named) = &self.groups_named else {
            return Err(Error::new(ErrorCode::Unsupported, "a subgroup is not split into groups of its own"));
        };
        if self.hook_id != 0 {
            return Err(Error::new(
                ErrorCode::Unsupported,
                "the job's collectives come from an accelerator's hook, which has no subgroups",
            ));
        }
        // Checked before the numbering moves, so a refused group leaves
        // the next one the number every rank expects.
        for ranks in partition {
            check_group_ranks(ranks, self.world_size)?;
        }
        let first = named.fetch_add(partition.len(), Ordering::SeqCst);
        let mut mine = None;
        for (i, ranks) in partition.iter().enumerate() {
            if let Some(g) = self.join_subgroup(&(first + i).to_string(), ranks)? {
                mine = Some(g);
            }
        }
        Ok(mine)
    }

    /// The group of `ranks` (ranks of this group, distinct: see
    /// [`check_group_ranks`]) named `name`: this process's membership, or
    /// `None` when it is not one of them. Only the members meet, each
    /// calling it with the same name and ranks.
    fn join_subgroup(&self, name: &str, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
        let Some(rank) = ranks.iter().position(|r| *r == self.rank) else { return Ok(None) };
        let world = c_int::try_from(ranks.len()).map_err(|_| Error::invalid("subgroup: too many ranks"))?;
        let c_name = CString::new(name).map_err(|_| Error::invalid("subgroup: the name contains a NUL byte"))?;
        let backend =
            CString::new(self.backend.as_str()).map_err(|_| Error::invalid("subgroup: backend contains a NUL byte"))?;
        let what = format!("joining subgroup {name:?} as rank {rank} of {}", ranks.len());
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: the parent group and the strings live through the call;
        // `raw` receives an owned group.
        call(&what, |err, len| unsafe {
            shim::fulmen_cxx_pg_subgroup(
                self.raw,
                c_name.as_ptr(),
                rank as c_int,
                world,
                backend.as_ptr(),
                &mut raw,
                err,
                len,
            )
        })
        .map_err(classify)?;
        Ok(Some(ProcessGroup {
            raw,
            rank,
            world_size: ranks.len(),
            backend: self.backend.clone(),
            device: self.device,
            device_type: self.device_type,
            hook_id: 0,
            groups_named: None,
            failures: None,
        }))
    }

    /// Number of processes.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The backend name ("gloo" or "nccl").
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// Whether `devices` asks for the collectives this group was made with
    /// (the same hook object, or none).
    pub fn same_hook(&self, devices: Option<&DeviceBackend>) -> bool {
        self.hook_id == hook_id(devices)
    }

    /// The device type the group was made for (CPU for gloo, CUDA for
    /// NCCL, or a custom accelerator's type).
    pub fn device_type(&self) -> DeviceType {
        self.device_type
    }

    /// Where this group's collectives take their tensors: the CPU for
    /// gloo, this rank's CUDA device for NCCL (which has no CPU backend;
    /// Lightning likewise reduces its decisions on the root device).
    pub fn device(&self) -> tch::Device {
        self.device
    }

    /// This rank's `result` once every rank has reported its own: an error
    /// on any rank fails all of them, each failing rank with its own error,
    /// the others with a `Distributed` error naming the first failed rank
    /// and its reason (the ranks exchange their errors, at most 2 KiB each;
    /// nothing is left in the job's failure board, so a host loop that goes
    /// on after such a failure is not blamed for it later). `what` names
    /// the step in the messages.
    pub fn agree<T>(&self, result: Result<T>, what: &str) -> Result<T> {
        const MAX_REASON: usize = 2048;
        let mine = match &result {
            Ok(_) => String::new(),
            Err(e) => format!("{what}: {}", super::failures::truncate(&e.message, MAX_REASON)),
        };
        let all = self.all_gather_bytes(mine.as_bytes()).map_err(|e| e.context(what.to_string()))?;
        match result {
            Err(e) => Err(e.context(what.to_string())),
            Ok(v) => match all.iter().enumerate().find(|(_, why)| !why.is_empty()) {
                Some((rank, why)) => Err(Error::distributed(format!(
                    "{what}: another rank failed: rank {rank} failed: {}",
                    String::from_utf8_lossy(why)
                ))),
                None => Ok(v),
            },
        }
    }

    /// Every rank's `bytes`, in rank order (two all-gathers: the lengths, then
    /// the bytes padded to the longest).
    pub fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let device = self.device();
        let len = Tensor::f_from_slice(&[bytes.len() as i64])?.f_to_device(device)?;
        let lens = Vec::<i64>::try_from(&self.all_gather(&len)?.f_to_device(tch::Device::Cpu)?.f_flatten(0, -1)?)?;
        let longest = lens.iter().copied().max().unwrap_or(0).max(1) as usize;
        let mut padded = bytes.to_vec();
        padded.resize(longest, 0);
        let all =
            self.all_gather(&Tensor::f_from_slice(&padded)?.f_to_device(device)?)?.f_to_device(tch::Device::Cpu)?;
        let mut out = Vec::with_capacity(lens.len());
        for (r, n) in lens.iter().enumerate() {
            let n = usize::try_from(*n).ok().filter(|n| *n <= longest);
            let n = n.ok_or_else(|| Error::distributed("a rank sent a negative length"))?;
            let mut v = vec![0u8; n];
            all.f_get(r as i64)?.f_narrow(0, 0, n as i64)?.f_copy_data_u8(&mut v, n)?;
            out.push(v);
        }
        Ok(out)
    }

    /// Lightning's `reduce_boolean_decision`: true when every rank's
    /// `decision` is (`all`), or when any rank's is.
    pub fn reduce_decision(&self, decision: bool, all: bool) -> Result<bool> {
        let t = Tensor::from_slice(&[i64::from(decision)]).f_to_device(self.device)?;
        self.all_reduce(&[t.shallow_clone()], if all { ReduceOp::Min } else { ReduceOp::Max })?;
        Ok(t.f_int64_value(&[0])? > 0)
    }

    /// `t` where this group can reduce it: a CPU tensor moves to the
    /// group's device when its backend has none for the CPU (NCCL), as
    /// the host-memory shards of FSDP's CPU offload need; anything else is
    /// `t` itself (shallow).
    pub fn reducible(&self, t: &Tensor) -> Result<Tensor> {
        if self.device != tch::Device::Cpu && Device::of(t)? == Device::Cpu {
            return Ok(t.f_to_device(self.device)?);
        }
        Ok(t.shallow_clone())
    }

    /// Averages `values` over the ranks in place.
    pub fn mean_values(&self, values: &mut [f64]) -> Result<()> {
        self.reduce_values(values, ReduceOp::Mean)
    }

    /// Reduces host values over all ranks with `op`, in place (one
    /// collective).
    pub fn reduce_values(&self, values: &mut [f64], op: ReduceOp) -> Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let t = Tensor::from_slice(values).f_to_device(self.device)?;
        self.all_reduce(&[t.shallow_clone()], op)?;
        values.copy_from_slice(&Vec::<f64>::try_from(&t.f_to_device(tch::Device::Cpu)?)?);
        Ok(())
    }

    /// Reduces `tensors` in place over all ranks.
    pub fn all_reduce(&self, tensors: &[Tensor], op: ReduceOp) -> Result<()> {
        let raw = raw_list(tensors);
        // SAFETY: the tensors outlive the call; the shim reduces them in place.
        call("all_reduce", |err, len| unsafe {
            shim::fulmen_cxx_pg_allreduce(self.raw, raw.as_ptr(), raw.len(), op.code(), err, len)
        })
        .map_err(classify)?;
        if op == ReduceOp::Mean {
            for t in tensors {
                // A shallow clone shares storage: dividing it divides `t`.
                let _ = t.shallow_clone().f_div_scalar_(self.world_size as f64)?;
            }
        }
        Ok(())
    }

    /// Copies `tensors` from rank `root` to every rank, in place.
    pub fn broadcast(&self, tensors: &[Tensor], root: usize) -> Result<()> {
        let root = check_rank("broadcast", root, self.world_size)?;
        let raw = raw_list(tensors);
        // SAFETY: the tensors outlive the call.
        call("broadcast", |err, len| unsafe {
            shim::fulmen_cxx_pg_broadcast(self.raw, raw.as_ptr(), raw.len(), root, err, len)
        })
        .map_err(classify)
    }

    /// Broadcasts parameters or buffers from `root` in coalesced buffers
    /// (DDP's module-state sync); tensors that require grad are fine.
    pub fn broadcast_coalesced(&self, tensors: &[Tensor], root: usize) -> Result<()> {
        if tensors.is_empty() {
            return Ok(());
        }
        let root = check_rank("broadcast_coalesced", root, self.world_size)?;
        let raw = raw_list(tensors);
        // SAFETY: the tensors outlive the call.
        call("broadcast of the module state", |err, len| unsafe {
            shim::fulmen_cxx_pg_broadcast_coalesced(self.raw, raw.as_ptr(), raw.len(), root, err, len)
        })
        .map_err(classify)
    }

    /// Every rank's `input`, stacked along a new first dimension of size
    /// world_size (Lightning's `all_gather`).
    pub fn all_gather(&self, input: &Tensor) -> Result<Tensor> {
        let input = input.f_contiguous()?;
        let outputs: Vec<Tensor> =
            (0..self.world_size).map(|_| input.f_empty_like()).collect::<std::result::Result<_, _>>()?;
        let raw = raw_list(&outputs);
        // SAFETY: input and outputs outlive the call; outputs are written in place.
        call("all_gather", |err, len| unsafe {
            shim::fulmen_cxx_pg_allgather(self.raw, input.as_ptr() as *const c_void, raw.as_ptr(), raw.len(), err, len)
        })
        .map_err(classify)?;
        Ok(Tensor::f_stack(&outputs, 0)?)
    }

    /// Every rank's `input` (contiguous, the same shape everywhere) into a
    /// new `[world_size, numel]` tensor, rank-major: one flat collective
    /// (torch's `all_gather_into_tensor`), for FSDP's unit gathers.
    pub fn all_gather_flat(&self, input: &Tensor) -> Result<Tensor> {
        self.start_all_gather_flat(input)?.wait()
    }

    /// [`ProcessGroup::all_gather_flat`] started without waiting for it:
    /// the collective runs in the backend's own threads while the caller
    /// computes, and [`PendingGather::wait`] gives its result.
    pub(crate) fn start_all_gather_flat(&self, input: &Tensor) -> Result<PendingGather> {
        let input = input.f_contiguous()?;
        let n = input.numel() as i64;
        // gloo splits a flat output into one chunk per rank.
        let output = empty_on_device_of(&[self.world_size as i64 * n], input.kind(), &input)?;
        let mut work: *mut c_void = std::ptr::null_mut();
        // SAFETY: input and output are kept by the returned PendingGather
        // until the collective was waited for; `work` outlives the call.
        call("all_gather_into_tensor", |err, len| unsafe {
            shim::fulmen_cxx_pg_allgather_flat_start(
                self.raw,
                input.as_ptr() as *const c_void,
                output.as_ptr() as *mut c_void,
                &mut work,
                err,
                len,
            )
        })
        .map_err(classify)?;
        Ok(PendingGather { work, output, _input: input, world: self.world_size as i64, numel: n })
    }

    /// Reduces `input` (`[world_size, n]`, contiguous) over the ranks with
    /// `op` (sum, product, min or max) and returns this rank's row: one
    /// flat collective (torch's `reduce_scatter_tensor`).
    pub fn reduce_scatter_flat(&self, input: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let input = input.f_contiguous()?;
        let size = input.size();
        if size.len() != 2 || size[0] != self.world_size as i64 {
            return Err(Error::invalid(format!(
                "reduce_scatter: input of shape {size:?} is not [world_size = {}, n]",
                self.world_size
            )));
        }
        let output = empty_on_device_of(&[size[1]], input.kind(), &input)?;
        let flat = input.f_view([-1])?;
        // SAFETY: input and output outlive the call; output is written in place.
        call("reduce_scatter_tensor", |err, len| unsafe {
            shim::fulmen_cxx_pg_reduce_scatter_flat(
                self.raw,
                flat.as_ptr() as *const c_void,
                output.as_ptr() as *mut c_void,
                op.code(),
                err,
                len,
            )
        })
        .map_err(classify)?;
        if op == ReduceOp::Mean {
            let _ = output.shallow_clone().f_div_scalar_(self.world_size as f64)?;
        }
        Ok(output)
    }

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<()> {
        // SAFETY: plain call on a live group.
        call("barrier", |err, len| unsafe { shim::fulmen_cxx_pg_barrier(self.raw, err, len) }).map_err(classify)
    }

    /// Checks that every rank's parameters match rank 0's in count, shape
    /// and strides (c10d's `verify_params_across_processes`; dtypes and
    /// values are not compared). A model without parameters is refused
    /// (INVALID_ARGUMENT) before anything is sent: c10d's check reads the
    /// first parameter's device.
    pub fn verify_params(&self, params: &[Tensor]) -> Result<()> {
        if params.is_empty() {
            return Err(Error::invalid(
                "the model has no parameters: there is nothing to check across the ranks, to synchronize or to \
                 shard (DDP and FSDP need a model with parameters)",
            ));
        }
        let raw = raw_list(params);
        // SAFETY: the tensors outlive the call.
        call("checking that every rank has the same model", |err, len| unsafe {
            shim::fulmen_cxx_pg_verify_params(self.raw, raw.as_ptr(), raw.len(), err, len)
        })
        .map_err(classify)
    }

    /// Records in the job's store why this rank's run failed, for the
    /// ranks left waiting in a collective ([`Self::first_failure`]).
    pub fn report_failure(&self, reason: &str) {
        if let Some(board) = &self.failures {
            board.report(self.rank, reason);
        }
    }

    /// The first failure another rank of the job recorded, if any.
    pub fn first_failure(&self) -> Option<String> {
        self.failures.as_ref().and_then(|board| board.first_of_others(self.rank))
    }

    /// The shim's handle, for the Reducer.
    pub(crate) fn raw(&self) -> *mut c_void {
        self.raw
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: `raw` came from fulmen_cxx_pg_new and is freed once.
        unsafe { shim::fulmen_cxx_pg_free(self.raw) }
    }
}

/// An all-gather in flight ([`ProcessGroup::start_all_gather_flat`]).
/// Dropped before [`PendingGather::wait`], it waits anyway (errors
/// ignored): its buffers live until the collective every rank issued is
/// done with them.
pub(crate) struct PendingGather {
    work: *mut c_void,
    output: Tensor,
    _input: Tensor,
    world: i64,
    /// Elements of each rank's input.
    numel: i64,
}

impl std::fmt::Debug for PendingGather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingGather").field("output", &self.output.size()).finish()
    }
}

// SAFETY: a c10d Work may be waited for and released from any thread, as
// Python's `Work.wait` is; the tensors are tch's (Send).
unsafe impl Send for PendingGather {}

impl PendingGather {
    /// Waits for the collective; every rank's input as `[world_size, numel]`.
    pub(crate) fn wait(mut self) -> Result<Tensor> {
        self.finish()?;
        Ok(self.output.f_view([self.world, self.numel])?)
    }

    /// Waits for the collective and frees its handle (once: the handle is
    /// null after).
    fn finish(&mut self) -> Result<()> {
        let work = std::mem::replace(&mut self.work, std::ptr::null_mut());
        if work.is_null() {
            return Ok(());
        }
        // SAFETY: `work` came from fulmen_cxx_pg_allgather_flat_start and
        // is taken out of `self`, so it is waited for and freed once, here.
        let waited = call("all_gather_into_tensor", |err, len| unsafe { shim::fulmen_cxx_work_wait(work, err, len) });
        // SAFETY: as above; not used after.
        unsafe { shim::fulmen_cxx_work_free(work) };
        waited.map_err(classify)
    }

    /// Lets go without waiting (the group may be broken): dropped when the
    /// collective is done, else left to the backend with its buffers,
    /// which are never freed.
    pub(crate) fn abandon(self) {
        let mut done: c_int = 0;
        // SAFETY: the work is live until freed, once, by drop.
        let asked = call("all_gather_into_tensor", |err, len| unsafe {
            shim::fulmen_cxx_work_is_completed(self.work, &mut done, err, len)
        });
        if asked.is_ok() && done != 0 {
            drop(self);
        } else {
            std::mem::forget(self);
        }
    }
}

impl Drop for PendingGather {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Turns c10d's failures into fulmen codes: timeouts and lost peers are
/// `Distributed` errors, a missing backend stays `Unsupported`.
pub(super) fn classify(e: Error) -> Error {
    if e.code == ErrorCode::Unsupported {
        return e;
    }
    Error::new(ErrorCode::Distributed, e.message)
}

/// Checks the ranks of a new group: at least one, distinct, each in the
/// world of `world_size` (`InvalidArgument` otherwise).
pub(crate) fn check_group_ranks(ranks: &[usize], world_size: usize) -> Result<()> {
    if ranks.is_empty() {
        return Err(Error::invalid("new_group: a group needs at least one rank"));
    }
    let mut seen = std::collections::HashSet::new();
    match ranks.iter().find(|r| **r >= world_size || !seen.insert(**r)) {
        Some(r) => {
            Err(Error::invalid(format!("new_group: rank {r} is repeated or outside the job's {world_size} rank(s)")))
        }
        None => Ok(()),
    }
}
