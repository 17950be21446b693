//! `fulmen_datamodule`: the host's LightningDataModule as a vtable.
use crate::checkpoint::lightning::is_reserved_key;
use crate::checkpoint::MAX_DATAMODULE_STATE;
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{host_result, read_vtable, HostCallTimer, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::module_data::{call_eval, call_train, fulmen_train_dataloader_fn, fulmen_val_dataloader_fn};
use crate::ffi::tensor::TensorScope;
use crate::trainer::datamodule::{DataModule, Loaders};
use crate::trainer::BatchSource;
use std::ffi::{c_char, c_void, CStr};

/// The longest name a datamodule may have, in bytes.
pub const FULMEN_DATAMODULE_NAME_MAX: usize = 256;

/// The host's LightningDataModule: the data of fit / validate / test /
/// predict apart from the module. Set `struct_size` to
/// `sizeof(fulmen_datamodule_vtable)`; NULL slots are "not implemented".
/// Every callback runs on the thread that called the run, in Lightning's
/// order: `prepare_data`, `setup(stage)` (before the callbacks' and the
/// module's setup hooks), the dataloaders when the loops need them,
/// `teardown(stage)` at the end (before the callbacks' and the module's
/// teardown hooks), also when the run fails after `setup` returned.
/// Tensors a callback creates are released when it returns, except those
/// kept with `fulmen_tensor_keep`.
#[repr(C)]
pub struct fulmen_datamodule_vtable {
    /// `sizeof(fulmen_datamodule_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when the datamodule is freed; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Lightning's `prepare_data`: called at the start of every run on
    /// local rank 0 of each node only (global rank 0 only after
    /// `fulmen_datamodule_set_prepare_data_per_node(dm, false)`); under
    /// DDP the other ranks wait for it. May be NULL.
    pub prepare_data: Option<unsafe extern "C" fn(userdata: *mut c_void) -> *mut fulmen_error>,
    /// Lightning's `setup(stage)`; `stage` is "fit", "validate", "test" or
    /// "predict" (as `fulmen_hook_context_stage`), a static string. May be
    /// NULL.
    pub setup: Option<unsafe extern "C" fn(userdata: *mut c_void, stage: *const c_char) -> *mut fulmen_error>,
    /// Lightning's `teardown(stage)`. May be NULL.
    pub teardown: Option<unsafe extern "C" fn(userdata: *mut c_void, stage: *const c_char) -> *mut fulmen_error>,
    /// As `fulmen_module_vtable.train_dataloader`, and used before it.
    pub train_dataloader: Option<
        unsafe extern "C" fn(userdata: *mut c_void, epoch: i64, out: *mut *mut fulmen_loader) -> *mut fulmen_error,
    >,
    /// As `fulmen_module_vtable.val_dataloader`, and used before it.
    pub val_dataloader: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            epoch: i64,
            out: *mut *mut fulmen_loader,
            capacity: usize,
            n: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// As `fulmen_module_vtable.test_dataloader`, and used before it.
    pub test_dataloader: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            epoch: i64,
            out: *mut *mut fulmen_loader,
            capacity: usize,
            n: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// As `fulmen_module_vtable.predict_dataloader`, and used before it.
    pub predict_dataloader: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            epoch: i64,
            out: *mut *mut fulmen_loader,
            capacity: usize,
            n: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `state_dict`: writes to `*data` and `*len` the bytes of
    /// the datamodule's state (at most FULMEN_MAX_DATAMODULE_STATE), which
    /// must stay valid until the call returns (fulmen copies them then);
    /// `*len` 0 saves nothing. Called for every checkpoint a run writes,
    /// saved under the datamodule's name (Lightning's
    /// `checkpoint[datamodule.__class__.__qualname__]`: a `bytes` entry in
    /// a Lightning checkpoint, metadata in fulmen's). May be NULL.
    pub state_dict:
        Option<unsafe extern "C" fn(userdata: *mut c_void, data: *mut *const u8, len: *mut usize) -> *mut fulmen_error>,
    /// Lightning's `load_state_dict`: the bytes a checkpoint holds under
    /// the datamodule's name, `data` valid during the call only. Called
    /// when a fit resumes, or a validate / test / predict loads weights,
    /// from a checkpoint holding them. May be NULL.
    pub load_state_dict:
        Option<unsafe extern "C" fn(userdata: *mut c_void, data: *const u8, len: usize) -> *mut fulmen_error>,
}

/// The host's LightningDataModule. Free with `fulmen_datamodule_free`.
pub struct fulmen_datamodule {
    pub(crate) inner: HostDataModule,
}

impl Handle for fulmen_datamodule {
    const C_NAME: &'static str = "fulmen_datamodule";
}

/// A stage callback (`setup`, `teardown`).
type StageFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut fulmen_error;

/// The host datamodule as a core datamodule.
pub struct HostDataModule {
    name: String,
    userdata: Userdata,
    prepare_data: Option<unsafe extern "C" fn(*mut c_void) -> *mut fulmen_error>,
    setup: Option<StageFn>,
    teardown: Option<StageFn>,
    train_dataloader: Option<fulmen_train_dataloader_fn>,
    val_dataloader: Option<fulmen_val_dataloader_fn>,
    test_dataloader: Option<fulmen_val_dataloader_fn>,
    predict_dataloader: Option<fulmen_val_dataloader_fn>,
    state_dict: Option<unsafe extern "C" fn(*mut c_void, *mut *const u8, *mut usize) -> *mut fulmen_error>,
    load_state_dict: Option<unsafe extern "C" fn(*mut c_void, *const u8, usize) -> *mut fulmen_error>,
    prepare_data_per_node: bool,
}

/// Runs a host callback in a tensor scope under the trainer's
/// `callback_timeout`, naming it (`name`) in errors.
fn call_host(name: &str, f: impl FnOnce() -> *mut fulmen_error) -> Result<()> {
    let timer = HostCallTimer::start();
    let err = {
        let _scope = TensorScope::enter();
        f()
    };
    host_result(err, || name.to_string())?;
    timer.check(|| name.to_string())
}

/// The C string of a stage name.
fn stage_c(stage: &str) -> &'static CStr {
    match stage {
        "fit" => c"fit",
        "validate" => c"validate",
        "test" => c"test",
        _ => c"predict",
    }
}

impl HostDataModule {
    /// Calls `setup` or `teardown` (`which`) for `stage`, if given.
    fn call_stage(&self, which: &str, f: Option<StageFn>, stage: &str) -> Result<()> {
        let Some(f) = f else { return Ok(()) };
        let ud = self.userdata.ptr();
        // SAFETY: the host's function with its own userdata, on this thread.
        call_host(which, || unsafe { f(ud, stage_c(stage).as_ptr()) })
    }
}

impl DataModule for HostDataModule {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare_data(&mut self) -> Result<()> {
        let Some(f) = self.prepare_data else { return Ok(()) };
        let ud = self.userdata.ptr();
        // SAFETY: the host's function with its own userdata, on this thread.
        call_host("prepare_data", || unsafe { f(ud) })
    }

    fn prepare_data_per_node(&self) -> bool {
        self.prepare_data_per_node
    }

    fn setup(&mut self, stage: &'static str) -> Result<()> {
        self.call_stage("setup", self.setup, stage)
    }

    fn teardown(&mut self, stage: &'static str) -> Result<()> {
        self.call_stage("teardown", self.teardown, stage)
    }

    fn has_train_dataloader(&self) -> bool {
        self.train_dataloader.is_some()
    }

    fn train_dataloader(&mut self, epoch: i64) -> Result<Box<dyn BatchSource + Send>> {
        let f = self.train_dataloader.ok_or_else(|| Error::state("the datamodule has no train_dataloader"))?;
        call_train("train_dataloader", f, self.userdata.ptr(), epoch)
    }

    fn has_val_dataloader(&self) -> bool {
        self.val_dataloader.is_some()
    }

    fn val_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        let f = self.val_dataloader.ok_or_else(|| Error::state("the datamodule has no val_dataloader"))?;
        call_eval("val_dataloader", f, self.userdata.ptr(), epoch)
    }

    fn has_test_dataloader(&self) -> bool {
        self.test_dataloader.is_some()
    }

    fn test_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        let f = self.test_dataloader.ok_or_else(|| Error::state("the datamodule has no test_dataloader"))?;
        call_eval("test_dataloader", f, self.userdata.ptr(), epoch)
    }

    fn has_predict_dataloader(&self) -> bool {
        self.predict_dataloader.is_some()
    }

    fn predict_dataloader(&mut self, epoch: i64) -> Result<Loaders> {
        let f = self.predict_dataloader.ok_or_else(|| Error::state("the datamodule has no predict_dataloader"))?;
        call_eval("predict_dataloader", f, self.userdata.ptr(), epoch)
    }

    fn state_dict(&mut self) -> Result<Vec<u8>> {
        let Some(f) = self.state_dict else { return Ok(Vec::new()) };
        let ud = self.userdata.ptr();
        let (mut data, mut len): (*const u8, usize) = (std::ptr::null(), 0);
        // SAFETY: the host's function with its own userdata, on this thread.
        call_host("state_dict", || unsafe { f(ud, &mut data, &mut len) })?;
        if len == 0 {
            return Ok(Vec::new());
        }
        if len > MAX_DATAMODULE_STATE {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("state_dict wrote *len = {len}; a datamodule's state is at most {MAX_DATAMODULE_STATE} bytes"),
            ));
        }
        if data.is_null() {
            return Err(Error::new(ErrorCode::Callback, format!("state_dict wrote *len = {len} and *data NULL")));
        }
        // SAFETY: the host promises `len` readable bytes at `data` until
        // its call returned; they are copied before anything else runs.
        Ok(unsafe { std::slice::from_raw_parts(data, len) }.to_vec())
    }

    fn load_state_dict(&mut self, state: &[u8]) -> Result<()> {
        let Some(f) = self.load_state_dict else { return Ok(()) };
        let ud = self.userdata.ptr();
        // SAFETY: the host's function with its own userdata, on this
        // thread; `state` outlives the call.
        call_host("load_state_dict", || unsafe { f(ud, state.as_ptr(), state.len()) })
    }
}

/// A datamodule's name from its C argument: "LightningDataModule" for
/// NULL; else UTF-8 of 1 to FULMEN_DATAMODULE_NAME_MAX bytes that is not
/// one of a Lightning checkpoint's own keys.
unsafe fn name_arg(name: *const c_char) -> Result<String> {
    if name.is_null() {
        return Ok("LightningDataModule".to_string());
    }
    let s = str_arg(name, "name")?;
    if s.is_empty() || s.len() > FULMEN_DATAMODULE_NAME_MAX {
        return Err(Error::invalid(format!(
            "a datamodule's name has 1 to {FULMEN_DATAMODULE_NAME_MAX} bytes, not {}",
            s.len()
        )));
    }
    if is_reserved_key(s) {
        return Err(Error::invalid(format!(
            "{s:?} is an entry of every Lightning checkpoint; it cannot name a datamodule's state"
        )));
    }
    Ok(s.to_string())
}

/// Creates a LightningDataModule from the host's `vtable` (copied).
/// `name` keys its state in checkpoints, as Lightning's class name does
/// (NULL: "LightningDataModule"). On failure `userdata_free` is not
/// called.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`vtable` or `out` NULL),
/// FULMEN_CODE_INVALID_ARGUMENT (`struct_size` smaller than the first
/// vtable; `name` not UTF-8, empty, longer than
/// FULMEN_DATAMODULE_NAME_MAX bytes, or a key Lightning's checkpoints have
/// of their own such as "state_dict" or "epoch").
#[no_mangle]
pub unsafe extern "C" fn fulmen_datamodule_new(
    vtable: *const fulmen_datamodule_vtable,
    name: *const c_char,
    out: *mut *mut fulmen_datamodule,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let size = std::mem::size_of::<fulmen_datamodule_vtable>();
        let v = &read_vtable(vtable, size, "fulmen_datamodule_vtable")?;
        let name = name_arg(name)?;
        let inner = HostDataModule {
            name,
            userdata: Userdata::new(v.userdata, v.userdata_free),
            prepare_data: v.prepare_data,
            setup: v.setup,
            teardown: v.teardown,
            train_dataloader: v.train_dataloader,
            val_dataloader: v.val_dataloader,
            test_dataloader: v.test_dataloader,
            predict_dataloader: v.predict_dataloader,
            state_dict: v.state_dict,
            load_state_dict: v.load_state_dict,
            prepare_data_per_node: true,
        };
        out.write(handle::into_raw(fulmen_datamodule { inner }));
        Ok(())
    })
}

/// Sets Lightning's `prepare_data_per_node` (default true): true calls
/// `prepare_data` on local rank 0 of every node, false on global rank 0
/// only (data on storage every node shares). Not while a run uses the
/// datamodule.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_datamodule_set_prepare_data_per_node(
    datamodule: *mut fulmen_datamodule,
    per_node: bool,
) -> *mut fulmen_error {
    guard!(|| {
        handle::borrow_mut(datamodule, "datamodule")?.inner.prepare_data_per_node = per_node;
        Ok(())
    })
}

/// Frees a LightningDataModule and calls its `userdata_free`. NULL or an
/// already freed handle is a no-op. Freeing one a run is using returns at
/// once; it goes when that run returns, on its thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_datamodule_free(datamodule: *mut fulmen_datamodule) {
    handle::free(datamodule);
}
