//! The XLA accelerator (Lightning's `XLAAccelerator`, alias `tpu`).
use super::accelerator::Accelerator;
use super::cxx;
use super::devices::{DevicesSpec, ParsedDevices};
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::Device;

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

    /// Why XLA cannot be used here, or `None` when it can.
    pub fn unavailable_reason() -> Option<String> {
        let pjrt = std::env::var("PJRT_DEVICE").ok().filter(|v| !v.trim().is_empty());
        let backend = match cxx::xla_device_count() {
            Ok(0) => Some("no XLA backend is registered in this libtorch (it is built without torch_xla)".to_string()),
            Ok(_) => None,
            Err(e) => Some(format!("querying the XLA backend failed: {}", e.message)),
        };
        match (pjrt, backend) {
            (Some(_), None) => None,
            (None, None) => Some("no PJRT runtime is configured: PJRT_DEVICE is not set".to_string()),
            (Some(_), Some(why)) => Some(why),
            (None, Some(why)) => Some(format!("PJRT_DEVICE is not set and {why}")),
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

    fn auto_device_count(&self) -> usize {
        if self.is_available() {
            cxx::xla_device_count().unwrap_or(0)
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

    fn get_parallel_devices(&self, _parsed: &ParsedDevices) -> Result<Vec<Device>> {
        if !self.is_available() {
            return Err(Self::unavailable("get_parallel_devices"));
        }
        Err(Error::new(ErrorCode::Unsupported, "xla get_parallel_devices: tch 0.26 has no XLA device type"))
    }

    fn setup_device(&self, _device: Device) -> Result<()> {
        if !self.is_available() {
            return Err(Self::unavailable("setup_device"));
        }
        Err(Error::new(ErrorCode::Unsupported, "xla setup_device: tch 0.26 has no XLA device type"))
    }

    fn teardown(&self) -> Result<()> {
        Ok(())
    }

    fn get_device_stats(&self, _device: Device) -> Result<Vec<(String, f64)>> {
        Err(Self::unavailable("get_device_stats"))
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
        assert!(why.contains("no XLA backend is registered in this libtorch"), "{why}");
        let err = xla.parse_devices(&DevicesSpec::Auto).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("XLA cannot be used"), "{}", err.message);
        assert!(xla.setup_device(Device::Cpu).is_err());
        assert!(xla.get_device_stats(Device::Cpu).is_err());
    }
}
