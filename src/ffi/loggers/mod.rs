//! Loggers: host loggers (`fulmen_logger_vtable`: every logged metric and
//! the hyperparameters handed to the host, for its own monitoring), the
//! CSV, TensorBoard, MLflow, W&B and Comet loggers as handles
//! (`fulmen_logger`), and images, histograms and texts logged from hooks.
pub mod comet;
pub mod file_logger;
pub mod hook_media;
mod media_args;
pub mod mlflow;
pub mod wandb;

use crate::error::Result;
use crate::ffi::base::callback::{call_host, read_vtable, Userdata};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::trainer::runs::fulmen_trainer;
use crate::loggers::Logger;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CString};
use std::path::Path;

/// A logger implemented by the host. Set `struct_size` to
/// `sizeof(fulmen_logger_vtable)`; NULL slots are skipped. The arrays
/// passed are valid only during the call. Calls come from the thread
/// running the trainer.
#[repr(C)]
pub struct fulmen_logger_vtable {
    /// `sizeof(fulmen_logger_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when the trainer is freed; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// `n` metrics (`names[i]` = `values[i]`) at `step` in `epoch`; `epoch` is -1
    /// for the values Lightning logs without one: a validation or test
    /// batch's step values (at the loader's batch count), and
    /// LearningRateMonitor's, ThroughputMonitor's and DeviceStatsMonitor's.
    pub log_metrics: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            names: *const *const c_char,
            values: *const f64,
            n: usize,
            epoch: i64,
            step: i64,
        ) -> *mut fulmen_error,
    >,
    /// `n` hyperparameters as text (`keys[i]` = `values[i]`).
    pub log_hyperparams: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            keys: *const *const c_char,
            values: *const *const c_char,
            n: usize,
        ) -> *mut fulmen_error,
    >,
    /// The run ended: `status` is "success" or "failed". An error returned
    /// for "failed" is dropped, so the run's own failure is reported.
    pub finalize: Option<unsafe extern "C" fn(userdata: *mut c_void, status: *const c_char) -> *mut fulmen_error>,
    /// ModelCheckpoint wrote the checkpoint `path` (Lightning's
    /// `after_save_checkpoint`), on rank 0, before the run goes on; an
    /// error stops the run. Appended: a vtable whose `struct_size` ends
    /// before it is accepted, the slot read as NULL.
    pub after_save_checkpoint:
        Option<unsafe extern "C" fn(userdata: *mut c_void, path: *const c_char) -> *mut fulmen_error>,
}

struct HostLogger {
    userdata: Userdata,
    log_metrics: Option<
        unsafe extern "C" fn(*mut c_void, *const *const c_char, *const f64, usize, i64, i64) -> *mut fulmen_error,
    >,
    log_hyperparams: Option<
        unsafe extern "C" fn(*mut c_void, *const *const c_char, *const *const c_char, usize) -> *mut fulmen_error,
    >,
    finalize: Option<unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut fulmen_error>,
    after_save_checkpoint: Option<unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut fulmen_error>,
}

fn c_strings<'a>(items: impl Iterator<Item = &'a String>) -> Vec<CString> {
    items.map(|s| CString::new(s.replace('\0', " ")).unwrap_or_default()).collect()
}

impl Logger for HostLogger {
    fn name(&self) -> &str {
        "host"
    }

    fn log_dir(&self) -> Option<&Path> {
        None
    }

    /// `epoch` -1 when the metrics carry none (an evaluation batch's).
    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        let Some(f) = self.log_metrics else { return Ok(()) };
        let names = c_strings(metrics.keys());
        let ptrs: Vec<*const c_char> = names.iter().map(|s| s.as_ptr()).collect();
        let values: Vec<f64> = metrics.values().copied().collect();
        call_host("log_metrics", || unsafe {
            f(self.userdata.ptr(), ptrs.as_ptr(), values.as_ptr(), values.len(), epoch.unwrap_or(-1), step)
        })
    }

    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        let Some(f) = self.log_hyperparams else { return Ok(()) };
        let keys = c_strings(params.keys());
        let values = c_strings(params.values());
        let kp: Vec<*const c_char> = keys.iter().map(|s| s.as_ptr()).collect();
        let vp: Vec<*const c_char> = values.iter().map(|s| s.as_ptr()).collect();
        call_host("log_hyperparams", || unsafe { f(self.userdata.ptr(), kp.as_ptr(), vp.as_ptr(), kp.len()) })
    }

    fn save(&mut self) -> Result<()> {
        Ok(())
    }

    fn finalize(&mut self, status: &str) -> Result<()> {
        let Some(f) = self.finalize else { return Ok(()) };
        let s = CString::new(status).unwrap_or_default();
        call_host("finalize", || unsafe { f(self.userdata.ptr(), s.as_ptr()) })
    }

    /// A host's slot may read the file.
    fn reads_checkpoints(&self) -> bool {
        self.after_save_checkpoint.is_some()
    }

    fn after_save_checkpoint(&mut self, path: &Path) -> Result<()> {
        let Some(f) = self.after_save_checkpoint else { return Ok(()) };
        let p = CString::new(path.to_string_lossy().replace('\0', " ")).unwrap_or_default();
        call_host("after_save_checkpoint", || unsafe { f(self.userdata.ptr(), p.as_ptr()) })
    }
}

/// Adds a host logger that receives every metric the file loggers get (and
/// the metrics of validate / test runs). `vtable` is copied; on failure
/// `userdata_free` is not called.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`struct_size` smaller than the
/// vtable before `after_save_checkpoint` was appended).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_logger(
    trainer: *mut fulmen_trainer,
    vtable: *const fulmen_logger_vtable,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        // Vtables are append-only: the first layout ends before
        // `after_save_checkpoint`; slots past `struct_size` read as NULL.
        let v1_size = std::mem::offset_of!(fulmen_logger_vtable, after_save_checkpoint);
        let v = read_vtable(vtable, v1_size, "fulmen_logger_vtable")?;
        t.inner.add_logger(Box::new(HostLogger {
            userdata: Userdata::new(v.userdata, v.userdata_free),
            log_metrics: v.log_metrics,
            log_hyperparams: v.log_hyperparams,
            finalize: v.finalize,
            after_save_checkpoint: v.after_save_checkpoint,
        }));
        Ok(())
    })
}
