//! Batches ahead on the device: right after a training step is queued, the
//! epoch loop copies the next batch to the device (and casts it for the
//! precision), so the copy overlaps the step instead of preceding the next
//! one. On CUDA the copy runs on a side stream of the device's pool; the
//! step that takes the batch waits for it there and marks its tensors as
//! used on its own stream (`csrc/streams.cpp`). Elsewhere the copy is
//! queued on the current stream, ahead of the next step's work.
//!
//! Only where the ordering cannot be seen: off the CPU (a copy there costs
//! nothing to do early), off XLA (whose step marker ends a step at each
//! batch's transfer), and for modules that leave the batch-transfer hooks
//! to the trainer (a host's hook for batch i + 1 would otherwise run before
//! `on_train_batch_end` of batch i).
use super::device::Placement;
use crate::error::Result;
use crate::shim;
use crate::tensor::device::{Device, DeviceType};
use libc::c_void;
use tch::Tensor;

/// A copy's completion on a side stream (an event), to wait for once.
struct CopyDone(*mut c_void);

impl Drop for CopyDone {
    fn drop(&mut self) {
        // SAFETY: the pointer came from fulmen_cxx_side_stream_leave and is
        // freed once (wait takes it first).
        unsafe { shim::fulmen_cxx_side_stream_drop(self.0) }
    }
}

/// A batch already on its way to the device.
pub(super) struct Prefetched {
    tensors: Vec<Tensor>,
    done: Option<CopyDone>,
}

impl Prefetched {
    /// The batch, ready for the current stream (which waits for its copy).
    pub fn take(mut self) -> Result<Vec<Tensor>> {
        if let Some(done) = self.done.take() {
            let ptrs: Vec<*const c_void> = self.tensors.iter().map(|t| t.as_ptr() as *const c_void).collect();
            let handle = done.0;
            std::mem::forget(done);
            // SAFETY: `handle` came from leave and is freed by this call; the
            // tensors are alive through it.
            shim::call("waiting for the next batch's copy", |err, len| unsafe {
                shim::fulmen_cxx_side_stream_wait(handle, ptrs.as_ptr(), ptrs.len(), err, len)
            })?;
        }
        Ok(std::mem::take(&mut self.tensors))
    }
}

/// A side stream made current by [`SideStream::enter`]; the previous stream
/// comes back when it is left or dropped.
struct SideStream(*mut c_void);

impl SideStream {
    /// A side stream of `device` (CUDA only), `None` elsewhere.
    fn enter(device: Device) -> Result<Option<SideStream>> {
        if device.kind() != DeviceType::Cuda {
            return Ok(None);
        }
        let mut out: *mut c_void = std::ptr::null_mut();
        let index = i64::try_from(device.index()).unwrap_or(i64::MAX);
        // SAFETY: `out` receives a handle or NULL.
        shim::call("switching to a side stream", |err, len| unsafe {
            shim::fulmen_cxx_side_stream_enter(device.kind().c10(), index, &mut out, err, len)
        })?;
        Ok((!out.is_null()).then_some(SideStream(out)))
    }

    /// Puts the previous stream back; the copies queued meanwhile are done
    /// when the returned event is.
    fn leave(mut self) -> Result<CopyDone> {
        let handle = std::mem::replace(&mut self.0, std::ptr::null_mut());
        let mut done: *mut c_void = std::ptr::null_mut();
        // SAFETY: `handle` came from enter and is freed by this call.
        shim::call("leaving a side stream", |err, len| unsafe {
            shim::fulmen_cxx_side_stream_leave(handle, &mut done, err, len)
        })?;
        Ok(CopyDone(done))
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        if !self.0.is_null() {
            let mut done: *mut c_void = std::ptr::null_mut();
            // SAFETY: as in leave; the event is dropped at once.
            let _ = shim::call("leaving a side stream", |err, len| unsafe {
                shim::fulmen_cxx_side_stream_leave(self.0, &mut done, err, len)
            });
            drop(CopyDone(done));
        }
    }
}

/// Whether batches go ahead to `device`: off the CPU and XLA.
pub(super) fn device_prefetches(device: Device) -> bool {
    device != Device::Cpu && device.kind() != DeviceType::Xla
}

/// Starts copying `batch` to the placement's device (and casting it), on a
/// side stream where the device has one and the batch is in host memory.
pub(super) fn copy_ahead(placement: &Placement, batch: Vec<Tensor>) -> Result<Prefetched> {
    // The side stream does not wait for the current one, so it only takes
    // copies from host memory (a batch already on the device is cast where
    // it was made).
    let from_host = batch.iter().all(|t| Device::of(t).is_ok_and(|d| d == Device::Cpu));
    let side = if from_host { SideStream::enter(placement.device)? } else { None };
    let tensors = placement.prepare_batch(batch)?;
    let done = side.map(SideStream::leave).transpose()?;
    Ok(Prefetched { tensors, done })
}
