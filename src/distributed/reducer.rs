//! DDP's gradient averaging: libtorch's `c10d::Reducer`, which hooks every
//! parameter's gradient accumulator and all-reduces gradients in buckets
//! while backward() still runs.
use super::group::ProcessGroup;
use crate::accelerators::cxx::call;
use crate::error::{Error, ErrorCode, Result};
use libc::{c_char, c_int, c_void, size_t};
use std::sync::Arc;
use tch::Tensor;

extern "C" {
    fn fulmen_cxx_reducer_new(
        group: *mut c_void,
        params: *const *mut c_void,
        n: size_t,
        find_unused: c_int,
        bucket_cap_bytes: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    fn fulmen_cxx_reducer_free(reducer: *mut c_void);
    fn fulmen_cxx_reducer_prepare_forward(reducer: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int;
    fn fulmen_cxx_reducer_prepare_backward(
        reducer: *mut c_void,
        outputs: *const *mut c_void,
        n: size_t,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}

/// Averages the gradients of a set of parameters over a process group
/// during backward (one per DDP-wrapped model).
pub struct Reducer {
    raw: *mut c_void,
    /// Keeps the group alive as long as the reducer uses it.
    _group: Arc<ProcessGroup>,
    /// Whether the next backward is expected to reduce.
    armed: bool,
}

// SAFETY: the reducer is driven from one thread at a time (`&mut self`).
unsafe impl Send for Reducer {}

impl Reducer {
    /// Buckets `params` (the trainable parameters, in model order) as DDP
    /// does and hooks them; `find_unused` is DDP's find_unused_parameters.
    /// `bucket_cap_mb` of 0 keeps DDP's default of 25.
    pub fn new(group: Arc<ProcessGroup>, params: &[Tensor], find_unused: bool, bucket_cap_mb: f64) -> Result<Reducer> {
        if params.is_empty() {
            return Err(Error::invalid("DDP: the model has no trainable parameter to synchronize"));
        }
        if let Some(p) = params.iter().find(|p| !p.requires_grad()) {
            return Err(Error::invalid(format!("DDP: parameter of shape {:?} does not require grad", p.size())));
        }
        let raw_params: Vec<*mut c_void> = params.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        let cap = if bucket_cap_mb > 0.0 { (bucket_cap_mb * 1024.0 * 1024.0) as i64 } else { 0 };
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: the group and parameters are alive; the shim copies the
        // tensor references it keeps.
        call("creating the DDP reducer", |err, len| unsafe {
            fulmen_cxx_reducer_new(
                group.raw(),
                raw_params.as_ptr(),
                raw_params.len(),
                c_int::from(find_unused),
                cap,
                &mut raw,
                err,
                len,
            )
        })?;
        Ok(Reducer { raw, _group: group, armed: false })
    }

    /// Call before a forward pass whose backward will reduce.
    pub fn prepare_for_forward(&mut self) -> Result<()> {
        // SAFETY: `raw` is a live reducer.
        call("DDP prepare_for_forward", |err, len| unsafe { fulmen_cxx_reducer_prepare_forward(self.raw, err, len) })
    }

    /// Call after the forward pass, before backward(): the coming backward
    /// all-reduces the gradients. `outputs` are the forward's outputs (the
    /// loss), used to find unused parameters when that is on.
    pub fn prepare_for_backward(&mut self, outputs: &[Tensor]) -> Result<()> {
        let raw: Vec<*mut c_void> = outputs.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        // SAFETY: `raw` is a live reducer and the outputs outlive the call.
        call("DDP prepare_for_backward", |err, len| unsafe {
            fulmen_cxx_reducer_prepare_backward(self.raw, raw.as_ptr(), raw.len(), err, len)
        })
        .map_err(|e| Error::new(ErrorCode::Distributed, e.message))?;
        self.armed = true;
        Ok(())
    }

    /// Whether prepare_for_backward ran since the last backward.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Records that the backward after prepare_for_backward ran.
    pub fn backward_done(&mut self) {
        self.armed = false;
    }
}

impl Drop for Reducer {
    fn drop(&mut self) {
        // SAFETY: `raw` came from fulmen_cxx_reducer_new and is freed once.
        unsafe { fulmen_cxx_reducer_free(self.raw) }
    }
}
