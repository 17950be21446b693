//! Checkpoint IO plugins (`fulmen_checkpoint_io_vtable`): the host stores
//! the bytes of every checkpoint the trainer saves, loads and removes
//! (Lightning's `CheckpointIO`).
use crate::checkpoint::io::{CheckpointIo, MAX_CHECKPOINT_IO_BYTES};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host, read_vtable, HostLock, Userdata};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle;
use crate::ffi::trainer::runs::fulmen_trainer;
use std::ffi::{c_char, c_void, CString};
use std::path::Path;
use std::sync::Arc;

/// A checkpoint store implemented by the host (Lightning's CheckpointIO
/// plugin): every checkpoint the trainer writes (ModelCheckpoint, last,
/// on-exception, hpc, `fulmen_trainer_save_checkpoint`; both formats) is
/// handed to `save` as bytes, a `ckpt_path` is read with `load`, and
/// ModelCheckpoint's older top-k files are dropped with `remove`. Paths
/// are the ones fulmen would use on disk; the store may map them anywhere.
/// Set `struct_size` to `sizeof(fulmen_checkpoint_io_vtable)`; every slot
/// is required. Calls come from the thread running the trainer, except
/// `save` with the trainer option `async_checkpoint_io`, which runs on a
/// background thread of fulmen's (one call at a time either way). An
/// error returned stops the run with that error (a background save's at
/// the next save or the end of the run).
#[repr(C)]
pub struct fulmen_checkpoint_io_vtable {
    /// `sizeof(fulmen_checkpoint_io_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when the trainer is freed or its plugin replaced; may
    /// be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Store the `len` bytes at `bytes` (valid during the call) as the
    /// checkpoint `path`, replacing any there.
    pub save: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            bytes: *const u8,
            len: usize,
            path: *const c_char,
        ) -> *mut fulmen_error,
    >,
    /// Read the checkpoint `path`, in two calls: first with `buffer` NULL
    /// and `capacity` 0, set `*out_len` to its size in bytes (at most
    /// FULMEN_MAX_CHECKPOINT_IO_BYTES, else the load fails with
    /// FULMEN_CODE_OUT_OF_RANGE before anything is allocated); then (when
    /// the size is not 0) with a `buffer` of `capacity` = that size, fill
    /// it and set `*out_len` to the bytes written, which must be the size.
    pub load: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            path: *const c_char,
            buffer: *mut u8,
            capacity: usize,
            out_len: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// Remove the checkpoint `path`; one that is not there is no error.
    pub remove: Option<unsafe extern "C" fn(userdata: *mut c_void, path: *const c_char) -> *mut fulmen_error>,
}

type SaveFn = unsafe extern "C" fn(*mut c_void, *const u8, usize, *const c_char) -> *mut fulmen_error;
type LoadFn = unsafe extern "C" fn(*mut c_void, *const c_char, *mut u8, usize, *mut usize) -> *mut fulmen_error;
type RemoveFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut fulmen_error;

/// The host's callbacks and userdata.
struct Slots {
    userdata: Userdata,
    save: SaveFn,
    load: LoadFn,
    remove: RemoveFn,
}

/// A host store; its callbacks run one at a time.
struct HostCheckpointIo {
    slots: HostLock<Slots>,
}

/// `path` as the C string the host gets.
fn c_path(path: &Path) -> CString {
    CString::new(path.to_string_lossy().replace('\0', " ")).unwrap_or_default()
}

impl CheckpointIo for HostCheckpointIo {
    fn save(&self, bytes: &[u8], path: &Path) -> Result<()> {
        let s = self.slots.lock("the checkpoint IO plugin")?;
        let p = c_path(path);
        // SAFETY: the host's callback with its userdata; the bytes and the
        // path outlive the call.
        call_host("checkpoint_io save", || unsafe {
            (s.save)(s.userdata.ptr(), bytes.as_ptr(), bytes.len(), p.as_ptr())
        })
    }

    fn load(&self, path: &Path) -> Result<Vec<u8>> {
        let s = self.slots.lock("the checkpoint IO plugin")?;
        let p = c_path(path);
        let mut size = usize::MAX;
        // SAFETY: the host's callback; `size` outlives the call.
        call_host("checkpoint_io load", || unsafe {
            (s.load)(s.userdata.ptr(), p.as_ptr(), std::ptr::null_mut(), 0, &mut size)
        })?;
        check_size(size, path)?;
        let mut buffer = Vec::new();
        buffer.try_reserve_exact(size).map_err(|_| {
            Error::new(
                ErrorCode::OutOfMemory,
                format!("checkpoint_io load of {}: {size} bytes cannot be allocated", path.display()),
            )
        })?;
        if size == 0 {
            return Ok(buffer);
        }
        buffer.resize(size, 0);
        let mut written = usize::MAX;
        // SAFETY: `buffer` holds `size` writable bytes for the call.
        call_host("checkpoint_io load", || unsafe {
            (s.load)(s.userdata.ptr(), p.as_ptr(), buffer.as_mut_ptr(), size, &mut written)
        })?;
        if written != size {
            return Err(Error::io(format!(
                "checkpoint_io load of {}: the plugin wrote {written} bytes after reporting a size of {size}",
                path.display()
            )));
        }
        Ok(buffer)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let s = self.slots.lock("the checkpoint IO plugin")?;
        let p = c_path(path);
        // SAFETY: the host's callback with its userdata and the path.
        call_host("checkpoint_io remove", || unsafe { (s.remove)(s.userdata.ptr(), p.as_ptr()) })
    }
}

/// Refuses a size reported by the host above the limit, before any
/// allocation.
fn check_size(size: usize, path: &Path) -> Result<()> {
    if size as u64 > MAX_CHECKPOINT_IO_BYTES {
        return Err(Error::new(
            ErrorCode::OutOfRange,
            format!(
                "checkpoint_io load of {}: the plugin reported {size} bytes, more than \
                 FULMEN_MAX_CHECKPOINT_IO_BYTES ({MAX_CHECKPOINT_IO_BYTES})",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Sends every checkpoint the trainer saves, loads (`ckpt_path`) or
/// removes through the host's store, replacing any plugin set before;
/// `vtable` NULL goes back to local files. `vtable` is copied; on failure
/// `userdata_free` is not called. With the trainer option
/// `async_checkpoint_io`, `save` runs on a background thread.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`struct_size` too small, a NULL
/// slot).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_set_checkpoint_io(
    trainer: *mut fulmen_trainer,
    vtable: *const fulmen_checkpoint_io_vtable,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        if vtable.is_null() {
            t.inner.set_checkpoint_io(None);
            return Ok(());
        }
        let v = read_vtable(vtable, std::mem::size_of::<fulmen_checkpoint_io_vtable>(), "fulmen_checkpoint_io_vtable")?;
        let missing = |slot: &str| {
            Error::invalid(format!("fulmen_checkpoint_io_vtable.{slot} is NULL: save, load and remove are required"))
        };
        let save = v.save.ok_or_else(|| missing("save"))?;
        let load = v.load.ok_or_else(|| missing("load"))?;
        let remove = v.remove.ok_or_else(|| missing("remove"))?;
        let slots = Slots { userdata: Userdata::new(v.userdata, v.userdata_free), save, load, remove };
        t.inner.set_checkpoint_io(Some(Arc::new(HostCheckpointIo { slots: HostLock::new(slots) })));
        Ok(())
    })
}
