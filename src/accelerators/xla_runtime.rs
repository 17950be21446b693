//! torch_xla's backend, started in this process (`csrc/xla_runtime.cpp`).
//!
//! torch_xla registers its kernels only when its Python extension `_XLAC`
//! is imported, so the backend is started once, the first time XLA is
//! asked for: libpython and libtorch_python are loaded, an interpreter is
//! started without signal handlers, `_XLAC` is imported and its PJRT
//! client started; devices are counted after that. `_XLAC` is looked for
//! in `FULMEN_XLA_LIB_DIR`, else beside the libtorch this process runs (as
//! `make lib-xla` lays it out); libpython is `FULMEN_XLA_LIBPYTHON`, else
//! the system's `libpython3.11.so.1.0`.
use super::tpu_topology;
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use libc::c_char;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The environment variable naming the directory of `_XLAC`.
pub const LIB_DIR_VAR: &str = "FULMEN_XLA_LIB_DIR";
/// The environment variable naming libpython (a path or a soname).
pub const LIBPYTHON_VAR: &str = "FULMEN_XLA_LIBPYTHON";
/// The libpython torch_xla 2.9's `_XLAC` links.
const DEFAULT_LIBPYTHON: &str = "libpython3.11.so.1.0";

/// The directory of the libtorch this process runs.
fn libtorch_dir() -> Result<PathBuf> {
    let mut buf = vec![0 as c_char; 4096];
    // SAFETY: the buffer and the error buffer are valid for their lengths.
    call("libtorch directory", |err, len| unsafe {
        shim::fulmen_cxx_libtorch_dir(buf.as_mut_ptr(), buf.len(), err, len)
    })?;
    // SAFETY: the shim NUL-terminates within the buffer.
    let dir = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Ok(PathBuf::from(dir.to_string_lossy().into_owned()))
}

/// Where `_XLAC` is looked for.
pub fn lib_dir() -> Result<PathBuf> {
    match std::env::var_os(LIB_DIR_VAR).filter(|v| !v.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => libtorch_dir(),
    }
}

/// The `_XLAC` extension in `dir`, if there is one.
fn find_xlac(dir: &std::path::Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("_XLAC.") && n.ends_with(".so")))
}

/// Why the backend cannot be started without trying (no `_XLAC` in its
/// directory), or `None`.
pub fn missing_reason() -> Option<String> {
    let dir = match lib_dir() {
        Ok(d) => d,
        Err(e) => return Some(e.message),
    };
    if find_xlac(&dir).is_some() {
        return None;
    }
    Some(format!(
        "torch_xla's _XLAC extension is not in {} (fulmen must run on the libtorch 2.9 that `make lib-xla` assembles with \
         torch_xla, or {LIB_DIR_VAR} must name _XLAC's directory)",
        dir.display()
    ))
}

/// The PJRT client's devices, as its start counted them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCounts {
    /// This process's devices (`xla:0` ..).
    pub local: usize,
    /// The devices of every process of the PJRT job (on TPUs, every chip
    /// of the slice; on PJRT's CPU device, this process's alone).
    pub global: usize,
}

/// The result of this process's one start of the backend.
static STARTED: OnceLock<std::result::Result<DeviceCounts, String>> = OnceLock::new();

/// Whether a start of the backend was tried in this process.
pub fn started() -> bool {
    STARTED.get().is_some()
}

/// Starts the backend once per process; this process's device count.
/// Every later call returns the first one's result.
/// Until a start is tried, a missing `PJRT_DEVICE` or `_XLAC` fails
/// without loading anything (and may be set right later).
pub fn start() -> Result<usize> {
    device_counts().map(|c| c.local)
}

/// Starts the backend once per process (as [`start`]); the PJRT client's
/// device counts.
pub fn device_counts() -> Result<DeviceCounts> {
    if STARTED.get().is_none() {
        if std::env::var("PJRT_DEVICE").ok().filter(|v| !v.trim().is_empty()).is_none() {
            return Err(Error::new(
                ErrorCode::Unavailable,
                "no PJRT runtime is configured: PJRT_DEVICE is not set (CPU, TPU, CUDA)",
            ));
        }
        if let Some(why) = missing_reason() {
            return Err(Error::new(ErrorCode::Unavailable, why));
        }
    }
    STARTED
        .get_or_init(|| start_once().map_err(|e| e.message))
        .clone()
        .map_err(|why| Error::new(ErrorCode::Unavailable, why))
}

/// Whether `PJRT_DEVICE` names TPUs.
pub fn pjrt_is_tpu() -> bool {
    std::env::var("PJRT_DEVICE").is_ok_and(|v| v.trim().eq_ignore_ascii_case("TPU"))
}

/// Whether this process runs on TPUs and has not started the backend:
/// then its devices are counted from PCI, not by the PJRT client.
pub fn tpu_before_start() -> bool {
    pjrt_is_tpu() && !started()
}

/// Where the host's PCI functions are listed.
const PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// The processes a TPU host runs, one per chip, counted from PCI without
/// starting the PJRT client (torch_xla's `num_local_processes`): the
/// chips, at most `TPU_PROCESS_BOUNDS`'s size when it is set.
pub fn tpu_local_processes() -> usize {
    let chips = tpu_topology::num_available_chips(std::path::Path::new(PCI_DEVICES));
    let bounds = std::env::var("TPU_PROCESS_BOUNDS").ok().and_then(|b| tpu_topology::MeshShape::parse(&b).ok());
    match bounds {
        Some(b) => chips.min(usize::try_from(b.size()).unwrap_or(usize::MAX)),
        None => chips,
    }
}

/// The processes of a TPU job on each host and its hosts, as the xla
/// strategy plans them before the backend starts (none until then).
static TPU_PLAN: std::sync::Mutex<Option<(usize, usize)>> = std::sync::Mutex::new(None);
/// The TPU variables this process set itself (not the user), which its
/// children must not inherit.
static TPU_VARS_SET: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());

/// Records that `local_world` processes share each host's TPU chips, on
/// `num_nodes` hosts (the xla strategy, before its processes start their
/// backends).
pub fn plan_tpu_processes(local_world: usize, num_nodes: usize) {
    *TPU_PLAN.lock().unwrap_or_else(|p| p.into_inner()) = Some((local_world, num_nodes.max(1)));
}

/// The TPU variables this process set (for the launcher to keep from its
/// children, which set their own).
pub fn tpu_vars_set_here() -> Vec<&'static str> {
    TPU_VARS_SET.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Before the backend starts on TPUs, in a process of a planned job of
/// several processes per host: its topology variables, as torch_xla's
/// `xmp.spawn` sets them (its local rank from the launch environment:
/// fulmen's launcher, torchrun, SLURM); a variable already set is kept.
/// Without a plan nothing is set, and the process sees every chip.
fn configure_tpu_process() -> Result<()> {
    let plan = *TPU_PLAN.lock().unwrap_or_else(|p| p.into_inner());
    let Some((local_world, num_nodes)) = plan.filter(|(local, _)| *local > 1) else { return Ok(()) };
    let local_rank = crate::distributed::ClusterEnv::detect(local_world, num_nodes)?.local_rank;
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let env = tpu_topology::tpu_env(&var, &tpu_topology::MetadataServer::default())?;
    let vars = tpu_topology::topology_vars(&env, local_rank, local_world)?;
    let mut set = TPU_VARS_SET.lock().unwrap_or_else(|p| p.into_inner());
    for (key, value) in vars {
        if std::env::var_os(key).is_none() {
            std::env::set_var(key, value);
            set.push(key);
        }
    }
    Ok(())
}

fn start_once() -> Result<DeviceCounts> {
    if pjrt_is_tpu() {
        configure_tpu_process().map_err(|e| e.context("configuring this process's TPU chip"))?;
    }
    let dir = lib_dir()?;
    let dir = CString::new(dir.to_string_lossy().into_owned())
        .map_err(|_| Error::invalid(format!("{LIB_DIR_VAR} holds a NUL byte")))?;
    let libpython = std::env::var(LIBPYTHON_VAR).ok().filter(|v| !v.is_empty());
    let libpython = CString::new(libpython.unwrap_or_else(|| DEFAULT_LIBPYTHON.to_string()))
        .map_err(|_| Error::invalid(format!("{LIBPYTHON_VAR} holds a NUL byte")))?;
    let (mut local, mut global): (i64, i64) = (0, 0);
    // SAFETY: the strings are NUL-terminated; the counts and the error
    // buffer are valid.
    call("xla start", |err, len| unsafe {
        shim::fulmen_cxx_xla_start(dir.as_ptr(), libpython.as_ptr(), &mut local, &mut global, err, len)
    })?;
    Ok(DeviceCounts { local: usize::try_from(local).unwrap_or(0), global: usize::try_from(global).unwrap_or(0) })
}

/// torch_xla's step marker for device `index` (Lightning's
/// `xm.mark_step()`): the pending lazy graph is cut and starts running;
/// with `wait`, this returns when it has run.
pub fn step_marker(index: usize, wait: bool) -> Result<()> {
    let index = i64::try_from(index).map_err(|_| Error::invalid(format!("XLA device index {index} is too large")))?;
    // SAFETY: the error buffer is valid for its length.
    call("xla step marker", |err, len| unsafe { shim::fulmen_cxx_xla_step_marker(index, i32::from(wait), err, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_torch_xla_nothing_starts_and_the_reason_is_given() {
        // This process's libtorch has no _XLAC beside it.
        let why = missing_reason().expect("no _XLAC beside the test's libtorch");
        assert!(why.contains("_XLAC extension is not in"), "{why}");
        let err = start().unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("PJRT_DEVICE") || err.message.contains("_XLAC"), "{}", err.message);
        let err = step_marker(0, false).unwrap_err();
        assert!(err.message.contains("not started"), "{}", err.message);
    }
}
