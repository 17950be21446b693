//! The process-wide distributed context (torch.distributed's default
//! group): joined once per process by the first DDP run or by the host,
//! reused by later runs, ended by [`shutdown`].
use super::collectives::DeviceBackend;
use super::env::ClusterEnv;
use super::group::{ProcessGroup, Rendezvous};
use super::launcher::{free_port, launcher_gone, threads_per_process, Children, LaunchPlan};
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::DeviceType;
use crate::thread_token::{held_by_this_work, thread_token};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Lightning's default collective timeout (30 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// How to join: processes per node, nodes, backend, timeout.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// Processes on each node (the number of devices).
    pub devices_per_node: usize,
    /// Number of nodes.
    pub num_nodes: usize,
    /// "gloo", "nccl" or a collectives hook's name; `None` picks the
    /// hook of `devices` when there is one, else gloo for CPU, nccl for
    /// CUDA.
    pub backend: Option<String>,
    /// Whether this rank computes on CUDA (picks nccl when `backend` is None).
    pub cuda: bool,
    /// A custom accelerator's devices (another device type than CPU and
    /// CUDA, or CPU devices with a collectives hook) and its hook.
    pub devices: Option<DeviceBackend>,
    /// Bound on the rendezvous and every collective.
    pub timeout: Duration,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions {
            devices_per_node: 1,
            num_nodes: 1,
            backend: None,
            cuda: false,
            devices: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// This process's membership in a distributed job.
pub struct DistContext {
    /// Where this process stands.
    pub env: ClusterEnv,
    /// The default process group.
    pub group: Arc<ProcessGroup>,
    /// The local ranks this process started (fulmen's launcher, rank 0 only).
    children: Mutex<Option<Children>>,
    /// The bound on collectives.
    pub timeout: Duration,
}

impl DistContext {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.env.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.env.world_size
    }

    /// Whether this is rank 0.
    pub fn is_global_zero(&self) -> bool {
        self.env.rank == 0
    }

    /// The first failure of a launched child rank, if any.
    pub fn child_failure(&self) -> Option<String> {
        self.children.lock().unwrap_or_else(|p| p.into_inner()).as_ref().and_then(Children::failure)
    }

    /// Waits up to `limit` for the launcher's watcher to see a child rank
    /// fail (a collective often notices a dead peer first); returns it.
    pub fn await_child_failure(&self, limit: Duration) -> Option<String> {
        let has_children = self.children.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        let deadline = std::time::Instant::now().checked_add(limit);
        loop {
            let failure = self.child_failure();
            if failure.is_some() || !has_children || deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return failure;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Turns an error of a collective into a `Distributed` error that names
    /// a failed child rank when the launcher saw one, and the reason the
    /// first failed rank recorded when one did ([`Self::fail`]).
    pub fn explain(&self, e: Error) -> Error {
        let child = self.child_failure();
        let collective = is_collective(&e);
        let peer = if collective || child.is_some() { self.group.first_failure() } else { None }
            .filter(|p| !e.message.contains(p.as_str()));
        if child.is_none() && peer.is_none() {
            return if collective { Error::new(ErrorCode::Distributed, e.message) } else { e };
        }
        let why: Vec<String> = child.into_iter().chain(peer).collect();
        Error::distributed(format!("{}; on rank {}: {}", why.join("; "), self.rank(), e.message))
    }

    /// This rank's run failed with `e`: a failure of its own (not a peer
    /// lost by a collective) is recorded in the job's store for the ranks it leaves
    /// waiting; a broken collective is explained by what failed elsewhere
    /// (the launcher's watcher is given a moment to see a child rank end,
    /// which a collective often notices first). Returns the error to report.
    pub fn fail(&self, e: Error) -> Error {
        if matches!(e.code, ErrorCode::Torch | ErrorCode::Distributed) {
            let _ = self.await_child_failure(Duration::from_secs(1));
        }
        if !lost_peer(&e.message) {
            self.group.report_failure(&e.message);
        }
        self.explain(e)
    }
}

/// Whether a libtorch error came from c10d (a collective inside backward,
/// the Reducer, gloo's transport, a timeout) rather than from a kernel.
fn from_collective(message: &str) -> bool {
    // Gloo's transport also reports a stalled peer as "Application timeout
    // caused pair closure", naming neither gloo nor the connection.
    const MARKS: [&str; 9] =
        ["gloo", "Gloo", "c10d", "ProcessGroup", "Connection", "Timed out", "timed out", "timeout", "pair closure"];
    MARKS.iter().any(|m| message.contains(m))
}

/// Whether `e` is a collective's failure (c10d's own, or libtorch's error
/// from gloo's transport, the Reducer, a timeout).
fn is_collective(e: &Error) -> bool {
    e.code == ErrorCode::Distributed || (e.code == ErrorCode::Torch && from_collective(&e.message))
}

/// Whether a collective failed because a peer went away or stalled (its
/// connection reset or closed, a timeout), rather than for a reason of
/// this rank's own (a model that differs from the others', a kernel).
fn lost_peer(message: &str) -> bool {
    const MARKS: [&str; 6] = ["Connection", "connection", "Timed out", "timed out", "timeout", "pair closure"];
    MARKS.iter().any(|m| message.contains(m))
}

/// A failed backward() while a DDP Reducer of this process waited for it:
/// a collective's failure (a timeout, a lost rank) becomes a `Distributed`
/// error naming the failed rank when known; other errors are unchanged.
pub fn explain_backward(e: Error) -> Error {
    match current() {
        Some(ctx) if super::backward_armed() => ctx.explain(e),
        _ => e,
    }
}

static CURRENT: Mutex<Option<Arc<DistContext>>> = Mutex::new(None);

/// Serialises joins. CURRENT itself is locked only briefly, so a
/// collectives hook's group_new may ask fulmen_distributed_ranks while its
/// job forms.
static JOINING: Mutex<()> = Mutex::new(());

/// The thread inside `join` (its token), 0 when none.
static JOINING_THREAD: AtomicUsize = AtomicUsize::new(0);

/// Clears JOINING_THREAD when the join ends.
struct JoiningHere;

impl Drop for JoiningHere {
    fn drop(&mut self) {
        JOINING_THREAD.store(0, Ordering::Release);
    }
}

/// The context joined by this process, if any.
pub fn current() -> Option<Arc<DistContext>> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Joins the job this process belongs to, or returns the context already
/// joined (which must have the same world size). When no launcher started
/// the processes and the world has more than one process on this node,
/// fulmen starts the other local ranks first (re-executing this program).
pub fn join(opts: &JoinOptions) -> Result<Arc<DistContext>> {
    if held_by_this_work(JOINING_THREAD.load(Ordering::Acquire)) {
        return Err(Error::state(
            "joining the distributed job from inside its own join (a collectives hook's group_new): \
             the job is not formed yet",
        ));
    }
    let _serial = JOINING.lock().unwrap_or_else(|p| p.into_inner());
    JOINING_THREAD.store(thread_token(), Ordering::Release);
    let _joining = JoiningHere;
    let mut env = ClusterEnv::detect(opts.devices_per_node, opts.num_nodes)?;
    let hook = opts.devices.as_ref().and_then(|d| d.hook.as_ref());
    let backend = match (&opts.backend, hook) {
        (Some(b), _) => b.clone(),
        (None, Some(h)) => h.name().to_owned(),
        (None, None) if opts.cuda => "nccl".to_owned(),
        (None, None) => "gloo".to_owned(),
    };
    let mut devices = opts.devices.clone();
    if let Some(d) = devices.as_mut() {
        match &d.hook {
            Some(h) if h.name() == backend => {}
            _ if backend == "gloo" => d.hook = None,
            _ => {
                return Err(Error::invalid(format!(
                    "process_group_backend {backend:?} cannot reduce tensors on {} devices: use \"gloo\" (through \
                     the CPU){}",
                    d.devices.first().map_or("these".to_owned(), |x| x.kind().name()),
                    hook.map_or(String::new(), |h| format!(" or the accelerator's own {:?}", h.name()))
                )));
            }
        }
    }
    if let Some(ctx) = current().as_ref() {
        if ctx.world_size() != env.world_size {
            return Err(Error::state(format!(
                "this process already belongs to a job of {} ranks; this run asks for {} \
                 (end the first with fulmen_distributed_shutdown)",
                ctx.world_size(),
                env.world_size
            )));
        }
        if let Some(d) = &devices {
            let kind = d.devices.first().map_or(DeviceType::Cpu, |x| x.kind());
            if ctx.group.device_type() != kind || ctx.group.backend() != backend || !ctx.group.same_hook(Some(d)) {
                return Err(Error::state(format!(
                    "this process already belongs to a job whose group reduces with {} on {} devices; this run \
                     asks for {backend} on {} devices, or another accelerator's collectives (end the first with \
                     fulmen_distributed_shutdown)",
                    ctx.group.backend(),
                    ctx.group.device_type().name(),
                    kind.name()
                )));
            }
        }
        return Ok(Arc::clone(ctx));
    }
    let mut children = None;
    // As Lightning's environment: a job fulmen starts itself (a world of
    // one too) gets a free port when MASTER_PORT is not set.
    if !env.external && env.master_port == 0 {
        env.master_port = free_port()?;
    }
    if !env.external && env.world_size > 1 {
        let threads = if std::env::var_os("OMP_NUM_THREADS").is_none() {
            let t = threads_per_process(opts.devices_per_node);
            tch::set_num_threads(t as i32);
            Some(t)
        } else {
            None
        };
        children = Some(Children::launch(&LaunchPlan {
            local_world: opts.devices_per_node,
            node_rank: env.node_rank,
            world_size: env.world_size,
            master_addr: env.master_addr.clone(),
            master_port: env.master_port,
            threads,
        })?);
    } else if env.master_port == 0 {
        return Err(Error::invalid(format!(
            "{} environment: MASTER_PORT is not set; rank {} cannot find rank 0",
            env.kind.name(),
            env.rank
        )));
    }
    let rv = Rendezvous {
        master_addr: env.master_addr.clone(),
        master_port: env.master_port,
        rank: env.rank,
        world_size: env.world_size,
        all_clients: env.all_clients,
        timeout: opts.timeout,
    };
    // A launched rank that has ended (or, in a launched rank, a launcher
    // that is gone) will never join: stop waiting at once.
    // A collectives hook waiting on the store gives up, as the rendezvous
    // below does, when a rank can no longer come.
    if let Some(d) = devices.as_mut() {
        d.abort = Some(match &children {
            Some(c) => c.probe(),
            None => Arc::new(launcher_gone),
        });
    }
    let abort = || match &children {
        Some(c) => c.ended(),
        None => launcher_gone(),
    };
    let group = match ProcessGroup::new(&rv, &backend, env.local_rank, devices.as_ref(), &abort) {
        Ok(g) => g,
        Err(e) => {
            if let Some(c) = &children {
                let failure = c.failure();
                c.kill_all();
                if let Some(f) = failure.filter(|f| !e.message.contains(f.as_str())) {
                    return Err(Error::distributed(format!("{f}; {}", e.message)));
                }
            }
            return Err(e);
        }
    };
    let ctx =
        Arc::new(DistContext { env, group: Arc::new(group), children: Mutex::new(children), timeout: opts.timeout });
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&ctx));
    Ok(ctx)
}

/// Leaves the job: rank 0 of fulmen's launcher waits up to `timeout` for
/// the ranks it started to end and reports the first that failed; every
/// rank then drops its process group. Nothing to do when no job was joined.
pub fn shutdown(timeout: Duration) -> Result<()> {
    let ctx = CURRENT.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(ctx) = ctx else { return Ok(()) };
    let children = ctx.children.lock().unwrap_or_else(|p| p.into_inner()).take();
    match children {
        Some(c) => c.wait(timeout),
        None => Ok(()),
    }
}

/// Ends the job after a failure of this rank: the ranks this process
/// started are killed and the context is dropped, so a later run starts
/// afresh instead of waiting on a broken group.
pub fn abort() {
    let ctx = CURRENT.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(ctx) = ctx {
        if let Some(c) = ctx.children.lock().unwrap_or_else(|p| p.into_inner()).take() {
            c.kill_all();
        }
    }
}

/// Ends the job after a failure of this rank's host code: `reason` is
/// recorded in the job's store for the ranks left waiting (their broken
/// collectives then name it), then [`abort`]. Nothing without a job.
pub fn abort_with_reason(reason: &str) {
    if let Some(ctx) = current() {
        ctx.group.report_failure(reason);
    }
    abort();
}

#[cfg(test)]
mod tests {
    use super::{from_collective, lost_peer};

    #[test]
    fn gloo_transport_failures_are_collective_and_kernel_errors_are_not() {
        for m in [
            "Internal torch error: Application timeout caused pair closure",
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:17557: Connection reset by peer",
            "ProcessGroupGloo::allreduce: Timed out waiting 5000ms",
        ] {
            assert!(from_collective(m), "{m}");
        }
        assert!(!from_collective("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"));
    }

    #[test]
    fn a_lost_peer_is_told_from_a_failure_of_this_rank() {
        for m in [
            "Internal torch error: Application timeout caused pair closure",
            "[pair.cc:553] Connection closed by peer [127.0.0.1]:39105",
            "ProcessGroupGloo::allreduce: Timed out waiting 5000ms",
        ] {
            assert!(lost_peer(m), "{m}");
        }
        assert!(!lost_peer("params[0] in this process with sizes [9, 2] appears not to match sizes of the same param"));
        assert!(!lost_peer("training_step (epoch 0, global step 2, batch 2): the loss is NaN; no update was made"));
    }
}
