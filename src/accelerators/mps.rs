//! The MPS accelerator (Lightning's `MPSAccelerator`): Apple silicon GPUs.
use super::accelerator::Accelerator;
use super::devices::{parse_indexed_devices, DevicesSpec, ParsedDevices};
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::Device;

/// Apple's Metal Performance Shaders backend: one device, available only
/// where libtorch was built with MPS and runs on Apple silicon.
#[derive(Debug, Default, Clone, Copy)]
pub struct MpsAccelerator;

impl MpsAccelerator {
    /// An MPS accelerator.
    pub fn new() -> Self {
        MpsAccelerator
    }

    fn unavailable(what: &str) -> Error {
        Error::new(
            ErrorCode::Unavailable,
            format!("mps {what}: MPS is not available (it needs macOS on Apple silicon and a libtorch built with MPS)"),
        )
    }
}

impl Accelerator for MpsAccelerator {
    fn name(&self) -> &str {
        "mps"
    }

    fn is_available(&self) -> bool {
        tch::utils::has_mps()
    }

    fn auto_device_count(&self) -> usize {
        usize::from(self.is_available())
    }

    fn parse_devices(&self, devices: &DevicesSpec) -> Result<ParsedDevices> {
        parse_indexed_devices("mps", devices, self.auto_device_count())
    }

    fn get_parallel_devices(&self, parsed: &ParsedDevices) -> Result<Vec<Device>> {
        Ok(vec![Device::Mps; parsed.len()])
    }

    fn setup_device(&self, device: Device) -> Result<()> {
        if device != Device::Mps {
            return Err(Error::invalid(format!("mps setup_device: device should be MPS, got {device:?}")));
        }
        if !self.is_available() {
            return Err(Self::unavailable("setup_device"));
        }
        Ok(())
    }

    fn teardown(&self) -> Result<()> {
        Ok(())
    }

    /// libtorch's C++ API has no MPS memory statistics; an empty list when
    /// MPS is available, an error otherwise.
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
    fn mps_is_unavailable_on_linux() {
        let mps = MpsAccelerator::new();
        if cfg!(target_os = "macos") {
            return;
        }
        assert!(!mps.is_available());
        assert_eq!(mps.auto_device_count(), 0);
        let err = mps.parse_devices(&DevicesSpec::Count(1)).unwrap_err();
        assert!(err.message.contains("this machine has no mps device"), "{}", err.message);
        let err = mps.setup_device(Device::Mps).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("MPS is not available"), "{}", err.message);
        assert!(mps.get_device_stats(Device::Mps).is_err());
    }
}
