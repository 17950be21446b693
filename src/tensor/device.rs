//! Devices: the C API's form (a device type and an index) and the core's
//! [`Device`], which adds to tch's devices every other libtorch device type
//! (XPU, HPU, MTIA, IPU, Meta and PrivateUse1 backends such as "npu"). tch
//! cannot name those: moves to them and queries of them go through the C++
//! shim (`csrc/devices.cpp`), and libtorch's dispatcher runs their kernels.
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use libc::{c_char, c_int};
use tch::Tensor;

/// A device type (`fulmen_device_type`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The host CPU.
    Cpu = 0,
    /// An NVIDIA GPU through CUDA.
    Cuda = 1,
    /// Apple's Metal Performance Shaders.
    Mps = 2,
    /// A PJRT / XLA device.
    Xla = 3,
    /// Intel's XPU backend (`torch.device("xpu")`).
    Xpu = 4,
    /// Habana Gaudi's HPU backend.
    Hpu = 5,
    /// Meta's MTIA backend.
    Mtia = 6,
    /// Graphcore's IPU backend.
    Ipu = 7,
    /// The meta device: shapes and dtypes without data.
    Meta = 8,
    /// libtorch's PrivateUse1 key: an out-of-tree backend under the name it
    /// registered (`torch.utils.rename_privateuse1_backend`, e.g. "npu").
    PrivateUse1 = 9,
}

/// Every device type, in C order.
const TYPES: [DeviceType; 10] = [
    DeviceType::Cpu,
    DeviceType::Cuda,
    DeviceType::Mps,
    DeviceType::Xla,
    DeviceType::Xpu,
    DeviceType::Hpu,
    DeviceType::Mtia,
    DeviceType::Ipu,
    DeviceType::Meta,
    DeviceType::PrivateUse1,
];

impl DeviceType {
    /// Reads a device type from its C value.
    pub fn from_c(value: i32) -> Result<DeviceType> {
        usize::try_from(value)
            .ok()
            .and_then(|i| TYPES.get(i).copied())
            .ok_or_else(|| Error::invalid(format!("{value} is not a fulmen_device_type (0..={})", TYPES.len() - 1)))
    }

    /// The `c10::DeviceType` value.
    pub fn c10(self) -> c_int {
        match self {
            DeviceType::Cpu => 0,
            DeviceType::Cuda => 1,
            DeviceType::Xla => 9,
            DeviceType::Xpu => 12,
            DeviceType::Mps => 13,
            DeviceType::Meta => 14,
            DeviceType::Hpu => 15,
            DeviceType::Ipu => 18,
            DeviceType::Mtia => 19,
            DeviceType::PrivateUse1 => 20,
        }
    }

    /// The device type of a `c10::DeviceType` value, if fulmen names it.
    pub fn from_c10(value: c_int) -> Option<DeviceType> {
        TYPES.iter().copied().find(|t| t.c10() == value)
    }

    /// Whether tch names devices of this type itself (the rest go through
    /// the shim).
    pub fn in_tch(self) -> bool {
        matches!(self, DeviceType::Cpu | DeviceType::Cuda | DeviceType::Mps)
    }

    /// libtorch's lower-case name ("xpu"; PrivateUse1 under the name its
    /// backend registered, "privateuseone" before one did).
    pub fn name(self) -> String {
        let mut buf = [0 as c_char; 64];
        // SAFETY: the name and error buffers are valid for their lengths.
        let named = call("device type name", |err, len| unsafe {
            shim::fulmen_cxx_device_type_name(self.c10(), buf.as_mut_ptr(), buf.len(), err, len)
        });
        match named {
            // SAFETY: the shim NUL-terminates within the buffer.
            Ok(()) => unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned(),
            Err(_) => format!("{self:?}").to_lowercase(),
        }
    }

    /// How many devices of this type libtorch has here: tch's count for
    /// CUDA, a registered backend's for the others (0 without one).
    pub fn device_count(self) -> Result<usize> {
        match self {
            DeviceType::Cpu => Ok(1),
            DeviceType::Cuda => Ok(usize::try_from(tch::Cuda::device_count()).unwrap_or(0)),
            DeviceType::Mps => Ok(usize::from(tch::utils::has_mps())),
            DeviceType::Meta => Ok(1),
            other => {
                let mut n: i64 = 0;
                // SAFETY: `n` and the error buffer are valid.
                call("device count", |err, len| unsafe {
                    shim::fulmen_cxx_device_count(other.c10(), &mut n, err, len)
                })?;
                Ok(usize::try_from(n).unwrap_or(0))
            }
        }
    }
}

/// A libtorch device: the CPU, a CUDA GPU, MPS, or a device of another
/// libtorch type with its index ([`Device::Other`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// CUDA GPU `i`.
    Cuda(usize),
    /// The MPS device.
    Mps,
    /// Device `index` of a type tch cannot name (never Cpu, Cuda or Mps).
    Other(DeviceType, usize),
}

impl Device {
    /// A device of `kind` with `index` (the index is ignored for the CPU
    /// and MPS).
    pub fn new(kind: DeviceType, index: usize) -> Device {
        match kind {
            DeviceType::Cpu => Device::Cpu,
            DeviceType::Cuda => Device::Cuda(index),
            DeviceType::Mps => Device::Mps,
            // libtorch's meta device has no index.
            DeviceType::Meta => Device::Other(DeviceType::Meta, 0),
            other => Device::Other(other, index),
        }
    }

    /// The core form of a tch device (tch's Vulkan, which fulmen does not
    /// use, reads as the CPU).
    pub fn from_tch(d: tch::Device) -> Device {
        match d {
            tch::Device::Cuda(i) => Device::Cuda(i),
            tch::Device::Mps => Device::Mps,
            _ => Device::Cpu,
        }
    }

    /// The tch device, for the types tch names.
    pub fn tch(self) -> Option<tch::Device> {
        match self {
            Device::Cpu => Some(tch::Device::Cpu),
            Device::Cuda(i) => Some(tch::Device::Cuda(i)),
            Device::Mps => Some(tch::Device::Mps),
            Device::Other(..) => None,
        }
    }

    /// The device type.
    pub fn kind(self) -> DeviceType {
        match self {
            Device::Cpu => DeviceType::Cpu,
            Device::Cuda(_) => DeviceType::Cuda,
            Device::Mps => DeviceType::Mps,
            Device::Other(t, _) => t,
        }
    }

    /// The device index (0 for the CPU and MPS).
    pub fn index(self) -> usize {
        match self {
            Device::Cuda(i) | Device::Other(_, i) => i,
            Device::Cpu | Device::Mps => 0,
        }
    }

    /// Whether this is a CUDA GPU.
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    /// The device `t` is on. tch reports every type it does not know as
    /// MPS, so any answer but the CPU or CUDA is checked with libtorch.
    pub fn of(t: &Tensor) -> Result<Device> {
        let d = t.device();
        if matches!(d, tch::Device::Cpu | tch::Device::Cuda(_)) {
            return Ok(Device::from_tch(d));
        }
        let (mut code, mut index): (c_int, i64) = (0, 0);
        // SAFETY: `as_ptr` is the `at::Tensor*` tch holds; the outputs and
        // the error buffer are valid.
        call("tensor device", |err, len| unsafe {
            shim::fulmen_cxx_tensor_device(t.as_ptr().cast(), &mut code, &mut index, err, len)
        })?;
        let kind = DeviceType::from_c10(code).ok_or_else(|| {
            Error::new(
                ErrorCode::Unsupported,
                format!("a tensor on a libtorch device type ({code}) fulmen does not name"),
            )
        })?;
        Ok(Device::new(kind, usize::try_from(index).unwrap_or(0)))
    }

    /// libtorch's name of the device ("cpu", "cuda:0", "npu:1").
    pub fn name(self) -> String {
        match self {
            Device::Cpu => "cpu".to_owned(),
            Device::Mps => "mps".to_owned(),
            Device::Cuda(i) => format!("cuda:{i}"),
            Device::Other(DeviceType::Meta, _) => "meta".to_owned(),
            Device::Other(t, i) => format!("{}:{i}", t.name()),
        }
    }

    /// Checks that this device exists here.
    pub fn check_available(self) -> Result<()> {
        let kind = self.kind();
        if kind == DeviceType::Xla {
            // torch_xla's kernels exist only once its backend is started.
            crate::accelerators::xla_runtime::start()
                .map_err(|e| Error::new(e.code, format!("XLA devices are not available: {}", e.message)))?;
        }
        let count = kind.device_count()?;
        if self.index() < count || matches!(self, Device::Cpu | Device::Other(DeviceType::Meta, _)) {
            return Ok(());
        }
        let msg = match kind {
            DeviceType::Cuda => {
                format!("CUDA device {} requested but {count} CUDA device(s) are available", self.index())
            }
            DeviceType::Mps => "MPS is not available on this machine".to_owned(),
            _ if count == 0 => format!(
                "no {} device here: no {} backend is registered in this process's libtorch, or it reports none",
                kind.name(),
                kind.name()
            ),
            _ => format!("{} requested but {count} {} device(s) are available", self.name(), kind.name()),
        };
        Err(Error::new(ErrorCode::Unavailable, msg))
    }

    /// Makes this the calling thread's current device of its type (CUDA's
    /// `set_device` is the CUDA accelerator's).
    pub fn set_current(self) -> Result<()> {
        let Device::Other(kind, index) = self else { return Ok(()) };
        // SAFETY: the error buffer is valid.
        call("set the current device", |err, len| unsafe {
            shim::fulmen_cxx_device_set_current(kind.c10(), shim_index(kind, index), err, len)
        })
    }
}

impl Device {
    /// Blocks until the work queued on this device is done (nothing on the
    /// CPU), through its backend's device guard; on XLA, whose guard cannot
    /// wait, by running the pending graph and waiting for it.
    pub fn synchronize(self) -> Result<()> {
        if self == Device::Cpu {
            return Ok(());
        }
        let kind = self.kind();
        if kind == DeviceType::Xla {
            // torch_xla's device guard cannot wait: its step marker runs
            // the pending graph and waits for it (`xm.wait_device_ops`).
            self.check_available()?;
            return crate::accelerators::xla_runtime::step_marker(self.index(), true)
                .map_err(|e| Error::new(e.code, format!("synchronizing {}: {}", self.name(), e.message)));
        }
        // SAFETY: the error buffer is valid.
        call("synchronize the device", |err, len| unsafe {
            shim::fulmen_cxx_device_synchronize(kind.c10(), shim_index(kind, self.index()), err, len)
        })
        .map_err(|e| Error::new(e.code, format!("synchronizing {}: {}", self.name(), e.message)))
    }

    /// The state of libtorch's default random generator for this device (a
    /// uint8 CPU tensor): CUDA's, or the one a backend registered (the
    /// fake device's is the CPU's).
    pub fn rng_state(self) -> Result<Tensor> {
        let kind = self.kind();
        let mut out: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: `out` receives a heap `at::Tensor*`, which `from_ptr` owns.
        call("read the device's random state", |err, len| unsafe {
            shim::fulmen_cxx_device_rng_state(kind.c10(), shim_index(kind, self.index()), &mut out, err, len)
        })
        .map_err(|e| Error::new(e.code, format!("the random state of {}: {}", self.name(), e.message)))?;
        // SAFETY: the shim returned a new tensor.
        Ok(unsafe { Tensor::from_ptr(out.cast()) })
    }

    /// Restores a state [`Device::rng_state`] returned.
    pub fn set_rng_state(self, state: &Tensor) -> Result<()> {
        let kind = self.kind();
        // SAFETY: `as_ptr` is the `at::Tensor*` tch holds, alive through the call.
        call("restore the device's random state", |err, len| unsafe {
            shim::fulmen_cxx_device_set_rng_state(
                kind.c10(),
                shim_index(kind, self.index()),
                state.as_ptr().cast(),
                err,
                len,
            )
        })
        .map_err(|e| Error::new(e.code, format!("restoring the random state of {}: {}", self.name(), e.message)))
    }
}

/// The index libtorch takes for a device of `kind` (none for meta).
fn shim_index(kind: DeviceType, index: usize) -> i64 {
    if kind == DeviceType::Meta {
        -1
    } else {
        i64::try_from(index).unwrap_or(i64::MAX)
    }
}

/// `t.to(device, non_blocking)` for any device: through tch for its
/// devices, through the shim for the others.
pub fn to_device(t: &Tensor, device: Device, non_blocking: bool) -> Result<Tensor> {
    if let Some(d) = device.tch() {
        return Ok(t.f_to_device_(d, t.f_kind()?, non_blocking, false)?);
    }
    let Device::Other(kind, index) = device else { unreachable!("tch names the other devices") };
    let mut out: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: `as_ptr` is the `at::Tensor*` tch holds; `out` receives a heap
    // `at::Tensor*`, which `from_ptr` owns.
    call("move a tensor", |err, len| unsafe {
        shim::fulmen_cxx_tensor_to_device(
            t.as_ptr().cast(),
            kind.c10(),
            shim_index(kind, index),
            c_int::from(non_blocking),
            &mut out,
            err,
            len,
        )
    })
    .map_err(|e| Error::new(e.code, format!("to {}: {}", device.name(), e.message)))?;
    // SAFETY: the shim returned a new tensor.
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

/// What makes `t` one tensor among its handles: the address of its first
/// element, or of its TensorImpl where that cannot be read (no storage, a
/// null data pointer, torch_xla's tensors); 0 when undefined. With it,
/// whether it is the data's address (false: the TensorImpl's, which says
/// nothing of overlapping memory).
pub fn data_identity(t: &Tensor) -> Result<(usize, bool)> {
    tensor_identity(t, false)
}

/// The address of `t`'s TensorImpl, shared by its handles (shallow
/// clones, a tied parameter's names) and by no other tensor; 0 when
/// undefined.
pub fn impl_identity(t: &Tensor) -> Result<usize> {
    Ok(tensor_identity(t, true)?.0)
}

/// How `t` shares: the handles holding its TensorImpl, whether it is a
/// view of another tensor, its StorageImpl's address (0 without storage; a
/// meta tensor's detached copies share it) and the TensorImpls holding
/// that.
pub(crate) struct Sharing {
    /// Handles holding the TensorImpl.
    pub handles: usize,
    /// Whether `t` is a view.
    pub view: bool,
    /// The StorageImpl's address.
    pub storage: usize,
    /// TensorImpls holding the storage.
    pub storage_holders: usize,
}

/// How `t` shares ([`Sharing`]).
pub(crate) fn sharing(t: &Tensor) -> Result<Sharing> {
    let mut handles: libc::size_t = 0;
    let mut view: c_int = 0;
    let (mut storage, mut storage_holders): (usize, libc::size_t) = (0, 0);
    // SAFETY: `as_ptr` is the `at::Tensor*` tch holds, alive through the call.
    call("tensor sharing", |err, len| unsafe {
        let t = t.as_ptr().cast();
        shim::fulmen_cxx_tensor_sharing(t, &mut handles, &mut view, &mut storage, &mut storage_holders, err, len)
    })?;
    Ok(Sharing { handles, view: view != 0, storage, storage_holders })
}

fn tensor_identity(t: &Tensor, by_impl: bool) -> Result<(usize, bool)> {
    let mut out: usize = 0;
    let mut is_data: c_int = 0;
    // SAFETY: `as_ptr` is the `at::Tensor*` tch holds, alive through the call.
    call("tensor identity", |err, len| unsafe {
        shim::fulmen_cxx_tensor_identity(t.as_ptr().cast(), c_int::from(by_impl), &mut out, &mut is_data, err, len)
    })?;
    Ok((out, is_data != 0))
}

/// Whether `t.set_data(data)` keeps `t` (libtorch refuses it between
/// tensor types, as between the CPU and XLA).
pub fn set_data_compatible(t: &Tensor, data: &Tensor) -> Result<bool> {
    let mut out: c_int = 0;
    // SAFETY: both pointers are `at::Tensor*` tch holds, alive through the call.
    call("set_data check", |err, len| unsafe {
        shim::fulmen_cxx_tensor_set_data_compatible(t.as_ptr().cast(), data.as_ptr().cast(), &mut out, err, len)
    })?;
    Ok(out != 0)
}

/// Makes the handle `dst` hold `src`'s tensor: `dst` and every place that
/// reads it see the new tensor; other handles of the old one keep it.
pub fn assign(dst: &Tensor, src: &Tensor) -> Result<()> {
    // SAFETY: both pointers are `at::Tensor*` tch holds, alive through the
    // call; the shim assigns the C++ object, which tch only reads through
    // this pointer.
    call("tensor assign", |err, len| unsafe {
        shim::fulmen_cxx_tensor_assign(dst.as_ptr().cast_mut().cast(), src.as_ptr().cast(), err, len)
    })
}

/// `t` on the device of `like` (`t` itself, shallow, when it is there).
pub fn to_device_of(t: &Tensor, like: &Tensor) -> Result<Tensor> {
    let target = Device::of(like)?;
    if Device::of(t)? == target {
        Ok(t.shallow_clone())
    } else {
        to_device(t, target, false)
    }
}

/// Whether a backward pass ran in this process through fulmen: libtorch's
/// autograd engine sizes its per-device queues at the first one, so a
/// backend registered later cannot run backward.
static BACKWARD_RAN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that a backward pass is about to run (see [`register_fake_device`]).
pub fn note_backward() {
    BACKWARD_RAN.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Zeros of `shape` and `kind` on the device of `like`, made there
/// directly.
pub fn zeros_on_device_of(shape: &[i64], kind: tch::Kind, like: &Tensor) -> Result<Tensor> {
    match Device::of(like)?.tch() {
        Some(td) => Ok(Tensor::f_zeros(shape, (kind, td))?),
        None => new_on_device_of(shape, kind, like, true),
    }
}

/// An uninitialised tensor of `shape` and `kind` on the device of `like`,
/// made there directly.
pub fn empty_on_device_of(shape: &[i64], kind: tch::Kind, like: &Tensor) -> Result<Tensor> {
    match Device::of(like)?.tch() {
        Some(td) => Ok(Tensor::f_empty(shape, (kind, td))?),
        None => new_on_device_of(shape, kind, like, false),
    }
}

/// A 0-dim tensor of `kind` holding `value` on the device of `like`, filled
/// there (no copy from the host).
pub fn scalar_on_device_of(value: f64, kind: tch::Kind, like: &Tensor) -> Result<Tensor> {
    let mut t = empty_on_device_of(&[], kind, like)?;
    let _ = t.f_fill_(value)?;
    Ok(t)
}

/// A tensor on a device tch cannot name (a vendor's), made there through
/// the shim rather than on the CPU and copied.
fn new_on_device_of(shape: &[i64], kind: tch::Kind, like: &Tensor, zeroed: bool) -> Result<Tensor> {
    // The dtype crosses as an empty CPU tensor of it (tch keeps its
    // ScalarType codes to itself).
    let dtype = Tensor::f_empty([0], (kind, tch::Device::Cpu))?;
    let mut out: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: both tensors and `shape` outlive the call; `out` receives a
    // heap `at::Tensor*`, which `from_ptr` owns.
    call("make a tensor on a device", |err, len| unsafe {
        shim::fulmen_cxx_tensor_new_on_device_of(
            like.as_ptr().cast(),
            dtype.as_ptr().cast(),
            shape.as_ptr(),
            shape.len(),
            c_int::from(zeroed),
            &mut out,
            err,
            len,
        )
    })?;
    // SAFETY: the shim returned a new tensor.
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

/// Whether the fake device is registered under `name` (a repeated
/// registration is answered by the shim).
fn fake_device_registered(name: &str) -> bool {
    DeviceType::PrivateUse1.device_count().unwrap_or(0) > 0 && DeviceType::PrivateUse1.name() == name
}

/// Every device type name libtorch parses (c10's `DeviceTypeName`).
const LIBTORCH_TYPE_NAMES: [&str; 21] = [
    "cpu",
    "cuda",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "hip",
    "fpga",
    "maia",
    "xla",
    "vulkan",
    "metal",
    "xpu",
    "mps",
    "meta",
    "hpu",
    "ve",
    "lazy",
    "ipu",
    "mtia",
    "privateuseone",
];

/// Registers the fake PrivateUse1 device under `name` with `count` devices
/// (once per process; see `csrc/fake_device.cpp`).
pub fn register_fake_device(name: &str, count: usize) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && name.as_bytes()[0].is_ascii_lowercase();
    if !valid {
        return Err(Error::invalid(format!(
            "fake device name {name:?}: use 1 to 32 lower-case letters, digits or '_', starting with a letter"
        )));
    }
    if LIBTORCH_TYPE_NAMES.contains(&name) {
        return Err(Error::invalid(format!("fake device name {name:?} is one of libtorch's device types")));
    }
    if BACKWARD_RAN.load(std::sync::atomic::Ordering::Relaxed) && !fake_device_registered(name) {
        return Err(Error::state(
            "register the fake device before the first backward pass in this process: libtorch's autograd engine \
             sizes its per-device queues at the first one, and a device added later cannot run backward",
        ));
    }
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let c_name = std::ffi::CString::new(name).map_err(|_| Error::invalid("fake device name holds a NUL"))?;
    // SAFETY: the name is NUL-terminated; the error buffer is valid.
    call("register the fake device", |err, len| unsafe {
        shim::fulmen_cxx_fake_device_register(c_name.as_ptr(), count, err, len)
    })
}

/// How many times the host has waited for the fake device's data in this
/// process: scalar reads (`.item()`) and copies into host memory that are
/// not non-blocking copies into pinned memory. Each would synchronize the
/// host with a CUDA device, so a count that does not grow over steps shows
/// a step that never waits for its device.
pub fn fake_device_host_reads() -> Result<u64> {
    let mut out = 0u64;
    // SAFETY: `out` is a valid u64; the error buffer is valid.
    call("count the fake device's host reads", |err, len| unsafe {
        shim::fulmen_cxx_fake_device_host_reads(&mut out, err, len)
    })?;
    Ok(out)
}

/// A device in the C API's form: type plus index (the index is ignored for
/// the CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Device type.
    pub kind: DeviceType,
    /// Device index; 0 for the CPU.
    pub index: i64,
}

impl DeviceSpec {
    /// The host CPU.
    pub const CPU: DeviceSpec = DeviceSpec { kind: DeviceType::Cpu, index: 0 };

    /// Reads a device from its C form.
    pub fn from_c(kind: i32, index: i64) -> Result<Self> {
        let kind = DeviceType::from_c(kind)?;
        if index < 0 {
            return Err(Error::invalid(format!("device index {index} is negative")));
        }
        Ok(DeviceSpec { kind, index })
    }

    /// The device, unchecked (any index a host names; ignored for the CPU,
    /// MPS and meta).
    pub fn device(self) -> Result<Device> {
        let index = usize::try_from(self.index)
            .map_err(|_| Error::invalid(format!("device index {} is negative", self.index)))?;
        if index > i8::MAX as usize && !matches!(self.kind, DeviceType::Cpu | DeviceType::Mps | DeviceType::Meta) {
            return Err(Error::invalid(format!("device index {index} is above libtorch's limit of {}", i8::MAX)));
        }
        Ok(Device::new(self.kind, index))
    }

    /// The device, checked to exist here.
    pub fn to_device(self) -> Result<Device> {
        let d = self.device()?;
        d.check_available()?;
        Ok(d)
    }

    /// The libtorch device tch names; an error when this build cannot
    /// address it.
    pub fn to_tch(self) -> Result<tch::Device> {
        let d = self.to_device()?;
        d.tch().ok_or_else(|| {
            Error::new(
                ErrorCode::Unsupported,
                format!("{} cannot be used here (tch names cpu, cuda and mps)", d.name()),
            )
        })
    }

    /// The C form of a device.
    pub fn from_device(d: Device) -> Self {
        DeviceSpec { kind: d.kind(), index: d.index() as i64 }
    }
}
