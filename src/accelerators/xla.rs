//! The XLA accelerator (Lightning's `XLAAccelerator`, alias `tpu`).
use super::accelerator::Accelerator;
use super::devices::{DevicesSpec, ParsedDevices};
use super::xla_runtime;
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::{Device, DeviceType};

/// TPUs and other PJRT devices through an XLA backend registered in
/// libtorch (as torch_xla registers one). Available only when a PJRT
/// runtime is configured (`PJRT_DEVICE` is set) and libtorch has an XLA
/// backend with devices.
#[derive(Debug, Default, Clone, Copy)]
pub struct XlaAccelerator;

impl XlaAccelerator {
    /// An XLA accelerator.
    pub fn new() -> Self {
        XlaAccelerator
    }

    /// Why XLA cannot be used here, or `None` when it can. With
    /// `PJRT_DEVICE` set, the first call starts torch_xla's backend
    /// ([`xla_runtime::start`]).
    pub fn unavailable_reason() -> Option<String> {
        let pjrt = std::env::var("PJRT_DEVICE").ok().filter(|v| !v.trim().is_empty());
        if pjrt.is_none() {
            let why = "no PJRT runtime is configured: PJRT_DEVICE is not set (CPU, TPU, CUDA)".to_string();
            return Some(match xla_runtime::missing_reason() {
                Some(missing) => format!("{why}, and {missing}"),
                None => why,
            });
        }
        if xla_runtime::tpu_before_start() {
            // Counted without starting the client here: each process of a
            // TPU job starts its own on its own chip.
            if let Some(missing) = xla_runtime::missing_reason() {
                return Some(missing);
            }
            return (xla_runtime::tpu_local_processes() == 0)
                .then(|| "PJRT_DEVICE is TPU but no TPU chip is attached to this host (PCI)".to_string());
        }
        match xla_runtime::start() {
            Ok(0) => Some("torch_xla's PJRT client has no devices".to_string()),
            Ok(_) => None,
            Err(e) => Some(e.message),
        }
    }

    fn unavailable(what: &str) -> Error {
        let why = Self::unavailable_reason().unwrap_or_else(|| "it is not available".to_string());
        Error::new(ErrorCode::Unavailable, format!("xla {what}: XLA cannot be used: {why}"))
    }
}

impl Accelerator for XlaAccelerator {
    fn name(&self) -> &str {
        "xla"
    }

    fn is_available(&self) -> bool {
        Self::unavailable_reason().is_none()
    }

    /// The PJRT client's devices; on TPUs before the client starts, the
    /// host's chips (one process each, as torch_xla's `xmp.spawn`).
    fn auto_device_count(&self) -> usize {
        if xla_runtime::tpu_before_start() {
            xla_runtime::tpu_local_processes()
        } else if self.is_available() {
            xla_runtime::start().unwrap_or(0)
        } else {
            0
        }
    }

    /// Lightning's `_parse_tpu_devices`: `"auto"`, 1, all the devices, or
    /// one device id `[i]`.
    fn parse_devices(&self, devices: &DevicesSpec) -> Result<ParsedDevices> {
        if !self.is_available() {
            return Err(Self::unavailable("parse_devices"));
        }
        let count = self.auto_device_count();
        match devices {
            DevicesSpec::Auto => Ok(ParsedDevices::Count(count)),
            DevicesSpec::Count(n) if *n == 1 || *n == count => Ok(ParsedDevices::Count(*n)),
            DevicesSpec::Indices(ids) if ids.len() == 1 && ids[0] < count => Ok(ParsedDevices::Indices(ids.clone())),
            other => Err(Error::invalid(format!(
                "devices={} is not valid for the xla accelerator: it can only be \"auto\", 1, {count} or [<0-{}>]",
                other.describe(),
                count.saturating_sub(1)
            ))),
        }
    }

    /// `xla:0` .. `xla:N-1` (the count), or the one device asked for.
    fn get_parallel_devices(&self, parsed: &ParsedDevices) -> Result<Vec<Device>> {
        if !self.is_available() {
            return Err(Self::unavailable("get_parallel_devices"));
        }
        let ids: Vec<usize> = match parsed {
            ParsedDevices::Count(n) => (0..*n).collect(),
            ParsedDevices::Indices(ids) => ids.clone(),
        };
        Ok(ids.into_iter().map(|i| Device::new(DeviceType::Xla, i)).collect())
    }

    fn setup_device(&self, device: Device) -> Result<()> {
        if !self.is_available() {
            return Err(Self::unavailable("setup_device"));
        }
        if device.kind() != DeviceType::Xla {
            return Err(Error::invalid(format!("the xla accelerator cannot set up {device:?}")));
        }
        Ok(())
    }

    /// Lightning's XLAPrecision: "32-true", "16-true" and "bf16-true";
    /// autocast's mixed precisions are refused, as Lightning refuses them.
    fn check_precision(&self, precision: &str) -> Result<()> {
        if precision.ends_with("-mixed") {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!(
                    "precision {precision:?} is not supported on the xla accelerator (Lightning's XLAPrecision): use \
                     \"32-true\", \"16-true\" or \"bf16-true\""
                ),
            ));
        }
        Ok(())
    }

    /// Waits for the device's pending work: its graph is cut and run
    /// ([`Device::synchronize`]); unlike the default, a failure is an error.
    fn synchronize(&self, device: Device) -> Result<()> {
        device.synchronize()
    }

    /// torch_xla's step marker, before each batch as torch_xla's
    /// `MpDeviceLoader` marks steps for Lightning's XLAStrategy.
    fn mark_step(&self, device: Device) -> Result<()> {
        if device.kind() != DeviceType::Xla {
            return Ok(());
        }
        xla_runtime::step_marker(device.index(), false)
    }

    fn teardown(&self) -> Result<()> {
        Ok(())
    }

    /// None: torch_xla keeps its generator as a seed in its own runtime,
    /// which Lightning's checkpoints do not hold either.
    fn rng_state(&self, _device: Device) -> Result<Option<tch::Tensor>> {
        Ok(None)
    }

    /// None, as Lightning's `XLAAccelerator.get_device_stats`.
    fn get_device_stats(&self, _device: Device) -> Result<Vec<(String, f64)>> {
        if !self.is_available() {
            return Err(Self::unavailable("get_device_stats"));
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xla_is_unavailable_here_and_says_why() {
        let xla = XlaAccelerator::new();
        assert!(!xla.is_available());
        assert_eq!(xla.auto_device_count(), 0);
        let why = XlaAccelerator::unavailable_reason().unwrap();
        assert!(why.contains("PJRT_DEVICE is not set"), "{why}");
        assert!(why.contains("_XLAC extension is not in"), "{why}");
        let err = xla.parse_devices(&DevicesSpec::Auto).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("XLA cannot be used"), "{}", err.message);
        assert!(xla.setup_device(Device::Cpu).is_err());
        assert!(xla.get_device_stats(Device::Cpu).is_err());
    }
}
