//! Collectives a custom accelerator brings for its own devices (a vendor's
//! communication library behind the `fulmen_collectives` hook): the core's
//! view of such a library, the key-value store its ranks meet through, and
//! the bridge the c10d backend of `csrc/collectives.cpp` calls during DDP.
use super::group::ReduceOp;
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call, CxxCollectives};
use crate::tensor::device::Device;
use libc::{c_char, c_int, c_void, size_t};
use std::ffi::CString;
use std::sync::Arc;
use tch::Tensor;

/// Asked while waiting whether to give up (a rank that can no longer come).
pub type AbortProbe = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// A key-value store every rank of the job shares: the job's TCPStore,
/// under a prefix of its own. Waits on a missing key up to the job's
/// timeout, in short slices, asking its abort probe between them.
pub struct KeyStore {
    raw: *mut c_void,
    timeout: std::time::Duration,
    abort: Option<AbortProbe>,
}

// SAFETY: c10d's TCPStore serialises its client's operations internally;
// PyTorch uses one store from several threads.
unsafe impl Send for KeyStore {}
// SAFETY: as above; every method takes `&self` and the shim does the locking.
unsafe impl Sync for KeyStore {}

fn key_arg(key: &str) -> Result<CString> {
    CString::new(key).map_err(|_| Error::invalid("store key contains a NUL byte"))
}

impl KeyStore {
    /// A new reference to `store` (a `c10::intrusive_ptr<Store>*` of the
    /// shim) whose keys all start with `prefix`; `get` waits up to
    /// `timeout`, asking `abort` every few milliseconds.
    pub(crate) fn prefixed(
        store: *mut c_void,
        prefix: &str,
        timeout: std::time::Duration,
        abort: Option<AbortProbe>,
    ) -> Result<KeyStore> {
        let prefix = key_arg(prefix)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `store` is a live store of the shim; `raw` receives an owned one.
        call("opening the collectives' store", |err, len| unsafe {
            shim::fulmen_cxx_store_prefixed(store, prefix.as_ptr(), &mut raw, err, len)
        })?;
        Ok(KeyStore { raw, timeout, abort })
    }

    /// Waits until `key` is set: polls (a blocking get would hold the
    /// store's connection, and could not notice a rank that died).
    fn wait_for(&self, key: &str, k: &CString) -> Result<()> {
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_micros(50);
        loop {
            let mut present: c_int = 0;
            // SAFETY: plain values; `present` outlives the call.
            call("store check", |err, len| unsafe {
                shim::fulmen_cxx_store_check(self.raw, k.as_ptr(), &mut present, err, len)
            })
            .map_err(as_distributed)?;
            if present != 0 {
                return Ok(());
            }
            if let Some(why) = self.abort.as_ref().and_then(|a| a()) {
                return Err(Error::distributed(format!("{why}, while waiting for store key {key:?}")));
            }
            if start.elapsed() >= self.timeout {
                return Err(Error::distributed(format!(
                    "store key {key:?} was not set within the timeout of {:?}",
                    self.timeout
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(10));
        }
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let k = key_arg(key)?;
        // SAFETY: the buffers outlive the call.
        call("store set", |err, len| unsafe {
            shim::fulmen_cxx_store_set(self.raw, k.as_ptr(), value.as_ptr(), value.len(), err, len)
        })
        .map_err(as_distributed)
    }

    /// Waits for `key` and copies its value into `buf`; returns the value's
    /// length. A value longer than `buf` is an `OutOfRange` error carrying
    /// the length (in `Err.1`), so a caller can ask again.
    pub fn get(&self, key: &str, buf: &mut [u8]) -> std::result::Result<usize, (Error, usize)> {
        let k = key_arg(key).map_err(|e| (e, 0))?;
        self.wait_for(key, &k).map_err(|e| (e, 0))?;
        let mut n: size_t = 0;
        // SAFETY: `buf` is writable for its length; `n` outlives the call.
        let r = call("store get", |err, len| unsafe {
            shim::fulmen_cxx_store_get(self.raw, k.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut n, err, len)
        });
        match r {
            Ok(()) => Ok(n),
            Err(e) if e.code == ErrorCode::Unsupported => Err((Error::new(ErrorCode::OutOfRange, e.message), n)),
            Err(e) => Err((as_distributed(e), 0)),
        }
    }

    /// Adds `delta` to the counter `key` (0 when new); returns its value.
    pub fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let k = key_arg(key)?;
        let mut out = 0i64;
        // SAFETY: plain values; `out` outlives the call.
        call("store add", |err, len| unsafe {
            shim::fulmen_cxx_store_add(self.raw, k.as_ptr(), delta, &mut out, err, len)
        })
        .map_err(as_distributed)?;
        Ok(out)
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&self, key: &str) -> Result<bool> {
        let k = key_arg(key)?;
        let mut deleted: c_int = 0;
        // SAFETY: plain values; `deleted` outlives the call.
        call("store delete", |err, len| unsafe {
            shim::fulmen_cxx_store_delete(self.raw, k.as_ptr(), &mut deleted, err, len)
        })
        .map_err(as_distributed)?;
        Ok(deleted != 0)
    }
}

impl Drop for KeyStore {
    fn drop(&mut self) {
        // SAFETY: made by fulmen_cxx_store_prefixed, freed once.
        unsafe { shim::fulmen_cxx_store_free(self.raw) }
    }
}

fn as_distributed(e: Error) -> Error {
    Error::new(ErrorCode::Distributed, e.message)
}

/// A custom accelerator's collectives library.
pub trait DeviceCollectives: Send + Sync {
    /// The backend's name ("hccl"), as `process_group_backend` names it.
    fn name(&self) -> &str;

    /// Opens this rank's group of `world` ranks on `device`; `store` is
    /// shared with the other ranks (to exchange a unique id, say).
    fn new_group(&self, store: Arc<KeyStore>, rank: usize, world: usize, device: Device) -> Result<Box<dyn CommGroup>>;
}

/// One rank's group of a collectives library. Its calls come one at a
/// time, in the same order on every rank, from the thread that runs the
/// collective (the trainer's, or libtorch's autograd thread for the device
/// during backward).
pub trait CommGroup: Send {
    /// Reduces `tensors` in place over the ranks (`op` is never `Mean`).
    fn all_reduce(&self, tensors: &[Tensor], op: ReduceOp) -> Result<()>;
    /// Copies `tensors` from rank `root` to every rank, in place.
    fn broadcast(&self, tensors: &[Tensor], root: usize) -> Result<()>;
    /// Writes rank r's `input` into `outputs[r]` for every rank.
    fn all_gather(&self, input: &Tensor, outputs: &[Tensor]) -> Result<()>;
    /// Returns when every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// Reduces `input` (world size x `output`'s elements) over the ranks
    /// with `op` (never `Mean`) into this rank's block, `output`; `false`
    /// when the library has no such collective (the caller then reduces
    /// the whole input with `all_reduce`).
    fn reduce_scatter(&self, _input: &Tensor, _output: &Tensor, _op: ReduceOp) -> Result<bool> {
        Ok(false)
    }
}

/// Which collectives a job's group runs for its devices besides the CPU.
#[derive(Clone)]
pub struct DeviceBackend {
    /// The devices of this node, by local rank.
    pub devices: Vec<Device>,
    /// The accelerator's collectives; `None` stages the devices' tensors
    /// through the CPU for gloo.
    pub hook: Option<Arc<dyn DeviceCollectives>>,
    /// Set by the join: whether a rank can no longer come.
    pub abort: Option<AbortProbe>,
}

impl std::fmt::Debug for DeviceBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBackend")
            .field("devices", &self.devices)
            .field("hook", &self.hook.as_ref().map(|h| h.name().to_owned()))
            .finish()
    }
}

type Bridged = Box<dyn CommGroup>;

fn ops_from(code: c_int) -> Result<ReduceOp> {
    Ok(match code {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Product,
        2 => ReduceOp::Min,
        3 => ReduceOp::Max,
        _ => return Err(Error::invalid(format!("unknown reduce op code {code}"))),
    })
}

/// Borrows the shim's `at::Tensor*` list as tensors sharing their storage.
unsafe fn tensors_from(list: *const *mut c_void, n: size_t) -> Vec<Tensor> {
    if n == 0 || list.is_null() {
        return Vec::new();
    }
    std::slice::from_raw_parts(list, n).iter().map(|p| Tensor::clone_from_ptr(p.cast())).collect()
}

/// Runs one bridged call: a failure or a panic becomes the shim's status
/// and message.
unsafe fn bridged(
    ctx: *mut c_void,
    err: *mut c_char,
    err_len: size_t,
    f: impl FnOnce(&dyn CommGroup) -> Result<()>,
) -> c_int {
    let group = &*(ctx as *const Bridged);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(group.as_ref())))
        .unwrap_or_else(|_| Err(Error::new(ErrorCode::Panic, "the collectives hook panicked")));
    match r {
        Ok(()) => 0,
        Err(e) => {
            crate::shim::write_error(err, err_len, &e.message);
            1
        }
    }
}

unsafe extern "C" fn bridge_all_reduce(
    ctx: *mut c_void,
    list: *const *mut c_void,
    n: size_t,
    op: c_int,
    err: *mut c_char,
    err_len: size_t,
) -> c_int {
    bridged(ctx, err, err_len, |g| g.all_reduce(&tensors_from(list, n), ops_from(op)?))
}

unsafe extern "C" fn bridge_broadcast(
    ctx: *mut c_void,
    list: *const *mut c_void,
    n: size_t,
    root: c_int,
    err: *mut c_char,
    err_len: size_t,
) -> c_int {
    bridged(ctx, err, err_len, |g| {
        let root = usize::try_from(root).map_err(|_| Error::invalid(format!("broadcast from rank {root}")))?;
        g.broadcast(&tensors_from(list, n), root)
    })
}

unsafe extern "C" fn bridge_all_gather(
    ctx: *mut c_void,
    input: *const c_void,
    outputs: *const *mut c_void,
    n: size_t,
    err: *mut c_char,
    err_len: size_t,
) -> c_int {
    bridged(ctx, err, err_len, |g| {
        let input = Tensor::clone_from_ptr(input as *mut _);
        g.all_gather(&input, &tensors_from(outputs, n))
    })
}

unsafe extern "C" fn bridge_reduce_scatter(
    ctx: *mut c_void,
    input: *const c_void,
    output: *mut c_void,
    op: c_int,
    err: *mut c_char,
    err_len: size_t,
) -> c_int {
    let mut done = true;
    let status = bridged(ctx, err, err_len, |g| {
        let input = Tensor::clone_from_ptr(input as *mut _);
        let output = Tensor::clone_from_ptr(output.cast());
        done = g.reduce_scatter(&input, &output, ops_from(op)?)?;
        Ok(())
    });
    if status == 0 && !done {
        return crate::shim::UNSUPPORTED;
    }
    status
}

unsafe extern "C" fn bridge_barrier(ctx: *mut c_void, err: *mut c_char, err_len: size_t) -> c_int {
    bridged(ctx, err, err_len, |g| g.barrier())
}

unsafe extern "C" fn bridge_release(ctx: *mut c_void) {
    // A panic in a host's group_free must not unwind into C++.
    let _ = std::panic::catch_unwind(|| drop(Box::from_raw(ctx as *mut Bridged)));
}

/// Hands `group` to the shim's c10d backend, which owns it from then on
/// (it calls `release` once, when the process group ends or fails to
/// start).
pub(crate) fn into_cxx(group: Box<dyn CommGroup>) -> CxxCollectives {
    CxxCollectives {
        ctx: Box::into_raw(Box::new(group)).cast(),
        all_reduce: bridge_all_reduce,
        broadcast: bridge_broadcast,
        all_gather: bridge_all_gather,
        barrier: bridge_barrier,
        reduce_scatter: bridge_reduce_scatter,
        release: bridge_release,
    }
}
