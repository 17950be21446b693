//! The CPU accelerator (Lightning's `CPUAccelerator`): always available,
//! devices are a number of processes.
use super::accelerator::Accelerator;
use super::devices::{parse_process_count, DevicesSpec, ParsedDevices};
use super::proc_stats::{cpu_percent, memory_percent, read_cpu_times, resident_bytes, CpuTimes};
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use std::sync::Mutex;

/// The host CPU. `devices=N` runs N processes, each on the CPU.
#[derive(Debug, Default)]
pub struct CpuAccelerator {
    /// The /proc/stat sample of the last `get_device_stats` call and the
    /// percent computed then, so `cpu_percent` covers the time between calls.
    last: Mutex<Option<(CpuTimes, f64)>>,
}

impl CpuAccelerator {
    /// A CPU accelerator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Busy CPU percent of the machine since the previous call (since boot
    /// on the first call; the previous value when no clock tick elapsed).
    fn cpu_percent_since_last(&self) -> Result<f64> {
        let now = read_cpu_times()?;
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let percent = match *last {
            Some((before, previous)) if now.total == before.total => previous,
            Some((before, _)) => cpu_percent(before, now),
            None => cpu_percent(CpuTimes { total: 0, busy: 0 }, now),
        };
        *last = Some((now, percent));
        Ok(percent)
    }
}

impl Accelerator for CpuAccelerator {
    fn name(&self) -> &str {
        "cpu"
    }

    fn is_available(&self) -> bool {
        true
    }

    fn auto_device_count(&self) -> usize {
        1
    }

    fn parse_devices(&self, devices: &DevicesSpec) -> Result<ParsedDevices> {
        parse_process_count("cpu", devices)
    }

    fn get_parallel_devices(&self, parsed: &ParsedDevices) -> Result<Vec<Device>> {
        match parsed {
            ParsedDevices::Count(n) if *n > 0 => Ok(vec![Device::Cpu; *n]),
            other => Err(Error::invalid(format!(
                "cpu accelerator: parallel devices need a process count > 0, got {other:?}"
            ))),
        }
    }

    fn setup_device(&self, device: Device) -> Result<()> {
        match device {
            Device::Cpu => Ok(()),
            other => Err(Error::invalid(format!("cpu accelerator: device should be the CPU, got {other:?}"))),
        }
    }

    fn teardown(&self) -> Result<()> {
        Ok(())
    }

    /// `cpu_vm_percent`, `cpu_percent`, `cpu_swap_percent` (Lightning's
    /// names, from psutil there) and `cpu_rss_bytes` (this process).
    fn get_device_stats(&self, _device: Device) -> Result<Vec<(String, f64)>> {
        let memory = memory_percent()?;
        let cpu = self.cpu_percent_since_last()?;
        let rss = resident_bytes()?;
        Ok(vec![
            ("cpu_vm_percent".to_string(), memory.memory),
            ("cpu_percent".to_string(), cpu),
            ("cpu_swap_percent".to_string(), memory.swap),
            ("cpu_rss_bytes".to_string(), rss as f64),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_accelerator_semantics() {
        let cpu = CpuAccelerator::new();
        assert!(cpu.is_available());
        assert_eq!(cpu.auto_device_count(), 1);
        let parsed = cpu.parse_devices(&DevicesSpec::parse("3").unwrap()).unwrap();
        assert_eq!(cpu.get_parallel_devices(&parsed).unwrap(), vec![Device::Cpu; 3]);
        assert_eq!(cpu.parse_devices(&DevicesSpec::Auto).unwrap(), ParsedDevices::Count(1));
        assert!(cpu.parse_devices(&DevicesSpec::All).is_err());
        assert!(cpu.get_parallel_devices(&ParsedDevices::Indices(vec![0])).is_err());
        assert!(cpu.setup_device(Device::Cpu).is_ok());
        assert!(cpu.setup_device(Device::Cuda(0)).unwrap_err().message.contains("should be the CPU"));
        assert!(cpu.teardown().is_ok());
    }

    #[test]
    fn cpu_stats_are_plausible() {
        let cpu = CpuAccelerator::new();
        // Burn a little CPU so the second sample has busy ticks to see.
        let first = cpu.get_device_stats(Device::Cpu).unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        assert_ne!(x, 1);
        let second = cpu.get_device_stats(Device::Cpu).unwrap();
        for stats in [first, second] {
            let get = |k: &str| stats.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap();
            assert!(get("cpu_rss_bytes") > 1e6, "{stats:?}");
            for k in ["cpu_vm_percent", "cpu_percent", "cpu_swap_percent"] {
                assert!((0.0..=100.0).contains(&get(k)), "{k}: {stats:?}");
            }
            assert!(get("cpu_vm_percent") > 0.0);
        }
    }
}
