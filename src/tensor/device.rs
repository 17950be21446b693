//! Devices as the C API names them: a device type and an index.
use crate::error::{Error, Result};
use tch::Device;

/// A device type (`fulmen_device_type`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    /// The host CPU.
    Cpu = 0,
    /// An NVIDIA GPU through CUDA.
    Cuda = 1,
    /// Apple's Metal Performance Shaders.
    Mps = 2,
    /// A PJRT / XLA device.
    Xla = 3,
}

/// A device: type plus index (the index is ignored for the CPU).
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
        let kind = match kind {
            0 => DeviceType::Cpu,
            1 => DeviceType::Cuda,
            2 => DeviceType::Mps,
            3 => DeviceType::Xla,
            k => return Err(Error::invalid(format!("{k} is not a fulmen_device_type (0..=3)"))),
        };
        if index < 0 {
            return Err(Error::invalid(format!("device index {index} is negative")));
        }
        Ok(DeviceSpec { kind, index })
    }

    /// The libtorch device; an error when this build cannot address it.
    pub fn to_tch(self) -> Result<Device> {
        match self.kind {
            DeviceType::Cpu => Ok(Device::Cpu),
            DeviceType::Cuda => {
                let n = tch::Cuda::device_count();
                if self.index >= n {
                    return Err(Error::new(
                        crate::error::ErrorCode::Unavailable,
                        format!("CUDA device {} requested but {n} CUDA device(s) are available", self.index),
                    ));
                }
                Ok(Device::Cuda(self.index as usize))
            }
            DeviceType::Mps => {
                if tch::utils::has_mps() {
                    Ok(Device::Mps)
                } else {
                    Err(Error::new(crate::error::ErrorCode::Unavailable, "MPS is not available on this machine"))
                }
            }
            DeviceType::Xla => Err(Error::new(
                crate::error::ErrorCode::Unavailable,
                "XLA devices are not available: no PJRT runtime is registered in this libtorch",
            )),
        }
    }

    /// The fulmen form of a libtorch device.
    pub fn from_tch(d: Device) -> Self {
        match d {
            Device::Cuda(i) => DeviceSpec { kind: DeviceType::Cuda, index: i as i64 },
            Device::Mps => DeviceSpec { kind: DeviceType::Mps, index: 0 },
            _ => DeviceSpec::CPU,
        }
    }
}
