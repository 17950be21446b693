//! Device graphs: the device work a closure queues, captured once and then
//! replayed without the host code that made it (CUDA graphs; the fake
//! device's recording for tests). A capture does not do the work: the
//! first replay does. Tensors the capture made stay where they are, so
//! what a replay reads must be copied into the tensors the capture read,
//! and what it writes is found in the tensors the capture returned.
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use crate::tensor::device::{Device, DeviceType};
use libc::c_void;

/// Which capture a graph is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Cuda,
    Fake,
}

/// A captured graph; freed on drop.
#[derive(Debug)]
pub struct DeviceGraph {
    backend: Backend,
    ptr: *mut c_void,
}

// SAFETY: the graph is plain heap state of the shim, used by one owner at
// a time (`&mut` or `&` borrows of this struct); CUDA graphs may be
// replayed from any thread.
unsafe impl Send for DeviceGraph {}

/// Ends a capture that did not finish (an error or a panic in its work).
struct Capturing {
    backend: Backend,
    ptr: *mut c_void,
    ended: bool,
}

impl Drop for Capturing {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // SAFETY: `ptr` is this capture's graph (CUDA) or unused (fake).
        unsafe {
            match self.backend {
                Backend::Cuda => shim::fulmen_cxx_cuda_graph_abort(self.ptr),
                Backend::Fake => shim::fulmen_cxx_fake_graph_abort(),
            }
        }
    }
}

/// Whether `device` can capture graphs, and how.
fn backend_of(device: Device) -> Result<Backend> {
    match device {
        Device::Cuda(_) => Ok(Backend::Cuda),
        Device::Other(DeviceType::PrivateUse1, _) => Ok(Backend::Fake),
        other => Err(Error::new(
            ErrorCode::Unsupported,
            format!("device graphs capture CUDA devices (and the fake device of the tests), not {}", other.name()),
        )),
    }
}

impl DeviceGraph {
    /// Checks that `device` can capture graphs, without capturing.
    pub fn supported_on(device: Device) -> Result<()> {
        backend_of(device).map(|_| ())
    }

    /// Captures the device work `work` queues on `device` (and on any other
    /// thread meanwhile, as CUDA's global capture mode does). A host wait
    /// inside `work` (reading a value, a blocking copy to the host) fails
    /// it, as does an error of `work`; the capture then ends with nothing
    /// kept.
    pub fn capture<T>(device: Device, work: impl FnOnce() -> Result<T>) -> Result<(DeviceGraph, T)> {
        let backend = backend_of(device)?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        if let (Backend::Cuda, Device::Cuda(index)) = (backend, device) {
            // SAFETY: `ptr` is a valid out pointer.
            call("cuda graph", |e, l| unsafe { shim::fulmen_cxx_cuda_graph_new(index as i64, &mut ptr, e, l) })?;
        }
        // Owned from here on: dropped (freed) on any early return.
        let mut graph = DeviceGraph { backend, ptr };
        // SAFETY: `graph.ptr` is the new CUDA graph, unused for the fake.
        call("graph capture", |e, l| unsafe {
            match backend {
                Backend::Cuda => shim::fulmen_cxx_cuda_graph_begin(graph.ptr, e, l),
                Backend::Fake => shim::fulmen_cxx_fake_graph_begin(e, l),
            }
        })?;
        let mut capturing = Capturing { backend, ptr: graph.ptr, ended: false };
        let out = work()?;
        capturing.ended = true;
        // SAFETY: the capture `begin` started is running.
        call("graph capture", |e, l| unsafe {
            match backend {
                Backend::Cuda => shim::fulmen_cxx_cuda_graph_end(graph.ptr, e, l),
                Backend::Fake => shim::fulmen_cxx_fake_graph_end(&mut graph.ptr, e, l),
            }
        })?;
        Ok((graph, out))
    }

    /// Does the captured work again (queued on the current stream; the host
    /// does not wait).
    pub fn replay(&self) -> Result<()> {
        // SAFETY: `ptr` is this backend's captured graph.
        call("graph replay", |e, l| unsafe {
            match self.backend {
                Backend::Cuda => shim::fulmen_cxx_cuda_graph_replay(self.ptr, e, l),
                Backend::Fake => shim::fulmen_cxx_fake_graph_replay(self.ptr, e, l),
            }
        })
    }
}

impl Drop for DeviceGraph {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        // SAFETY: `ptr` is this backend's graph, freed once here.
        unsafe {
            match self.backend {
                Backend::Cuda => shim::fulmen_cxx_cuda_graph_free(self.ptr),
                Backend::Fake => shim::fulmen_cxx_fake_graph_free(self.ptr),
            }
        }
    }
}
