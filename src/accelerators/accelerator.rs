//! The accelerator interface, as Lightning's `Accelerator` base class.
use super::devices::{DevicesSpec, ParsedDevices};
use crate::distributed::DeviceCollectives;
use crate::error::Result;
use crate::tensor::device::Device;
use std::sync::Arc;
use tch::Tensor;

/// A kind of hardware the trainer can run on: how to find its devices, how
/// to parse the user's `devices` value for it, how to set a device up and
/// tear it down, and what statistics it reports.
///
/// The trait is object-safe; the registry holds `Arc<dyn Accelerator>`, so
/// custom accelerators (such as those registered from C) implement it too.
pub trait Accelerator: Send + Sync {
    /// The registry name (`"cpu"`, `"cuda"`, ...).
    fn name(&self) -> &str;

    /// Whether this accelerator can be used on this machine.
    fn is_available(&self) -> bool;

    /// The number of devices `devices="auto"` selects.
    fn auto_device_count(&self) -> usize;

    /// [`Accelerator::is_available`] with the reason when the check itself
    /// failed (a host callback's error).
    fn try_is_available(&self) -> Result<bool> {
        Ok(self.is_available())
    }

    /// [`Accelerator::auto_device_count`] with the reason when the count
    /// itself failed.
    fn try_auto_device_count(&self) -> Result<usize> {
        Ok(self.auto_device_count())
    }

    /// Checks the user's `devices` value against this machine.
    fn parse_devices(&self, devices: &DevicesSpec) -> Result<ParsedDevices>;

    /// The libtorch devices, one per process, for parsed devices.
    fn get_parallel_devices(&self, parsed: &ParsedDevices) -> Result<Vec<Device>>;

    /// Prepares `device` before the model is moved to it (in the process
    /// that will use it).
    fn setup_device(&self, device: Device) -> Result<()>;

    /// Releases what the accelerator holds at the end of a run.
    fn teardown(&self) -> Result<()>;

    /// Named statistics of `device` for loggers (memory, utilization).
    fn get_device_stats(&self, device: Device) -> Result<Vec<(String, f64)>>;

    /// Whether the accelerator's devices compute in `kind`; the trainer
    /// refuses a precision that needs one they do not. Default: every dtype.
    fn supports_dtype(&self, _kind: tch::Kind) -> Result<bool> {
        Ok(true)
    }

    /// Whether float16 training needs loss scaling there (a GradScaler
    /// for `16-mixed`, as on CUDA). Default: true.
    fn fp16_needs_loss_scaling(&self) -> Result<bool> {
        Ok(true)
    }

    /// Blocks until the work queued on `device` is done (timing code asks
    /// before reading a clock). Default: the device's backend (nothing on
    /// the CPU); a backend that cannot is warned about once and skipped.
    fn synchronize(&self, device: Device) -> Result<()> {
        default_synchronize(device);
        Ok(())
    }

    /// Refuses a precision (by its name, "bf16-mixed") this accelerator's
    /// runs cannot use. Default: every precision.
    fn check_precision(&self, _precision: &str) -> Result<()> {
        Ok(())
    }

    /// Ends the step traced so far on `device`, before each batch is moved
    /// there (a lazy backend's graph cut: torch_xla's `mark_step`).
    /// Default: nothing.
    fn mark_step(&self, _device: Device) -> Result<()> {
        Ok(())
    }

    /// The state of `device`'s random generator, for checkpoints; `None`
    /// on the CPU (whose generator checkpoints hold anyway). Default:
    /// libtorch's default generator for the device; `None`, with a warning
    /// once, when its backend registered none.
    fn rng_state(&self, device: Device) -> Result<Option<Tensor>> {
        Ok(default_rng_state(device))
    }

    /// Restores a state [`Accelerator::rng_state`] returned.
    fn set_rng_state(&self, device: Device, state: &Tensor) -> Result<()> {
        default_set_rng_state(device, state)
    }

    /// The accelerator's own collectives for DDP on its devices (a
    /// vendor's communication library). Default: none (gloo, through the
    /// CPU for device types gloo cannot reach).
    fn collectives(&self) -> Option<Arc<dyn DeviceCollectives>> {
        None
    }
}

/// The most bytes of a device generator's state (`get_rng_state`).
pub const MAX_RNG_STATE: usize = 65536;

/// Warns on stderr once per `key` (a device type and a topic).
fn warn_once(key: String, message: impl FnOnce() -> String) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if !seen.contains(&key) {
        eprintln!("fulmen: warning: {}", message());
        seen.push(key);
    }
}

/// libtorch's synchronize for `device`, skipped with a warning where its
/// backend has none.
pub fn default_synchronize(device: Device) {
    if let Err(e) = device.synchronize() {
        warn_once(format!("sync {}", device.kind().name()), || {
            format!("{}; timings read without waiting for the device", e.message)
        });
    }
}

/// libtorch's default generator state for `device` (`None` on the CPU, and
/// with a warning where its backend registered no generator).
pub fn default_rng_state(device: Device) -> Option<Tensor> {
    if device == Device::Cpu {
        return None;
    }
    match device.rng_state() {
        Ok(t) => Some(t),
        Err(e) => {
            warn_once(format!("rng {}", device.kind().name()), || {
                format!("{}; checkpoints will not hold the device's random state", e.message)
            });
            None
        }
    }
}

/// Restores `state` into libtorch's default generator for `device`.
pub fn default_set_rng_state(device: Device, state: &Tensor) -> Result<()> {
    if device == Device::Cpu {
        return Ok(());
    }
    device.set_rng_state(state)
}

impl std::fmt::Debug for dyn Accelerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accelerator").field("name", &self.name()).finish()
    }
}
