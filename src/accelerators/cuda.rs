//! The CUDA accelerator (Lightning's `CUDAAccelerator`).
use super::accelerator::Accelerator;
use super::cxx;
use super::devices::{parse_indexed_devices, DevicesSpec, ParsedDevices};
use crate::error::{Error, ErrorCode, Result};
use crate::tensor::device::Device;

/// NVIDIA GPUs through libtorch's CUDA backend. Available when libtorch
/// sees at least one CUDA device; device memory statistics come from
/// libtorch's caching allocator (`torch.cuda.memory_stats` names).
#[derive(Debug, Default, Clone, Copy)]
pub struct CudaAccelerator;

impl CudaAccelerator {
    /// A CUDA accelerator.
    pub fn new() -> Self {
        CudaAccelerator
    }

    /// The number of CUDA devices libtorch sees (0 on a CPU-only libtorch).
    pub fn device_count() -> usize {
        usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
    }

    /// Whether fulmen's C++ shim was compiled against a CUDA libtorch.
    pub fn compiled_with_cuda() -> bool {
        cxx::cuda_compiled()
    }

    /// The index of a CUDA device, or an error naming what was given.
    fn cuda_index(what: &str, device: Device) -> Result<usize> {
        match device {
            Device::Cuda(i) => {
                let count = Self::device_count();
                if i < count {
                    Ok(i)
                } else {
                    Err(Error::new(
                        ErrorCode::Unavailable,
                        format!("cuda {what}: CUDA device {i} requested but {count} CUDA device(s) are available"),
                    ))
                }
            }
            other => Err(Error::invalid(format!("cuda {what}: device should be a CUDA device, got {other:?}"))),
        }
    }
}

impl Accelerator for CudaAccelerator {
    fn name(&self) -> &str {
        "cuda"
    }

    fn is_available(&self) -> bool {
        Self::device_count() > 0
    }

    fn auto_device_count(&self) -> usize {
        Self::device_count()
    }

    fn parse_devices(&self, devices: &DevicesSpec) -> Result<ParsedDevices> {
        parse_indexed_devices("cuda", devices, Self::device_count())
    }

    fn get_parallel_devices(&self, parsed: &ParsedDevices) -> Result<Vec<Device>> {
        match parsed {
            ParsedDevices::Indices(ids) => Ok(ids.iter().map(|i| Device::Cuda(*i)).collect()),
            ParsedDevices::Count(n) => Ok((0..*n).map(Device::Cuda).collect()),
        }
    }

    /// Checks the device and makes it current (`torch.cuda.set_device`).
    fn setup_device(&self, device: Device) -> Result<()> {
        let index = Self::cuda_index("setup_device", device)?;
        cxx::cuda_set_device(index)
    }

    /// Releases the caching allocator's unused blocks
    /// (`torch.cuda.empty_cache`); nothing to do without CUDA.
    fn teardown(&self) -> Result<()> {
        if !cxx::cuda_compiled() || Self::device_count() == 0 {
            return Ok(());
        }
        cxx::cuda_empty_cache()
    }

    /// `torch.cuda.get_rng_state(device)`.
    fn rng_state(&self, device: Device) -> Result<Option<tch::Tensor>> {
        let index = Self::cuda_index("rng_state", device)?;
        cxx::cuda_rng_state(index).map(Some)
    }

    /// `torch.cuda.set_rng_state(state, device)`.
    fn set_rng_state(&self, device: Device, state: &tch::Tensor) -> Result<()> {
        let index = Self::cuda_index("set_rng_state", device)?;
        cxx::set_cuda_rng_state(index, state)
    }

    /// `torch.cuda.memory_stats(device)`: `allocated_bytes.all.current`,
    /// `reserved_bytes.all.peak`, `num_ooms`, ...
    fn get_device_stats(&self, device: Device) -> Result<Vec<(String, f64)>> {
        let index = Self::cuda_index("get_device_stats", device)?;
        cxx::cuda_memory_stats(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_is_unavailable_here_with_clear_errors() {
        let cuda = CudaAccelerator::new();
        if cuda.is_available() {
            return;
        }
        assert_eq!(cuda.auto_device_count(), 0);
        let err = cuda.parse_devices(&DevicesSpec::Auto).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("this machine has no cuda device"), "{}", err.message);
        let err = cuda.parse_devices(&DevicesSpec::parse("1,").unwrap()).unwrap_err();
        assert!(err.message.contains("device 1 does not exist"), "{}", err.message);
        let err = cuda.setup_device(Device::Cuda(0)).unwrap_err();
        assert!(err.message.contains("0 CUDA device(s) are available"), "{}", err.message);
        assert!(cuda.get_device_stats(Device::Cuda(0)).is_err());
        assert!(cuda.setup_device(Device::Cpu).unwrap_err().message.contains("should be a CUDA device"));
        assert!(cuda.teardown().is_ok());
        assert_eq!(
            cuda.get_parallel_devices(&ParsedDevices::Indices(vec![1, 0])).unwrap(),
            vec![Device::Cuda(1), Device::Cuda(0)]
        );
    }
}
