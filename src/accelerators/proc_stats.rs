//! Host statistics read from Linux's /proc: the process's resident memory,
//! CPU utilization from /proc/stat deltas, memory and swap use.
use crate::error::{Error, Result};
use std::fs;

/// Cumulative CPU time of the whole machine, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// All time: user, nice, system, idle, iowait, irq, softirq, steal.
    pub total: u64,
    /// Busy time: `total` less idle and iowait (as psutil counts it).
    pub busy: u64,
}

/// Reads the aggregate `cpu` line of /proc/stat.
pub fn read_cpu_times() -> Result<CpuTimes> {
    let text = fs::read_to_string("/proc/stat").map_err(|e| Error::io(format!("reading /proc/stat: {e}")))?;
    parse_cpu_times(&text)
}

/// Parses the aggregate `cpu` line of a /proc/stat text.
pub fn parse_cpu_times(text: &str) -> Result<CpuTimes> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| Error::format("/proc/stat has no aggregate \"cpu\" line"))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).take(8).map(|f| f.parse().unwrap_or(0)).collect();
    if fields.len() < 4 {
        return Err(Error::format(format!("/proc/stat cpu line is too short: {line:?}")));
    }
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Ok(CpuTimes { total, busy: total.saturating_sub(idle) })
}

/// Percent of CPU time spent busy between two samples (0 when no time
/// elapsed), clamped to `[0, 100]`.
pub fn cpu_percent(before: CpuTimes, after: CpuTimes) -> f64 {
    let total = after.total.saturating_sub(before.total);
    if total == 0 {
        return 0.0;
    }
    let busy = after.busy.saturating_sub(before.busy);
    (100.0 * busy as f64 / total as f64).clamp(0.0, 100.0)
}

/// The value in kB of a `Name:   123 kB` line of a /proc status-like text.
fn field_kb(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(':')))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Resident memory of this process in bytes (`VmRSS` of /proc/self/status).
pub fn resident_bytes() -> Result<u64> {
    let text =
        fs::read_to_string("/proc/self/status").map_err(|e| Error::io(format!("reading /proc/self/status: {e}")))?;
    field_kb(&text, "VmRSS").map(|kb| kb * 1024).ok_or_else(|| Error::format("/proc/self/status has no VmRSS line"))
}

/// Memory and swap use of the machine, in percent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryPercent {
    /// Used memory: `(MemTotal - MemAvailable) / MemTotal`, as psutil's
    /// `virtual_memory().percent`.
    pub memory: f64,
    /// Used swap: `(SwapTotal - SwapFree) / SwapTotal`, 0 without swap.
    pub swap: f64,
}

/// Reads /proc/meminfo.
pub fn memory_percent() -> Result<MemoryPercent> {
    let text = fs::read_to_string("/proc/meminfo").map_err(|e| Error::io(format!("reading /proc/meminfo: {e}")))?;
    parse_meminfo(&text)
}

/// Parses a /proc/meminfo text.
pub fn parse_meminfo(text: &str) -> Result<MemoryPercent> {
    let need = |name: &str| field_kb(text, name).ok_or_else(|| Error::format(format!("/proc/meminfo has no {name}")));
    let total = need("MemTotal")?;
    let available = field_kb(text, "MemAvailable").unwrap_or_else(|| field_kb(text, "MemFree").unwrap_or(0));
    let percent = |used: u64, total: u64| {
        if total == 0 {
            0.0
        } else {
            (100.0 * used as f64 / total as f64).clamp(0.0, 100.0)
        }
    };
    let swap_total = field_kb(text, "SwapTotal").unwrap_or(0);
    let swap_free = field_kb(text, "SwapFree").unwrap_or(0);
    Ok(MemoryPercent {
        memory: percent(total.saturating_sub(available), total),
        swap: percent(swap_total.saturating_sub(swap_free), swap_total),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_texts() {
        let t = parse_cpu_times("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(t, CpuTimes { total: 1000, busy: 150 });
        assert_eq!(cpu_percent(CpuTimes { total: 0, busy: 0 }, t), 15.0);
        assert_eq!(cpu_percent(t, t), 0.0);
        assert!(parse_cpu_times("intr 1 2").is_err());
        let m = parse_meminfo("MemTotal: 1000 kB\nMemAvailable: 250 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n").unwrap();
        assert_eq!(m, MemoryPercent { memory: 75.0, swap: 0.0 });
        let m = parse_meminfo("MemTotal: 1000 kB\nMemFree: 500 kB\nSwapTotal: 200 kB\nSwapFree: 150 kB\n").unwrap();
        assert_eq!(m, MemoryPercent { memory: 50.0, swap: 25.0 });
    }

    #[test]
    fn reads_this_machine() {
        assert!(resident_bytes().unwrap() > 1024 * 1024);
        let t = read_cpu_times().unwrap();
        assert!(t.total > 0 && t.busy <= t.total);
        let m = memory_percent().unwrap();
        assert!((0.0..=100.0).contains(&m.memory) && (0.0..=100.0).contains(&m.swap));
    }
}
