//! DDP's gradient averaging: libtorch's `c10d::Reducer`, which hooks every
//! parameter's gradient accumulator and all-reduces gradients in buckets
//! while backward() still runs.
use super::group::{classify, ProcessGroup};
use crate::error::{Error, Result};
use crate::shim::{self, call};
use libc::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tch::Tensor;

/// How parameters are first put in buckets (torch's
/// `_compute_bucket_assignment_by_size` limits and the Reducer's caps).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BucketPlan {
    /// Size limits of the first buckets, the last one repeating (bytes).
    pub limits: Vec<i64>,
    /// `bucket_bytes_cap`, used when the buckets are rebuilt.
    pub cap: i64,
    /// `first_bucket_bytes_cap`, used when the buckets are rebuilt.
    pub first: i64,
}

/// Reducers armed for a backward that has not run yet, in this process.
static ARMED: AtomicUsize = AtomicUsize::new(0);

/// Whether some Reducer of this process expects its backward: a failure of
/// that backward is then a failure of DDP's all-reduce.
pub fn backward_armed() -> bool {
    ARMED.load(Ordering::Relaxed) > 0
}

/// Averages the gradients of a set of parameters over a process group
/// during backward (one per DDP-wrapped model).
pub struct Reducer {
    raw: *mut c_void,
    /// Keeps the group alive as long as the reducer uses it.
    _group: Arc<ProcessGroup>,
    /// Counted in [`ARMED`]: prepare_for_backward ran, the next
    /// prepare_for_forward (or the drop) ends it.
    armed: bool,
}

// SAFETY: the reducer is driven from one thread at a time (`&mut self`).
unsafe impl Send for Reducer {}

impl Reducer {
    /// Buckets `params` (the trainable parameters, in model order) as
    /// `plan` says, as DDP does, and hooks them; `find_unused` is DDP's
    /// find_unused_parameters.
    pub(crate) fn new(
        group: Arc<ProcessGroup>,
        params: &[Tensor],
        find_unused: bool,
        plan: &BucketPlan,
    ) -> Result<Reducer> {
        if params.is_empty() {
            return Err(Error::invalid("DDP: the model has no trainable parameter to synchronize"));
        }
        if let Some(p) = params.iter().find(|p| !p.requires_grad()) {
            return Err(Error::invalid(format!("DDP: parameter of shape {:?} does not require grad", p.size())));
        }
        let raw_params: Vec<*mut c_void> = params.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: the group, parameters and limits are alive; the shim
        // copies the tensor references it keeps.
        call("creating the DDP reducer", |err, len| unsafe {
            shim::fulmen_cxx_reducer_new(
                group.raw(),
                raw_params.as_ptr(),
                raw_params.len(),
                c_int::from(find_unused),
                plan.limits.as_ptr(),
                plan.limits.len(),
                plan.cap,
                plan.first,
                &mut raw,
                err,
                len,
            )
        })?;
        Ok(Reducer { raw, _group: group, armed: false })
    }

    fn disarm(&mut self) {
        if std::mem::take(&mut self.armed) {
            ARMED.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Call before a forward pass whose backward will reduce.
    pub fn prepare_for_forward(&mut self) -> Result<()> {
        self.disarm();
        // SAFETY: `raw` is a live reducer.
        call("DDP prepare_for_forward", |err, len| unsafe {
            shim::fulmen_cxx_reducer_prepare_forward(self.raw, err, len)
        })
    }

    /// Rebuilds the buckets in the order gradients were ready in the first
    /// synchronized backward (once; a collective when it happens, as in
    /// DDP's `_pre_forward`). Returns whether it rebuilt them.
    pub fn rebuild_buckets(&mut self) -> Result<bool> {
        let mut rebuilt: c_int = 0;
        // SAFETY: `raw` is a live reducer; `rebuilt` receives a flag.
        call("DDP rebuilding its buckets", |err, len| unsafe {
            shim::fulmen_cxx_reducer_rebuild_buckets(self.raw, &mut rebuilt, err, len)
        })
        .map_err(classify)?;
        Ok(rebuilt != 0)
    }

    /// Call after the forward pass, before backward(): the coming backward
    /// all-reduces the gradients. `outputs` are the forward's outputs (the
    /// loss), used to find unused parameters when that is on.
    pub fn prepare_for_backward(&mut self, outputs: &[Tensor]) -> Result<()> {
        let raw: Vec<*mut c_void> = outputs.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        // SAFETY: `raw` is a live reducer and the outputs outlive the call.
        call("DDP prepare_for_backward", |err, len| unsafe {
            shim::fulmen_cxx_reducer_prepare_backward(self.raw, raw.as_ptr(), raw.len(), err, len)
        })
        .map_err(classify)?;
        if !self.armed {
            self.armed = true;
            ARMED.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl Drop for Reducer {
    fn drop(&mut self) {
        self.disarm();
        // SAFETY: `raw` came from fulmen_cxx_reducer_new and is freed once.
        unsafe { shim::fulmen_cxx_reducer_free(self.raw) }
    }
}
