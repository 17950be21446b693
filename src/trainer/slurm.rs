//! SLURM auto-requeue (Lightning's SLURMEnvironment `auto_requeue` and its
//! SignalConnector): with the trainer option `slurm_auto_requeue` on and
//! the process in a SLURM job (`SLURM_JOB_ID` set, the job name not "bash"
//! or "interactive"), a fit installs a SIGUSR1 handler (only where the
//! signal has its default action, as Lightning does) that just counts. At
//! the next point where ModelCheckpoint may save (the end of a training
//! batch, a training epoch or a validation, on the loop's thread) the run
//! saves `hpc_ckpt_<n>.ckpt` in `default_root_dir` (`n`
//! one above the highest there), runs `scontrol requeue <job id>` (for an
//! array job `<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>`) on rank 0 and
//! stops the fit with FULMEN_CODE_INTERRUPTED. A fit without `ckpt_path`
//! starts from the highest `hpc_ckpt_<n>.ckpt` there
//! (Lightning's `_hpc_resume_path`).
use super::run::Run;
use crate::error::{Error, ErrorCode, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// SIGUSR1 deliveries to fulmen's handler.
static COUNT: AtomicU64 = AtomicU64::new(0);

/// Runs with the handler installed, and the handler it replaced.
struct State {
    users: usize,
    previous: Option<libc::sigaction>,
}

static STATE: Mutex<State> = Mutex::new(State { users: 0, previous: None });

thread_local! {
    /// The runs on this thread, innermost last: the count they have seen
    /// when they watch SIGUSR1, `None` when they do not.
    static RUNS: std::cell::RefCell<Vec<Option<u64>>> = const { std::cell::RefCell::new(Vec::new()) };
}

extern "C" fn on_sigusr1(_sig: libc::c_int) {
    COUNT.fetch_add(1, Ordering::SeqCst);
}

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// Whether this process runs in a SLURM job that is not an interactive
/// session (Lightning: job name "bash" or "interactive").
pub fn detected() -> bool {
    env("SLURM_JOB_ID").is_some() && !matches!(env("SLURM_JOB_NAME").as_deref(), Some("bash" | "interactive"))
}

/// The id `scontrol requeue` takes: `<array job>_<task>` for an array job,
/// else `SLURM_JOB_ID`; `None` when unset or not made of digits, `_` and
/// `-` only (it is passed to a command).
pub fn job_id() -> Option<String> {
    let id = match env("SLURM_ARRAY_JOB_ID") {
        Some(array) => format!("{array}_{}", env("SLURM_ARRAY_TASK_ID")?),
        None => env("SLURM_JOB_ID")?,
    };
    id.bytes().all(|b| b.is_ascii_digit() || b == b'_' || b == b'-').then_some(id)
}

/// The number `n` of a file named `hpc_ckpt_<n>.ckpt`.
fn hpc_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("hpc_ckpt_")?.strip_suffix(crate::callbacks::model_checkpoint::EXTENSION)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The highest `n` of the `hpc_ckpt_<n>.ckpt` files in `dir`.
fn highest(dir: &Path) -> Option<u64> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str().and_then(hpc_number)).max()
}

/// The checkpoint a requeued fit resumes from: the highest
/// `hpc_ckpt_<n>.ckpt` in `dir`, when there is one.
pub fn resume_path(dir: &Path) -> Option<PathBuf> {
    highest(dir).map(|n| dir.join(format!("hpc_ckpt_{n}.ckpt")))
}

/// Where the next hpc checkpoint goes: `hpc_ckpt_<highest + 1>.ckpt` in
/// `dir` (`hpc_ckpt_1.ckpt` first).
pub fn save_path(dir: &Path) -> PathBuf {
    let n = highest(dir).map_or(1, |n| n.saturating_add(1));
    dir.join(format!("hpc_ckpt_{n}.ckpt"))
}

/// Runs `scontrol requeue <job>` (from `PATH`).
pub fn requeue(job: &str) -> Result<()> {
    let status = std::process::Command::new("scontrol")
        .arg("requeue")
        .arg(job)
        .status()
        .map_err(|e| Error::io(format!("running `scontrol requeue {job}`: {e}")))?;
    if !status.success() {
        return Err(Error::io(format!("`scontrol requeue {job}` failed ({status})")));
    }
    Ok(())
}

/// A fit's auto-requeue: where it saves and which job it requeues.
pub(crate) struct Requeue {
    root: PathBuf,
    job: String,
}

impl Requeue {
    /// The requeue of a fit with `slurm_auto_requeue` = `enabled` and
    /// `default_root_dir` = `root`: `None` when off or outside a SLURM job.
    pub fn when(enabled: bool, root: &Path) -> Option<Requeue> {
        if !enabled || !detected() {
            return None;
        }
        Some(Requeue { root: root.to_path_buf(), job: job_id()? })
    }
}

/// The SIGUSR1 handler for one run; dropping it ends the run's watch and,
/// for the last run, puts the previous handler back.
pub(crate) struct SignalGuard {
    active: bool,
}

impl SignalGuard {
    /// Starts watching SIGUSR1 for the run on this thread when `enabled`
    /// and the signal has its default action (a handler the host set, or
    /// SIG_IGN, is left alone, with a warning).
    pub fn install(enabled: bool) -> SignalGuard {
        if !enabled {
            RUNS.with(|r| r.borrow_mut().push(None));
            return SignalGuard { active: false };
        }
        let mut st = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if st.users == 0 {
            // SAFETY: plain sigaction calls with zero-initialised structs.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL
                {
                    drop(st);
                    eprintln!(
                        "fulmen: warning: slurm_auto_requeue: SIGUSR1 already has a handler; it is left alone and \
                         the job is not requeued on it"
                    );
                    RUNS.with(|r| r.borrow_mut().push(None));
                    return SignalGuard { active: false };
                }
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
                new.sa_flags = libc::SA_ONSTACK | libc::SA_RESTART;
                libc::sigemptyset(&mut new.sa_mask);
                if libc::sigaction(libc::SIGUSR1, &new, std::ptr::null_mut()) != 0 {
                    drop(st);
                    RUNS.with(|r| r.borrow_mut().push(None));
                    return SignalGuard { active: false };
                }
                st.previous = Some(old);
            }
        }
        st.users += 1;
        let start = COUNT.load(Ordering::SeqCst);
        RUNS.with(|r| r.borrow_mut().push(Some(start)));
        SignalGuard { active: true }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        RUNS.with(|r| r.borrow_mut().pop());
        if !self.active {
            return;
        }
        let mut st = STATE.lock().unwrap_or_else(|p| p.into_inner());
        st.users -= 1;
        if st.users == 0 {
            if let Some(previous) = st.previous.take() {
                // SAFETY: puts back the handler saved by `install`.
                unsafe { libc::sigaction(libc::SIGUSR1, &previous, std::ptr::null_mut()) };
            }
        }
    }
}

/// Whether SIGUSR1 arrived since the run on this thread last looked (its
/// start at first); looking takes it.
fn take_signal() -> bool {
    RUNS.with(|r| {
        let mut runs = r.borrow_mut();
        let Some(Some(seen)) = runs.last_mut() else { return false };
        let now = COUNT.load(Ordering::SeqCst);
        let arrived = now > *seen;
        *seen = now;
        arrived
    })
}

impl Run<'_> {
    /// After SIGUSR1 under SLURM: saves the hpc checkpoint (rank 0, the
    /// save finished), requeues the job (rank 0) and stops the fit with
    /// FULMEN_CODE_INTERRUPTED; nothing when no signal came.
    pub(super) fn requeue_if_signalled(&mut self) -> Result<()> {
        let Some(settings) = &self.requeue else { return Ok(()) };
        if self.stage != "fit" {
            return Ok(());
        }
        let mut signalled = take_signal();
        if self.strategy.gathers_checkpoints() {
            // Every rank takes part in the save: they decide together.
            signalled = self.strategy.any(signalled)?;
        }
        if !signalled {
            return Ok(());
        }
        let (path, job) = (save_path(&settings.root), settings.job.clone());
        let global_zero = self.strategy.is_global_zero();
        if self.strategy.saves_checkpoints() {
            self.save_checkpoint(&path, false)
                .map_err(|e| e.context("SIGUSR1 under SLURM: saving the hpc checkpoint"))?;
            self.checkpoints.wait().map_err(|e| e.context("SIGUSR1 under SLURM: saving the hpc checkpoint"))?;
        }
        if global_zero {
            requeue(&job).map_err(|e| {
                e.context(format!("SIGUSR1 under SLURM: saved {}, but the job was not requeued", path.display()))
            })?;
        }
        Err(Error::new(
            ErrorCode::Interrupted,
            format!(
                "SIGUSR1 under SLURM: saved {} and requeued job {job} (slurm_auto_requeue); the fit stopped",
                path.display()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpc_names_and_numbers() {
        assert_eq!(hpc_number("hpc_ckpt_12.ckpt"), Some(12));
        for bad in ["hpc_ckpt_.ckpt", "hpc_ckpt_1a.ckpt", "hpc_ckpt_3.ckpt.tmp", "last.ckpt", "hpc_ckpt_-1.ckpt"] {
            assert_eq!(hpc_number(bad), None, "{bad}");
        }
        let dir = crate::test_dirs::TempDir::new("hpc-names");
        assert_eq!(resume_path(&dir), None);
        assert_eq!(save_path(&dir), dir.join("hpc_ckpt_1.ckpt"));
        dir.write("hpc_ckpt_2.ckpt", b"x");
        dir.write("hpc_ckpt_10.ckpt", b"x");
        dir.write("hpc_ckpt_99.ckpt.1234-0.tmp", b"x");
        assert_eq!(resume_path(&dir), Some(dir.join("hpc_ckpt_10.ckpt")));
        assert_eq!(save_path(&dir), dir.join("hpc_ckpt_11.ckpt"));
    }
}
