//! What torch_xla's `xmp.spawn` prepares for each process on a TPU host
//! (`torch_xla/_internal/tpu.py`), without Python: the number of TPU chips
//! read from PCI (so `devices="auto"` is counted without starting the PJRT
//! client in the launching process), the host's TPU environment (from the
//! `TPU_*` variables with `TPU_SKIP_MDS_QUERY`, else from the Cloud TPU
//! metadata server), and the variables that give each local process its
//! own chip: `TPU_VISIBLE_CHIPS`, `TPU_PROCESS_BOUNDS`,
//! `TPU_CHIPS_PER_PROCESS_BOUNDS`, `TPU_PROCESS_PORT`,
//! `TPU_PROCESS_ADDRESSES` and `CLOUD_TPU_TASK_ID`. Like torch_xla's
//! `os.environ.setdefault`, a variable the user set is kept. As torch_xla's
//! `xmp.spawn`, one process per chip: on TPU v2 and v3, whose chips hold
//! two XLA devices each, a process trains on its chip's first device only
//! (torch_xla runs a thread per device there).
use crate::error::{Error, Result};
use std::path::Path;
use std::time::Duration;

/// Google's PCI vendor id.
const GOOGLE_PCI_VENDOR_ID: &str = "0x1ae0";
/// The PCI device ids of TPU chips (v2/v3, v4, v5e, v6e, and two test ids),
/// as torch_xla lists them.
const TPU_PCI_DEVICE_IDS: &[&str] = &["0x0027", "0x005e", "0x0063", "0x006f", "0x0056", "0x0062"];
/// The first port of the local processes' TPU clients (torch_xla's
/// `base_port`).
const BASE_PORT: u16 = 8476;
/// PCI functions read at most (a host has a few hundred).
const MAX_PCI_DEVICES: usize = 4096;

/// TPU chips attached through PCI under `pci_devices` (normally
/// `/sys/bus/pci/devices`): entries whose `vendor` is Google's and whose
/// `device` is a TPU's. 0 when the folder cannot be read.
pub fn num_available_chips(pci_devices: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(pci_devices) else { return 0 };
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    entries
        .take(MAX_PCI_DEVICES)
        .flatten()
        .filter(|e| {
            read(e.path().join("vendor")) == GOOGLE_PCI_VENDOR_ID
                && TPU_PCI_DEVICE_IDS.contains(&read(e.path().join("device")).as_str())
        })
        .count()
}

/// The XLA devices per TPU chip of a generation: 2 up to v3, else 1.
pub fn logical_cores_per_chip(version: u32) -> usize {
    if version <= 3 {
        2
    } else {
        1
    }
}

/// A TPU mesh shape, `x,y,z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeshShape(pub [u64; 3]);

impl MeshShape {
    /// Parses `"x,y,z"`.
    pub fn parse(text: &str) -> Result<MeshShape> {
        let dims: Vec<u64> = text
            .split(',')
            .map(|d| d.trim().parse::<u64>().ok().filter(|v| (1..=4096).contains(v)))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::invalid(format!("TPU mesh shape {text:?}: expected three counts \"x,y,z\"")))?;
        let dims: [u64; 3] =
            dims.try_into().map_err(|_| Error::invalid(format!("TPU mesh shape {text:?} should be of length 3")))?;
        Ok(MeshShape(dims))
    }

    /// The number of places in the mesh.
    pub fn size(self) -> u64 {
        self.0.iter().product()
    }

    /// The shapes multiplied dimension by dimension.
    fn times(self, other: MeshShape) -> MeshShape {
        MeshShape([self.0[0] * other.0[0], self.0[1] * other.0[1], self.0[2] * other.0[2]])
    }

    fn text(self) -> String {
        format!("{},{},{}", self.0[0], self.0[1], self.0[2])
    }
}

/// The host bounds of TPU v2 and v3 slices, which their metadata lacks.
fn v2_v3_host_bounds(accelerator_type: &str) -> Option<&'static str> {
    Some(match accelerator_type {
        "v2-8" | "v3-8" => "1,1,1",
        "v2-32" | "v3-32" => "2,2,1",
        "v3-64" => "2,4,1",
        "v2-128" | "v3-128" => "4,4,1",
        "v2-256" | "v3-256" => "4,8,1",
        "v2-512" | "v3-512" => "8,8,1",
        "v3-1024" => "8,16,1",
        "v3-2048" => "16,16,1",
        _ => return None,
    })
}

/// The host's TPU environment (torch_xla's `TpuEnv`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpuEnv {
    /// `ACCELERATOR_TYPE`, e.g. `v4-8`.
    pub accelerator_type: String,
    /// `TPU_PROCESS_BOUNDS` (v4 and later).
    pub process_bounds: Option<String>,
    /// `TPU_CHIPS_PER_PROCESS_BOUNDS` (v4 and later).
    pub chips_per_process_bounds: Option<String>,
    /// This host's index in the slice.
    pub worker_id: u64,
    /// The slice's hosts, in worker order.
    pub worker_hosts: Vec<String>,
}

/// The TPU generation of an accelerator type (`v4-8` is 4, `v5litepod-16`
/// is 5), as torch_xla's `version()`.
pub fn version(accelerator_type: &str) -> Result<u32> {
    let bad = || Error::invalid(format!("TPU accelerator type {accelerator_type:?} is not of the form vN...-M"));
    let rest = accelerator_type.strip_prefix('v').ok_or_else(bad)?;
    let (head, count) = rest.split_once('-').ok_or_else(bad)?;
    let mut chars = head.chars();
    let generation = chars.next().and_then(|c| c.to_digit(10)).ok_or_else(bad)?;
    let suffix: String = chars.collect();
    if suffix.len() > 7 || !suffix.chars().all(|c| c.is_ascii_alphabetic()) || count.parse::<u64>().is_err() {
        return Err(bad());
    }
    Ok(generation)
}

/// Where the host's TPU environment is read: a key of the metadata
/// server's `instance/attributes` (`tpu-env`, `worker-network-endpoints`).
pub trait Metadata {
    /// The attribute's text.
    fn get(&self, key: &str) -> Result<String>;
}

/// The Cloud TPU metadata server (`http://metadata.google.internal`).
pub struct MetadataServer {
    /// `http://host[:port]` of the server.
    pub url: String,
}

impl Default for MetadataServer {
    fn default() -> Self {
        MetadataServer { url: "http://metadata.google.internal".into() }
    }
}

impl Metadata for MetadataServer {
    fn get(&self, key: &str) -> Result<String> {
        use crate::loggers::mlflow::http;
        let endpoint = http::Endpoint::parse(&self.url)?;
        let path = format!("/computeMetadata/v1/instance/attributes/{}", http::encode(key, false));
        let headers = [("Metadata-Flavor".to_string(), "Google".to_string())];
        let r =
            http::send(&endpoint, "GET", &path, &headers, http::Body::Empty, Duration::from_secs(10)).map_err(|e| {
                e.context("reading the TPU's metadata (set TPU_SKIP_MDS_QUERY and the TPU_* variables instead)")
            })?;
        if r.status != 200 {
            return Err(Error::io(format!("TPU metadata {key}: the server answered HTTP {}", r.status)));
        }
        String::from_utf8(r.body).map_err(|_| Error::format(format!("TPU metadata {key} is not UTF-8")))
    }
}

/// The value of `key` in the metadata's `tpu-env` text: YAML lines
/// `KEY: 'value'` (quotes optional).
fn tpu_env_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
    })
}

/// The host's TPU environment: with `TPU_SKIP_MDS_QUERY` set, from
/// `TPU_ACCELERATOR_TYPE`, `TPU_PROCESS_BOUNDS` (or `TPU_HOST_BOUNDS`),
/// `TPU_CHIPS_PER_PROCESS_BOUNDS` (or `TPU_CHIPS_PER_HOST_BOUNDS`),
/// `CLOUD_TPU_TASK_ID` (or `TPU_WORKER_ID`) and `TPU_WORKER_HOSTNAMES`;
/// otherwise from `metadata`.
pub fn tpu_env(var: &dyn Fn(&str) -> Option<String>, metadata: &dyn Metadata) -> Result<TpuEnv> {
    let either = |a: &str, b: &str| var(a).or_else(|| var(b));
    let (accelerator_type, process_bounds, chips, worker, hosts) = if var("TPU_SKIP_MDS_QUERY").is_some() {
        (
            var("TPU_ACCELERATOR_TYPE"),
            either("TPU_PROCESS_BOUNDS", "TPU_HOST_BOUNDS"),
            either("TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS"),
            either("CLOUD_TPU_TASK_ID", "TPU_WORKER_ID"),
            var("TPU_WORKER_HOSTNAMES").map(|h| h.split(',').map(str::to_string).collect::<Vec<_>>()),
        )
    } else {
        let env = metadata.get("tpu-env")?;
        let endpoints = metadata.get("worker-network-endpoints")?;
        // "hostname:uid:ip,hostname:uid:ip,..."
        let ips = endpoints
            .split(',')
            .map(|w| w.split(':').nth(2).map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Error::format(format!("TPU worker-network-endpoints {endpoints:?}: expected host:uid:ip,..."))
            })?;
        (
            tpu_env_value(&env, "ACCELERATOR_TYPE"),
            tpu_env_value(&env, "TPU_PROCESS_BOUNDS"),
            tpu_env_value(&env, "TPU_CHIPS_PER_PROCESS_BOUNDS"),
            tpu_env_value(&env, "WORKER_ID"),
            Some(ips),
        )
    };
    let accelerator_type = accelerator_type.ok_or_else(|| Error::invalid("the TPU's accelerator type is unknown"))?;
    let worker = worker.ok_or_else(|| Error::invalid("the TPU's worker id is unknown (WORKER_ID, TPU_WORKER_ID)"))?;
    let worker_id =
        worker.trim().parse().map_err(|_| Error::invalid(format!("TPU worker id {worker:?} is not a number")))?;
    let mut worker_hosts: Vec<String> = hosts.unwrap_or_default().into_iter().filter(|h| !h.is_empty()).collect();
    if worker_hosts.len() <= 1 {
        worker_hosts = vec!["localhost".into()];
    }
    Ok(TpuEnv { accelerator_type, process_bounds, chips_per_process_bounds: chips, worker_id, worker_hosts })
}

/// The variables of local process `local_rank` of `local_world` on this
/// host (torch_xla's `configure_topology`): one chip per process.
pub fn topology_vars(env: &TpuEnv, local_rank: usize, local_world: usize) -> Result<Vec<(&'static str, String)>> {
    if local_rank >= local_world {
        return Err(Error::invalid(format!("TPU topology: local rank {local_rank} of {local_world} processes")));
    }
    let (bounds, chips_per_process) = if version(&env.accelerator_type)? >= 4 {
        let missing = |what: &str| Error::invalid(format!("the TPU environment has no {what}"));
        (
            MeshShape::parse(env.process_bounds.as_deref().ok_or_else(|| missing("TPU_PROCESS_BOUNDS"))?)?,
            MeshShape::parse(
                env.chips_per_process_bounds.as_deref().ok_or_else(|| missing("TPU_CHIPS_PER_PROCESS_BOUNDS"))?,
            )?,
        )
    } else {
        let host = v2_v3_host_bounds(&env.accelerator_type)
            .ok_or_else(|| Error::invalid(format!("no host bounds are known for TPU {}", env.accelerator_type)))?;
        (MeshShape::parse(host)?, MeshShape([2, 2, 1]))
    };
    let ports: Vec<u64> = (0..local_world as u64).map(|i| u64::from(BASE_PORT) + i).collect();
    let addresses = env
        .worker_hosts
        .iter()
        .map(|ip| ports.iter().map(|p| format!("{ip}:{p}")).collect::<Vec<_>>().join(","))
        .collect::<Vec<_>>()
        .join(",");
    let task = env.worker_id.saturating_mul(local_world as u64).saturating_add(local_rank as u64);
    Ok(vec![
        ("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1".into()),
        ("TPU_PROCESS_BOUNDS", bounds.times(chips_per_process).text()),
        ("CLOUD_TPU_TASK_ID", task.to_string()),
        ("TPU_PROCESS_ADDRESSES", addresses),
        ("TPU_VISIBLE_CHIPS", local_rank.to_string()),
        ("TPU_PROCESS_PORT", ports[local_rank].to_string()),
    ])
}

#[cfg(test)]
#[path = "tpu_topology_tests.rs"]
mod tests;
