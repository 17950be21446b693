//! fulmen's own launcher (Lightning's subprocess script launcher): the host
//! program, started once, re-executes itself for local ranks 1..N-1 with the
//! same arguments and `LOCAL_RANK`, `NODE_RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT` set, and watches them: when one fails, the
//! others are ended and the failure is reported.
use crate::error::{Error, Result};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The variable that tells a launched rank its launcher's pid, so it can
/// give up when the launcher is gone before the job has formed.
pub const LAUNCHER_PID: &str = "FULMEN_LAUNCHER_PID";

/// Why a rank started by fulmen's launcher should give up: its launcher
/// (local rank 0) is no longer its parent process.
pub fn launcher_gone() -> Option<String> {
    let pid: u32 = std::env::var(LAUNCHER_PID).ok()?.parse().ok()?;
    let parent = std::os::unix::process::parent_id();
    (parent != pid).then(|| format!("the launching process (local rank 0, pid {pid}) has exited"))
}

/// What the watcher saw.
#[derive(Debug, Default)]
struct Watch {
    /// The first failure: "rank 2 (pid 1234) exited with status 1".
    failure: Option<String>,
    /// Ranks whose process has ended, with success or not, and how.
    finished: Vec<(usize, bool, String)>,
    /// Set to end the watcher.
    stop: bool,
}

/// How a child that ended, ended: the first failure, else the first to end.
fn first_ended(watch: &Mutex<Watch>) -> Option<String> {
    let w = watch.lock().unwrap_or_else(|p| p.into_inner());
    w.failure.clone().or_else(|| w.finished.first().map(|(_, _, how)| how.clone()))
}

/// The child processes of this launcher and their watcher thread.
pub struct Children {
    procs: Arc<Mutex<Vec<(usize, Child)>>>,
    watch: Arc<Mutex<Watch>>,
    watcher: Option<JoinHandle<()>>,
}

/// A free TCP port on this host for the store (as Lightning's
/// `find_free_network_port`; another program may still take it first).
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io(format!("looking for a free port for the process group: {e}")))?;
    Ok(listener.local_addr().map_err(|e| Error::io(e.to_string()))?.port())
}

/// Threads each of `local_world` processes may use: all cores divided
/// among them unless `OMP_NUM_THREADS` says otherwise (Lightning's
/// `_set_num_threads_if_needed`).
pub fn threads_per_process(local_world: usize) -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (cores / local_world.max(1)).max(1)
}

/// Everything a child needs to join.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    /// Processes per node (local ranks 0..local_world).
    pub local_world: usize,
    /// This node's index.
    pub node_rank: usize,
    /// Processes in the whole job.
    pub world_size: usize,
    /// The store address.
    pub master_addr: String,
    /// The store port.
    pub master_port: u16,
    /// `OMP_NUM_THREADS` for the children, when the user set none.
    pub threads: Option<usize>,
}

impl Children {
    /// Starts local ranks 1..local_world as copies of this program.
    pub fn launch(plan: &LaunchPlan) -> Result<Children> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::io(format!("ddp launcher: cannot find this program's executable: {e}")))?;
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        let mut procs = Vec::new();
        for local in 1..plan.local_world {
            let mut cmd = Command::new(&exe);
            cmd.args(&args)
                .env("LOCAL_RANK", local.to_string())
                .env("NODE_RANK", plan.node_rank.to_string())
                .env("WORLD_SIZE", plan.world_size.to_string())
                .env("MASTER_ADDR", &plan.master_addr)
                .env("MASTER_PORT", plan.master_port.to_string())
                .env(LAUNCHER_PID, std::process::id().to_string());
            if let Some(t) = plan.threads {
                cmd.env("OMP_NUM_THREADS", t.to_string());
            }
            // A TPU chip this process took is not the child's: it sets its own.
            for var in crate::accelerators::xla_runtime::tpu_vars_set_here() {
                cmd.env_remove(var);
            }
            match cmd.spawn() {
                Ok(child) => procs.push((local, child)),
                Err(e) => {
                    for (_, mut c) in procs {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return Err(Error::io(format!(
                        "ddp launcher: starting local rank {local} ({}): {e}",
                        exe.display()
                    )));
                }
            }
        }
        let procs = Arc::new(Mutex::new(procs));
        let watch = Arc::new(Mutex::new(Watch::default()));
        let watcher = {
            let procs = Arc::clone(&procs);
            let watch = Arc::clone(&watch);
            std::thread::Builder::new()
                .name("fulmen-ddp-watch".into())
                .spawn(move || watch_children(&procs, &watch))
                .map_err(|e| Error::io(format!("ddp launcher: starting the watcher thread: {e}")))?
        };
        Ok(Children { procs, watch, watcher: Some(watcher) })
    }

    /// The first child that has ended, successfully or not: before the
    /// rendezvous completes, any ended child means the job cannot form.
    pub fn ended(&self) -> Option<String> {
        first_ended(&self.watch)
    }

    /// [`Children::ended`] as a closure that outlives this borrow (for a
    /// collectives hook's store, which waits in slices).
    pub fn probe(&self) -> std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync> {
        let watch = Arc::clone(&self.watch);
        std::sync::Arc::new(move || first_ended(&watch))
    }

    /// The first failure of a child, if any.
    pub fn failure(&self) -> Option<String> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).failure.clone()
    }

    /// Ends every child still running (after a failure of this rank).
    pub fn kill_all(&self) {
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        for (_, c) in procs.iter_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
        }
    }

    /// Waits up to `timeout` for every child to end; an error names the
    /// first that failed or the ones still running.
    pub fn wait(self, timeout: Duration) -> Result<()> {
        // A timeout too long for the clock never expires.
        let deadline = std::time::Instant::now().checked_add(timeout);
        let total = self.procs.lock().unwrap_or_else(|p| p.into_inner()).len();
        loop {
            let (failure, done) = {
                let w = self.watch.lock().unwrap_or_else(|p| p.into_inner());
                (w.failure.clone(), w.finished.len())
            };
            if let Some(f) = failure {
                self.kill_all();
                return Err(Error::distributed(f));
            }
            if done == total {
                return Ok(());
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                self.kill_all();
                return Err(Error::distributed(format!(
                    "ddp launcher: {} of {total} child ranks were still running after {:?} and were ended",
                    total - done,
                    timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        if let Some(h) = self.watcher.take() {
            let _ = h.join();
        }
        // Reap what has ended; a child still running keeps running (it may
        // be finishing the host program) and is reaped by the system.
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        for (_, c) in procs.iter_mut() {
            let _ = c.try_wait();
        }
    }
}

/// Polls the children; on the first failure records it and ends the rest.
fn watch_children(procs: &Mutex<Vec<(usize, Child)>>, watch: &Mutex<Watch>) {
    loop {
        if watch.lock().unwrap_or_else(|p| p.into_inner()).stop {
            return;
        }
        let mut failed = None;
        {
            let mut list = procs.lock().unwrap_or_else(|p| p.into_inner());
            let mut w = watch.lock().unwrap_or_else(|p| p.into_inner());
            for (rank, child) in list.iter_mut() {
                if w.finished.iter().any(|(r, _, _)| r == rank) {
                    continue;
                }
                if let Ok(Some(status)) = child.try_wait() {
                    let how = format!("local rank {rank} (pid {}) {}", child.id(), describe(status));
                    w.finished.push((*rank, status.success(), how.clone()));
                    if !status.success() && w.failure.is_none() {
                        failed = Some(how);
                    }
                }
            }
            if let Some(f) = &failed {
                w.failure = Some(f.clone());
                for (_, c) in list.iter_mut() {
                    if matches!(c.try_wait(), Ok(None)) {
                        let _ = c.kill();
                    }
                }
            }
            if w.finished.len() == list.len() && w.failure.is_some() {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended abnormally".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_and_thread_caps() {
        assert!(free_port().unwrap() > 0);
        assert!(threads_per_process(1) >= 1);
        assert_eq!(threads_per_process(100_000), 1);
    }
}
