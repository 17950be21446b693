//! `fulmen_accelerator`: the accelerator registry, Lightning's accelerator
//! methods, and custom accelerators implemented in C (`fulmen_accelerator_vtable`).
use crate::accelerators::accelerator::{default_rng_state, default_set_rng_state, default_synchronize};
use crate::accelerators::devices::{parse_indexed_devices, MAX_DEVICES};
use crate::accelerators::{registry, Accelerator, DevicesSpec, ParsedDevices};
use crate::distributed::DeviceCollectives;
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host, HostLock, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle, Shared};
use crate::ffi::distributed::collectives::{fulmen_collectives, HostCollectives};
use crate::ffi::nn::model::copy_str;
use crate::tensor::device::Device;
use crate::tensor::DeviceSpec;
use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

/// An accelerator from the registry. Free with `fulmen_accelerator_free`.
pub struct fulmen_accelerator {
    pub(crate) inner: Arc<dyn Accelerator>,
}

impl Handle for fulmen_accelerator {
    const C_NAME: &'static str = "fulmen_accelerator";
}

/// A device: a `fulmen_device_type` and an index.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct fulmen_device {
    /// A `fulmen_device_type`.
    pub device_type: i32,
    /// The device index (0 for the CPU).
    pub index: i64,
}

/// One device statistic: a NUL-terminated name and a value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_device_stat {
    /// The statistic's name (truncated to 63 bytes).
    pub name: [c_char; 64],
    /// Its value.
    pub value: f64,
}

fn to_c(d: Device) -> fulmen_device {
    let s = DeviceSpec::from_device(d);
    fulmen_device { device_type: s.kind as i32, index: s.index }
}

/// A device a host names (any libtorch device type; whether it exists is
/// the accelerator's to say).
fn from_c(d: fulmen_device) -> Result<Device> {
    DeviceSpec::from_c(d.device_type, d.index)?.device()
}

unsafe fn acc_arg<'a>(p: *const fulmen_accelerator) -> Result<Shared<'a, Arc<dyn Accelerator>>> {
    Ok(handle::borrow(p, "accelerator")?.map(|h| &h.inner))
}

/// Looks up an accelerator by name: a registered name ("cpu", "cuda",
/// "mps", "xla", or a custom one) or an alias ("gpu": mps if available,
/// else cuda; "tpu": xla; "auto": xla > mps > cuda > cpu by availability).
/// An unknown name is an error listing the registered ones.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown, empty or malformed name,
/// or one not UTF-8), FULMEN_CODE_UNAVAILABLE ("gpu" when neither mps nor cuda
/// is available), FULMEN_CODE_INVALID_STATE ("auto" with nothing available and
/// "cpu" unregistered).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_get(
    name: *const c_char,
    out: *mut *mut fulmen_accelerator,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let inner = registry::get(str_arg(name, "name")?)?;
        out.write(handle::into_raw(fulmen_accelerator { inner }));
        Ok(())
    })
}

/// Copies the accelerator's registry name into `buf` as for
/// `fulmen_model_state_dict_name`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`buf` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_name(
    acc: *const fulmen_accelerator,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| copy_str(acc_arg(acc)?.name(), buf, capacity, len_out))
}

/// Writes whether the accelerator can be used on this machine.
///
/// Errors: for a custom accelerator, the code a host callback returned (its
/// `is_available`); the built-in ones add none.
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_is_available(
    acc: *const fulmen_accelerator,
    out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", acc_arg(acc)?.try_is_available()?))
}

/// Writes how many devices `devices="auto"` uses (1 for the CPU).
///
/// Errors: for a custom accelerator, the code a host callback returned (its
/// `auto_device_count`); the built-in ones add none.
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_auto_device_count(
    acc: *const fulmen_accelerator,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", acc_arg(acc)?.try_auto_device_count()?))
}

/// Parses `devices` as Lightning's device parser does for this accelerator
/// ("auto", "N", "-1", "1,3", "[0]"; for the CPU a process count) and
/// writes the chosen device ids (a count N gives 0..N-1) to
/// `ids[0..capacity]` and their number to `*n_out` (written even when
/// `capacity` is too small, which fails with FULMEN_CODE_OUT_OF_RANGE).
/// Rejected values give an error naming what is available.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`devices` malformed or not UTF-8, or
/// refused by the accelerator: 0, [], repeated ids, ids or -1 for the CPU),
/// FULMEN_CODE_UNAVAILABLE (the devices asked for do not exist here, or XLA
/// cannot be used), FULMEN_CODE_OUT_OF_RANGE (`capacity` too small); for a
/// custom accelerator also the code a host callback returned, or
/// FULMEN_CODE_CALLBACK (it reported ids or a device count it cannot have).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_parse_devices(
    acc: *const fulmen_accelerator,
    devices: *const c_char,
    ids: *mut i64,
    capacity: usize,
    n_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(n_out, "n_out")?;
        let a = acc_arg(acc)?;
        let parsed = a.parse_devices(&DevicesSpec::parse(str_arg(devices, "devices")?)?)?;
        let list: Vec<i64> = match parsed {
            ParsedDevices::Count(n) => (0..n as i64).collect(),
            ParsedDevices::Indices(v) => v.into_iter().map(|i| i as i64).collect(),
        };
        n_out.write(list.len());
        if list.len() > capacity {
            return Err(Error::new(ErrorCode::OutOfRange, format!("{} devices, `ids` holds {capacity}", list.len())));
        }
        if !list.is_empty() {
            check_out(ids, "ids")?;
            std::ptr::copy_nonoverlapping(list.as_ptr(), ids, list.len());
        }
        Ok(())
    })
}

/// Writes the libtorch devices `devices` selects (Lightning's
/// `get_parallel_devices`) to `out[0..capacity]` and their number to
/// `*n_out` (written even when `capacity` is too small).
///
/// Errors: those of `fulmen_accelerator_parse_devices`
/// (FULMEN_CODE_INVALID_ARGUMENT, FULMEN_CODE_UNAVAILABLE,
/// FULMEN_CODE_OUT_OF_RANGE for `capacity`); for a custom accelerator also
/// the code a host callback returned, or FULMEN_CODE_CALLBACK (it wrote an
/// invalid device).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_get_parallel_devices(
    acc: *const fulmen_accelerator,
    devices: *const c_char,
    out: *mut fulmen_device,
    capacity: usize,
    n_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(n_out, "n_out")?;
        let a = acc_arg(acc)?;
        let parsed = a.parse_devices(&DevicesSpec::parse(str_arg(devices, "devices")?)?)?;
        let list: Vec<fulmen_device> = a.get_parallel_devices(&parsed)?.into_iter().map(to_c).collect();
        n_out.write(list.len());
        if list.len() > capacity {
            return Err(Error::new(ErrorCode::OutOfRange, format!("{} devices, `out` holds {capacity}", list.len())));
        }
        if !list.is_empty() {
            check_out(out, "out")?;
            std::ptr::copy_nonoverlapping(list.as_ptr(), out, list.len());
        }
        Ok(())
    })
}

/// Prepares `device` for use (Lightning's `setup_device`; selects the CUDA
/// device on CUDA).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`device` is not a valid fulmen_device,
/// or not of this accelerator's kind), FULMEN_CODE_UNAVAILABLE (no such CUDA device; MPS
/// or XLA not available), FULMEN_CODE_TORCH (CUDA refused the device), the code
/// a host callback returned (custom accelerators).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_setup_device(
    acc: *const fulmen_accelerator,
    device: fulmen_device,
) -> *mut fulmen_error {
    guard!(|| acc_arg(acc)?.setup_device(from_c(device)?))
}

/// Releases what the accelerator holds (Lightning's `teardown`; empties the
/// CUDA cache on CUDA).
///
/// Errors: FULMEN_CODE_TORCH (the CUDA cache could not be emptied), the code a
/// host callback returned (custom accelerators).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_teardown(acc: *const fulmen_accelerator) -> *mut fulmen_error {
    guard!(|| acc_arg(acc)?.teardown())
}

/// Writes `device`'s statistics (Lightning's `get_device_stats`: on the
/// CPU `cpu_rss_bytes`, `cpu_percent`, `cpu_vm_percent`, `cpu_swap_percent`;
/// on CUDA the caching allocator's counters) to `out[0..capacity]` and
/// their number to `*n_out` (written even when `capacity` is too small).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`device` is not a valid fulmen_device,
/// or not a CUDA device for cuda),
/// FULMEN_CODE_UNAVAILABLE (no such CUDA device; MPS or XLA not available),
/// FULMEN_CODE_IO and FULMEN_CODE_FORMAT (cpu: /proc unreadable or unexpected;
/// cuda: malformed statistics), FULMEN_CODE_TORCH (CUDA's statistics failed),
/// FULMEN_CODE_OUT_OF_RANGE (`capacity` too small), the code a host callback
/// returned (custom accelerators).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_device_stats(
    acc: *const fulmen_accelerator,
    device: fulmen_device,
    out: *mut fulmen_device_stat,
    capacity: usize,
    n_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(n_out, "n_out")?;
        let stats = acc_arg(acc)?.get_device_stats(from_c(device)?)?;
        n_out.write(stats.len());
        if stats.len() > capacity {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("{} statistics, `out` holds {capacity}", stats.len()),
            ));
        }
        if !stats.is_empty() {
            check_out(out, "out")?;
        }
        for (i, (name, value)) in stats.iter().enumerate() {
            let mut s = fulmen_device_stat { name: [0; 64], value: *value };
            for (j, b) in name.bytes().take(63).enumerate() {
                s.name[j] = b as c_char;
            }
            out.add(i).write(s);
        }
        Ok(())
    })
}

/// Frees an accelerator handle (the registry keeps the accelerator).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_free(acc: *mut fulmen_accelerator) {
    handle::free(acc);
}

/// Writes the number of registered accelerators.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_registry_len(out: *mut usize) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", registry::list().len()))
}

/// Copies the name and description of registry entry `index` into the two
/// buffers (as for `fulmen_model_state_dict_name`) and writes whether it is
/// available on this machine.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`index` past the registry, or a buffer too
/// small).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fulmen_accelerator_registry_entry(
    index: usize,
    name: *mut c_char,
    name_capacity: usize,
    name_len: *mut usize,
    description: *mut c_char,
    description_capacity: usize,
    description_len: *mut usize,
    available: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(available, "available")?;
        let list = registry::list();
        let e = list
            .get(index)
            .ok_or_else(|| Error::new(ErrorCode::OutOfRange, format!("registry entry {index} of {}", list.len())))?;
        copy_str(&e.name, name, name_capacity, name_len)?;
        copy_str(&e.description, description, description_capacity, description_len)?;
        available.write(e.available);
        Ok(())
    })
}

/// Collects the statistics a custom accelerator reports. Borrowed: valid
/// only during `get_device_stats`.
pub struct fulmen_stats_builder {
    stats: Vec<(String, f64)>,
}

impl Handle for fulmen_stats_builder {
    const C_NAME: &'static str = "fulmen_stats_builder";
}

/// Adds a statistic `name` = `value` (inside `get_device_stats`).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`name` is not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_stats_builder_add(
    builder: *mut fulmen_stats_builder,
    name: *const c_char,
    value: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut b = handle::borrow_mut(builder, "builder")?;
        b.stats.push((str_arg(name, "name")?.to_string(), value));
        Ok(())
    })
}

/// A custom accelerator implemented by the host, registered with
/// `fulmen_accelerator_register`. Set `struct_size` to
/// `sizeof(fulmen_accelerator_vtable)`; a NULL slot uses the default named
/// with it. Callbacks may run on any thread that uses the accelerator
/// (the trainer's thread during fit); fulmen serialises them.
#[repr(C)]
pub struct fulmen_accelerator_vtable {
    /// `sizeof(fulmen_accelerator_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when the accelerator leaves the registry (replaced or
    /// unregistered) and no trainer, nor a distributed job's collectives
    /// group made by its `collectives`, uses it any more; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Writes whether the accelerator can run here. NULL: available.
    pub is_available: Option<unsafe extern "C" fn(userdata: *mut c_void, out: *mut bool) -> *mut fulmen_error>,
    /// Writes how many devices it has. NULL: 1.
    pub auto_device_count: Option<unsafe extern "C" fn(userdata: *mut c_void, out: *mut usize) -> *mut fulmen_error>,
    /// Parses `devices` into ids (`ids[0..capacity]`, count in `*n_out`).
    /// `devices` comes in a normalised text form: "auto", "-1", a count
    /// "N", or ids "0,2" ("1," for a single id). NULL: Lightning's
    /// GPU-style parser over `auto_device_count` devices.
    pub parse_devices: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            devices: *const c_char,
            ids: *mut i64,
            capacity: usize,
            n_out: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// Maps device ids to libtorch devices (`out[0..n]`): any
    /// fulmen_device_type, a vendor's own included (XPU, HPU, MTIA, IPU, or
    /// a PrivateUse1 backend such as "npu"; its backend must be registered
    /// in this process by the time the run starts). NULL: the CPU for every
    /// id (an accelerator computing with CPU tensors).
    pub get_parallel_devices: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ids: *const i64,
            n: usize,
            out: *mut fulmen_device,
        ) -> *mut fulmen_error,
    >,
    /// Prepares a device before training. NULL: nothing.
    pub setup_device: Option<unsafe extern "C" fn(userdata: *mut c_void, device: fulmen_device) -> *mut fulmen_error>,
    /// Releases resources after a run. NULL: nothing.
    pub teardown: Option<unsafe extern "C" fn(userdata: *mut c_void) -> *mut fulmen_error>,
    /// Reports statistics with `fulmen_stats_builder_add`. NULL: none.
    pub get_device_stats: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            device: fulmen_device,
            stats: *mut fulmen_stats_builder,
        ) -> *mut fulmen_error,
    >,
    /// Writes whether the devices compute in `dtype` (a fulmen_dtype). The
    /// trainer asks before a run and refuses a precision that needs a dtype
    /// they do not (FULMEN_CODE_UNSUPPORTED): `bf16-mixed` and `bf16-true`
    /// need FULMEN_DTYPE_BF16, `16-mixed` and `16-true` FULMEN_DTYPE_F16,
    /// `64-true` FULMEN_DTYPE_F64, every precision FULMEN_DTYPE_F32 but
    /// `64-true`. NULL: every dtype. Appended, as the next slot: a vtable
    /// whose `struct_size` ends before a slot does not have it.
    pub supports_dtype:
        Option<unsafe extern "C" fn(userdata: *mut c_void, dtype: i32, out: *mut bool) -> *mut fulmen_error>,
    /// Writes whether float16 training needs loss scaling on the devices (a
    /// GradScaler for `16-mixed`, as on CUDA). With false, `16-mixed` runs
    /// without one unless the trainer's grad-scaler options configure it.
    /// NULL: true.
    pub fp16_needs_loss_scaling:
        Option<unsafe extern "C" fn(userdata: *mut c_void, out: *mut bool) -> *mut fulmen_error>,
    /// The accelerator's own collectives for DDP on its devices (a
    /// vendor's communication library), copied at registration; see
    /// `fulmen_collectives`. NULL: gloo (through the CPU for PrivateUse1
    /// devices).
    pub collectives: *const fulmen_collectives,
    /// Blocks until the work queued on `device` is done. The trainer asks
    /// before timing code reads a clock (ThroughputMonitor). NULL: the
    /// device type's backend (its device guard's synchronizeDevice).
    pub synchronize: Option<unsafe extern "C" fn(userdata: *mut c_void, device: fulmen_device) -> *mut fulmen_error>,
    /// Writes the state of `device`'s random generator (what dropout on
    /// the device draws from) to `buf[0..capacity]` and its length to
    /// `*len_out`; `capacity` is FULMEN_MAX_RNG_STATE. Checkpoints keep it,
    /// so a resumed run draws the same numbers. NULL: libtorch's default
    /// generator for the device type (the one its backend registered).
    pub get_rng_state: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            device: fulmen_device,
            buf: *mut u8,
            capacity: usize,
            len_out: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// Restores a state `get_rng_state` wrote (`len` bytes, at most
    /// FULMEN_MAX_RNG_STATE, from a checkpoint: check it). NULL: libtorch's
    /// default generator. Set both or neither.
    pub set_rng_state: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            device: fulmen_device,
            data: *const u8,
            len: usize,
        ) -> *mut fulmen_error,
    >,
}

pub use crate::accelerators::accelerator::MAX_RNG_STATE;

/// The host's accelerator behind the registry.
struct HostAccelerator {
    name: String,
    // Serialises the host's callbacks and refuses re-entry; shared with
    // the collectives' groups, which may outlive the registration.
    userdata: Arc<HostLock<Userdata>>,
    v: VtableCopy,
    collectives: Option<Arc<HostCollectives>>,
}

#[derive(Clone, Copy)]
struct VtableCopy {
    is_available: Option<unsafe extern "C" fn(*mut c_void, *mut bool) -> *mut fulmen_error>,
    auto_device_count: Option<unsafe extern "C" fn(*mut c_void, *mut usize) -> *mut fulmen_error>,
    parse_devices:
        Option<unsafe extern "C" fn(*mut c_void, *const c_char, *mut i64, usize, *mut usize) -> *mut fulmen_error>,
    get_parallel_devices:
        Option<unsafe extern "C" fn(*mut c_void, *const i64, usize, *mut fulmen_device) -> *mut fulmen_error>,
    setup_device: Option<unsafe extern "C" fn(*mut c_void, fulmen_device) -> *mut fulmen_error>,
    teardown: Option<unsafe extern "C" fn(*mut c_void) -> *mut fulmen_error>,
    get_device_stats:
        Option<unsafe extern "C" fn(*mut c_void, fulmen_device, *mut fulmen_stats_builder) -> *mut fulmen_error>,
    supports_dtype: Option<unsafe extern "C" fn(*mut c_void, i32, *mut bool) -> *mut fulmen_error>,
    fp16_needs_loss_scaling: Option<unsafe extern "C" fn(*mut c_void, *mut bool) -> *mut fulmen_error>,
    synchronize: Option<unsafe extern "C" fn(*mut c_void, fulmen_device) -> *mut fulmen_error>,
    get_rng_state: Option<RngGetFn>,
    set_rng_state: Option<RngSetFn>,
}

type RngGetFn = unsafe extern "C" fn(*mut c_void, fulmen_device, *mut u8, usize, *mut usize) -> *mut fulmen_error;
type RngSetFn = unsafe extern "C" fn(*mut c_void, fulmen_device, *const u8, usize) -> *mut fulmen_error;

// SAFETY: every call into the host goes through the `userdata` mutex; the
// header tells hosts their callbacks may run on the trainer's thread.
unsafe impl Sync for HostAccelerator {}

impl HostAccelerator {
    fn call(&self, what: &str, f: impl FnOnce(*mut c_void) -> *mut fulmen_error) -> Result<()> {
        let ud = self.userdata.lock(&format!("accelerator {:?}", self.name))?;
        call_host(&format!("accelerator {:?} {what}", self.name), || f(ud.ptr()))
    }
}

impl Accelerator for HostAccelerator {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_available(&self) -> bool {
        self.try_is_available().unwrap_or(false)
    }

    fn try_is_available(&self) -> Result<bool> {
        let Some(f) = self.v.is_available else { return Ok(true) };
        let mut out = false;
        self.call("is_available", |u| unsafe { f(u, &mut out) })?;
        Ok(out)
    }

    fn auto_device_count(&self) -> usize {
        self.try_auto_device_count().unwrap_or(0)
    }

    fn try_auto_device_count(&self) -> Result<usize> {
        let Some(f) = self.v.auto_device_count else { return Ok(1) };
        let mut out = 0usize;
        self.call("auto_device_count", |u| unsafe { f(u, &mut out) })?;
        Ok(out)
    }

    fn parse_devices(&self, devices: &DevicesSpec) -> Result<ParsedDevices> {
        let available = self.try_auto_device_count()?;
        if available > MAX_DEVICES {
            return Err(Error::new(
                ErrorCode::Callback,
                format!(
                    "accelerator {:?} auto_device_count reported {available} devices; fulmen accepts at most {MAX_DEVICES}",
                    self.name
                ),
            ));
        }
        let Some(f) = self.v.parse_devices else { return parse_indexed_devices(&self.name, devices, available) };
        let text = CString::new(devices.to_text()).unwrap_or_default();
        let mut ids = vec![0i64; available.max(1) * 2 + 8];
        let mut n = 0usize;
        self.call("parse_devices", |u| unsafe { f(u, text.as_ptr(), ids.as_mut_ptr(), ids.len(), &mut n) })?;
        if n > ids.len() {
            return Err(Error::new(
                ErrorCode::Callback,
                format!("accelerator {:?} parse_devices reported {n} ids for a buffer of {}", self.name, ids.len()),
            ));
        }
        let mut out = Vec::with_capacity(n);
        for id in &ids[..n] {
            if *id < 0 || *id as usize >= available {
                return Err(Error::new(
                    ErrorCode::Callback,
                    format!(
                        "accelerator {:?} parse_devices returned device {id}, but it has {available} device(s)",
                        self.name
                    ),
                ));
            }
            out.push(*id as usize);
        }
        crate::accelerators::devices::check_unique(&self.name, &out)?;
        Ok(ParsedDevices::Indices(out))
    }

    fn get_parallel_devices(&self, parsed: &ParsedDevices) -> Result<Vec<Device>> {
        let ids: Vec<i64> = match parsed {
            ParsedDevices::Count(n) => (0..*n as i64).collect(),
            ParsedDevices::Indices(v) => v.iter().map(|i| *i as i64).collect(),
        };
        let Some(f) = self.v.get_parallel_devices else { return Ok(vec![Device::Cpu; ids.len()]) };
        let mut out = vec![fulmen_device { device_type: -1, index: -1 }; ids.len()];
        self.call("get_parallel_devices", |u| unsafe { f(u, ids.as_ptr(), ids.len(), out.as_mut_ptr()) })?;
        out.into_iter()
            .map(|d| {
                from_c(d).map_err(|e| {
                    Error::new(
                        ErrorCode::Callback,
                        format!("accelerator {:?} get_parallel_devices: {}", self.name, e.message),
                    )
                })
            })
            .collect()
    }

    fn setup_device(&self, device: Device) -> Result<()> {
        match self.v.setup_device {
            Some(f) => self.call("setup_device", |u| unsafe { f(u, to_c(device)) }),
            None => Ok(()),
        }
    }

    fn teardown(&self) -> Result<()> {
        match self.v.teardown {
            Some(f) => self.call("teardown", |u| unsafe { f(u) }),
            None => Ok(()),
        }
    }

    fn get_device_stats(&self, device: Device) -> Result<Vec<(String, f64)>> {
        let Some(f) = self.v.get_device_stats else { return Ok(Vec::new()) };
        let (builder, r) = crate::ffi::data::batch::with_temp_handle(fulmen_stats_builder { stats: Vec::new() }, |b| {
            self.call("get_device_stats", |u| unsafe { f(u, to_c(device), b) })
        });
        r?;
        Ok(builder.stats)
    }

    fn supports_dtype(&self, kind: tch::Kind) -> Result<bool> {
        let Some(f) = self.v.supports_dtype else { return Ok(true) };
        let Ok(dtype) = crate::tensor::DType::from_kind(kind) else { return Ok(true) };
        let mut out = true;
        self.call("supports_dtype", |u| unsafe { f(u, dtype as i32, &mut out) })?;
        Ok(out)
    }

    fn fp16_needs_loss_scaling(&self) -> Result<bool> {
        let Some(f) = self.v.fp16_needs_loss_scaling else { return Ok(true) };
        let mut out = true;
        self.call("fp16_needs_loss_scaling", |u| unsafe { f(u, &mut out) })?;
        Ok(out)
    }

    fn synchronize(&self, device: Device) -> Result<()> {
        match self.v.synchronize {
            Some(f) => self.call("synchronize", |u| unsafe { f(u, to_c(device)) }),
            None => {
                default_synchronize(device);
                Ok(())
            }
        }
    }

    fn rng_state(&self, device: Device) -> Result<Option<tch::Tensor>> {
        let Some(f) = self.v.get_rng_state else { return Ok(default_rng_state(device)) };
        let mut buf = vec![0u8; MAX_RNG_STATE];
        let mut n = usize::MAX;
        self.call("get_rng_state", |u| unsafe { f(u, to_c(device), buf.as_mut_ptr(), buf.len(), &mut n) })?;
        if n > buf.len() {
            return Err(Error::new(
                ErrorCode::Callback,
                format!("accelerator {:?} get_rng_state wrote no length or one past FULMEN_MAX_RNG_STATE", self.name),
            ));
        }
        Ok(Some(tch::Tensor::from_slice(&buf[..n])))
    }

    fn set_rng_state(&self, device: Device, state: &tch::Tensor) -> Result<()> {
        let Some(f) = self.v.set_rng_state else { return default_set_rng_state(device, state) };
        let bytes = Vec::<u8>::try_from(&state.f_contiguous()?)?;
        self.call("set_rng_state", |u| unsafe { f(u, to_c(device), bytes.as_ptr(), bytes.len()) })
    }

    fn collectives(&self) -> Option<Arc<dyn DeviceCollectives>> {
        self.collectives.clone().map(|c| c as Arc<dyn DeviceCollectives>)
    }
}

/// Registers a custom accelerator under `name` with `description`, so the
/// trainer accepts `accelerator=name`. A registered name is refused unless
/// `override_existing`; "auto", "gpu" and "tpu" are reserved. `vtable` is
/// copied; on failure `userdata_free` is not called.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a name that is empty, malformed,
/// reserved, or registered already without `override_existing`; a string not
/// UTF-8; `struct_size` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_register(
    name: *const c_char,
    description: *const c_char,
    vtable: *const fulmen_accelerator_vtable,
    override_existing: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let n = str_arg(name, "name")?;
        let d = if description.is_null() { "" } else { str_arg(description, "description")? };
        // The slots from `supports_dtype` on were appended: an older vtable
        // ends before them.
        let appended = std::mem::offset_of!(fulmen_accelerator_vtable, supports_dtype);
        // An appended slot the host's vtable ends before reads as NULL.
        let v = &crate::ffi::base::callback::read_vtable(vtable, appended, "fulmen_accelerator_vtable")?;
        let copy = VtableCopy {
            is_available: v.is_available,
            auto_device_count: v.auto_device_count,
            parse_devices: v.parse_devices,
            get_parallel_devices: v.get_parallel_devices,
            setup_device: v.setup_device,
            teardown: v.teardown,
            get_device_stats: v.get_device_stats,
            supports_dtype: v.supports_dtype,
            fp16_needs_loss_scaling: v.fp16_needs_loss_scaling,
            synchronize: v.synchronize,
            get_rng_state: v.get_rng_state,
            set_rng_state: v.set_rng_state,
        };
        if copy.get_rng_state.is_some() != copy.set_rng_state.is_some() {
            return Err(Error::invalid(
                "fulmen_accelerator_vtable: set both get_rng_state and set_rng_state, or neither",
            ));
        }
        // The destructor is armed only once the registry took the
        // accelerator, so a refused registration leaves userdata to the host.
        let name = n.trim().to_lowercase();
        let userdata = Arc::new(HostLock::new(Userdata::new(v.userdata, None)));
        let collectives = match v.collectives.is_null() {
            false => Some(Arc::new(HostCollectives::copy(v.collectives, &name, Arc::clone(&userdata))?)),
            true => None,
        };
        let acc = Arc::new(HostAccelerator { name, userdata, v: copy, collectives });
        registry::register(n, d, acc.clone(), override_existing)?;
        acc.userdata.lock("the new accelerator")?.set_free(v.userdata_free);
        Ok(())
    })
}

/// Removes a registered accelerator (custom or built-in) by name.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown or malformed name, or one
/// not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_accelerator_unregister(name: *const c_char) -> *mut fulmen_error {
    guard!(|| registry::remove(str_arg(name, "name")?))
}
