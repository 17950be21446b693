//! `profiler="pytorch"`: libtorch's own profiler (Kineto, as Lightning's
//! PyTorchProfiler uses through `torch.profiler`) runs for the whole stage;
//! the trainer's actions are named scopes in it (as `record_function`), and
//! at the end it writes a Chrome trace (`chrome://tracing`, Perfetto,
//! TensorBoard's profiler) and a table of the operators that took longest.
use crate::error::{Error, Result};
use crate::shim;
use libc::{c_char, c_void};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// A running libtorch profiler.
#[derive(Debug)]
pub struct TorchProfiler {
    running: bool,
}

/// A named scope in the trace, closed when dropped.
pub struct Scope(*mut c_void);

impl Drop for Scope {
    fn drop(&mut self) {
        // SAFETY: a scope the shim opened, closed once.
        unsafe { shim::fulmen_cxx_profiler_scope_end(self.0) }
    }
}

/// Opens a scope named `name` in the running profiler's trace.
pub fn scope(name: &str) -> Option<Scope> {
    let name = CString::new(name.replace('\0', " ")).ok()?;
    // SAFETY: a NUL-terminated name, copied by the shim.
    let raw = unsafe { shim::fulmen_cxx_profiler_scope_begin(name.as_ptr()) };
    (!raw.is_null()).then_some(Scope(raw))
}

unsafe extern "C" fn on_event(ctx: *mut c_void, name: *const c_char, ns: u64) {
    // SAFETY: `ctx` is the map handed to the shim in `finish`.
    let table = &mut *(ctx as *mut HashMap<String, (u64, u64)>);
    let name = CStr::from_ptr(name).to_string_lossy();
    match table.get_mut(name.as_ref()) {
        Some(entry) => {
            entry.0 += 1;
            entry.1 += ns;
        }
        None => {
            table.insert(name.into_owned(), (1, ns));
        }
    }
}

impl TorchProfiler {
    /// A started profiler when the options ask for libtorch's (with CUDA
    /// kernels when the run's device is a GPU).
    pub fn when(
        kind: super::options::ProfilerKind,
        device: crate::tensor::device::Device,
    ) -> Result<Option<TorchProfiler>> {
        if kind != super::options::ProfilerKind::PyTorch {
            return Ok(None);
        }
        Self::start(matches!(device, crate::tensor::device::Device::Cuda(_))).map(Some)
    }

    /// Starts libtorch's profiler (with CUDA kernels when `cuda`); an error
    /// when it is already running in this process (another trainer).
    pub fn start(cuda: bool) -> Result<TorchProfiler> {
        // SAFETY: no pointers but the error buffer.
        shim::call("starting libtorch's profiler", |err, len| unsafe {
            shim::fulmen_cxx_profiler_start(i32::from(cuda), err, len)
        })
        .map_err(|e| Error::state(format!("profiler=\"pytorch\": {}", e.message)))?;
        Ok(TorchProfiler { running: true })
    }

    /// Stops the profiler, writes its Chrome trace to `trace` and returns
    /// the operator table for `stage`. libtorch writes the trace to a new
    /// file of a name no one can guess, which then replaces `trace`
    /// atomically (a file or link planted at `trace` is replaced, never
    /// followed). The profiler is stopped whatever fails: until the stop
    /// below it is still marked running, so an early error (a folder that
    /// cannot be created) stops it on drop, and the next run can profile.
    pub fn finish(mut self, stage: &str, trace: &Path) -> Result<String> {
        let dir = trace.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}: {e}", dir.display())))?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let staging = dir.join(format!(".fulmen-trace-{}-{nanos:x}.tmp", std::process::id()));
        if staging.symlink_metadata().is_ok() {
            return Err(Error::io(format!("{} exists; not overwritten", staging.display())));
        }
        let path = CString::new(staging.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid(format!("trace path {} contains a NUL byte", trace.display())))?;
        // The shim turns the profiler off before it writes anything, so it
        // is off after this call even when the call fails.
        self.running = false;
        let read = stop(Some(&path)).and_then(|table| {
            let bytes = crate::fs_safe::read_regular(&staging).map_err(|e| e.context("the profiler trace"))?;
            Ok((table, bytes))
        });
        let _ = std::fs::remove_file(&staging);
        let (table, bytes) = read?;
        crate::fs_safe::write_atomic(trace, &bytes)?;
        Ok(describe(stage, trace, &table))
    }
}

impl Drop for TorchProfiler {
    /// A profiler never finished (a failed run) is stopped, its trace dropped.
    fn drop(&mut self) {
        if self.running {
            let _ = stop(None);
        }
    }
}

/// Stops libtorch's profiler, writing its trace to `path` when given;
/// the calls and total time per event name.
fn stop(path: Option<&CString>) -> Result<HashMap<String, (u64, u64)>> {
    let mut table: HashMap<String, (u64, u64)> = HashMap::new();
    let ctx = &mut table as *mut _ as *mut c_void;
    let path = path.map_or(std::ptr::null(), |p| p.as_ptr());
    // SAFETY: NULL or a NUL-terminated path; the callback adds to `table`.
    shim::call("stopping libtorch's profiler", |err, len| unsafe {
        shim::fulmen_cxx_profiler_stop(path, on_event, ctx, err, len)
    })?;
    Ok(table)
}

/// The trace file of `stage` in `dir`: `fit.pt.trace.json`, or
/// `fit-rank1.pt.trace.json` for rank 1 of several.
pub fn trace_path(dir: &Path, stage: &str, rank: usize, world: usize) -> PathBuf {
    if world > 1 {
        dir.join(format!("{stage}-rank{rank}.pt.trace.json"))
    } else {
        dir.join(format!("{stage}.pt.trace.json"))
    }
}

/// The 20 events that took longest in all, with their calls and mean.
fn describe(stage: &str, trace: &Path, table: &HashMap<String, (u64, u64)>) -> String {
    let mut rows: Vec<(&String, &(u64, u64))> = table.iter().collect();
    rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(b.0)));
    rows.truncate(20);
    let width = rows.iter().map(|(n, _)| n.len().min(60)).max().unwrap_or(0).max("Name".len());
    let header = format!("| {:<width$} | {:>10} | {:>15} | {:>14} |", "Name", "Calls", "Total (ms)", "Mean (us)");
    let rule = "-".repeat(header.len());
    let mut out = format!(
        "{} PyTorch Profiler Report (trace: {})\n{rule}\n{header}\n{rule}\n",
        stage.to_uppercase(),
        trace.display()
    );
    for (name, (calls, ns)) in rows {
        let name: String = name.chars().take(60).collect();
        out.push_str(&format!(
            "| {name:<width$} | {calls:>10} | {:>15.3} | {:>14.3} |\n",
            *ns as f64 / 1e6,
            *ns as f64 / 1e3 / *calls as f64
        ));
    }
    out.push_str(&format!("{rule}\n"));
    out
}
