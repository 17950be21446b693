//! The strategy registry: Lightning's names, what each does, and the
//! settings a strategy handle carries.
use crate::distributed::{DdpOptions, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};
use crate::parse::parse_bool;
use std::time::Duration;

/// What a strategy does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    /// Picks `ddp` when more than one device (or an external launcher's
    /// world of several processes) is asked for, else `single_device`.
    Auto,
    /// One process on one device.
    SingleDevice,
    /// Distributed data parallel: one process per device, gradients
    /// averaged by c10d's Reducer during backward.
    Ddp,
    /// DataParallel: one process, the model replicated on every device of
    /// the accelerator, each batch split along dimension 0, the losses
    /// averaged and predictions gathered on the first device.
    Dp,
    /// One process per XLA device (Lightning's `XLAStrategy`), started as
    /// for DDP; needs the xla accelerator.
    Xla,
    /// Fully sharded data parallel: one process per device as for DDP,
    /// parameters, gradients and optimizer state sharded across the ranks.
    Fsdp,
    /// Tensor parallelism (Lightning's `ModelParallelStrategy`): one
    /// process per device, the planned layers split across every rank.
    ModelParallel,
}

/// A registry entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrategyInfo {
    /// The registered name.
    pub name: &'static str,
    /// One line on what it does.
    pub description: &'static str,
}

struct Entry {
    name: &'static str,
    description: &'static str,
    kind: StrategyKind,
    find_unused: bool,
}

const ENTRIES: &[Entry] = &[
    Entry {
        name: "auto",
        description: "ddp when several devices or processes are asked for, else single_device",
        kind: StrategyKind::Auto,
        find_unused: false,
    },
    Entry {
        name: "single_device",
        description: "one process on one device",
        kind: StrategyKind::SingleDevice,
        find_unused: false,
    },
    Entry {
        name: "ddp",
        description: "one process per device (started by torchrun, SLURM or fulmen itself), \
                      gradients averaged over c10d (gloo on CPU, nccl on CUDA)",
        kind: StrategyKind::Ddp,
        find_unused: false,
    },
    Entry {
        name: "ddp_spawn",
        description: "the same as ddp (Lightning's name for a launch by the program itself; \
                      fulmen always launches by re-executing the host program)",
        kind: StrategyKind::Ddp,
        find_unused: false,
    },
    Entry {
        name: "ddp_find_unused_parameters_true",
        description: "ddp that tolerates parameters the loss does not reach",
        kind: StrategyKind::Ddp,
        find_unused: true,
    },
    Entry {
        name: "ddp_find_unused_parameters_false",
        description: "ddp (unused parameters are an error)",
        kind: StrategyKind::Ddp,
        find_unused: false,
    },
    Entry {
        name: "dp",
        description: "one process: the model replicated on every device, each batch split along dimension 0, \
                      losses averaged and predictions gathered on the first device",
        kind: StrategyKind::Dp,
        find_unused: false,
    },
    Entry {
        name: "fsdp",
        description: "one process per device as for ddp, parameters, gradients and optimizer state sharded across \
                      the ranks in units chosen by the wrap policy (torch's FSDP2 layout)",
        kind: StrategyKind::Fsdp,
        find_unused: false,
    },
    Entry {
        name: "model_parallel",
        description: "one process per device as for ddp, the layers of tensor_parallel_plan split across every rank \
                      (torch's parallelize_module with ColwiseParallel / RowwiseParallel), every rank on the same \
                      batches",
        kind: StrategyKind::ModelParallel,
        find_unused: false,
    },
    Entry {
        name: "xla",
        description: "one process per XLA device, started as for ddp, gradients averaged after backward (through \
                      gloo on host copies); needs the xla accelerator",
        kind: StrategyKind::Xla,
        find_unused: false,
    },
    Entry {
        name: "single_xla",
        description: "one process on one XLA device (Lightning's SingleDeviceXLAStrategy); needs the xla accelerator",
        kind: StrategyKind::SingleDevice,
        find_unused: false,
    },
];

/// Every registered strategy.
pub fn list() -> Vec<StrategyInfo> {
    ENTRIES.iter().map(|e| StrategyInfo { name: e.name, description: e.description }).collect()
}

/// A strategy with its settings (what a `fulmen_strategy` handle holds).
#[derive(Debug, Clone, PartialEq)]
pub struct StrategySpec {
    /// The registered name it was made from.
    pub name: String,
    /// What it does.
    pub kind: StrategyKind,
    /// DDP's settings (find_unused_parameters, bucket_cap_mb,
    /// broadcast_buffers).
    pub ddp: DdpOptions,
    /// "gloo" or "nccl"; `None` picks by device.
    pub process_group_backend: Option<String>,
    /// Bound on the rendezvous and every collective (Lightning: 30 min).
    pub timeout: Duration,
    /// Number of nodes (machines).
    pub num_nodes: usize,
    /// FSDP's settings (sharding strategy, wrap policy).
    pub fsdp: super::fsdp::FsdpOptions,
    /// model_parallel's settings (the plan, the sizes).
    pub model_parallel: super::model_parallel::ModelParallelOptions,
}

/// The strategy registered as `name` with default settings.
pub fn lookup(name: &str) -> Result<StrategySpec> {
    let key = name.trim().to_ascii_lowercase();
    let entry = ENTRIES.iter().find(|e| e.name == key).ok_or_else(|| {
        let known: Vec<&str> = ENTRIES.iter().map(|e| e.name).collect();
        let hint = match key.as_str() {
            "deepspeed" => format!(" ({key} is not available in this build)"),
            _ => String::new(),
        };
        Error::invalid(format!("unknown strategy {name:?}{hint}; registered: {}", known.join(", ")))
    })?;
    Ok(StrategySpec {
        name: entry.name.to_owned(),
        kind: entry.kind,
        ddp: DdpOptions { find_unused_parameters: entry.find_unused, ..DdpOptions::default() },
        process_group_backend: None,
        timeout: DEFAULT_TIMEOUT,
        num_nodes: 1,
        fsdp: Default::default(),
        model_parallel: Default::default(),
    })
}

impl StrategySpec {
    /// Whether this strategy's checkpoints are sharded directories
    /// (FSDP's `state_dict_type` "sharded", model_parallel's
    /// `save_distributed_checkpoint`).
    pub fn writes_sharded_checkpoints(&self) -> bool {
        match self.kind {
            StrategyKind::Fsdp => self.fsdp.sharded_checkpoints,
            StrategyKind::ModelParallel => self.model_parallel.save_distributed_checkpoint,
            _ => false,
        }
    }

    /// Sets one setting from text: `find_unused_parameters` and
    /// `broadcast_buffers` (booleans), `process_group_backend` ("gloo",
    /// "nccl", "none", or a collectives hook's name), `timeout` (seconds or "DD:HH:MM:SS"), `bucket_cap_mb` (MiB, or
    /// "none" for torch's default), `num_nodes`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let v = value.trim();
        let number = || -> Result<f64> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| Error::invalid(format!("strategy option {key}: {v:?} is not a positive number")))
        };
        match key {
            "find_unused_parameters" => self.ddp.find_unused_parameters = parse_bool(key, v)?,
            "broadcast_buffers" => self.ddp.broadcast_buffers = parse_bool(key, v)?,
            "sync_batchnorm" => self.ddp.sync_batchnorm = parse_bool(key, v)?,
            "process_group_backend" => {
                // A name of an accelerator's collectives hook is checked when
                // the job forms.
                let hook_like = (1..=64).contains(&v.len())
                    && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
                self.process_group_backend = match v {
                    "none" | "" => None,
                    "mpi" | "ucc" | "xccl" => {
                        return Err(Error::invalid(format!(
                            "strategy option {key}: fulmen builds no {v:?} backend (gloo, nccl, or an accelerator's \
                             collectives hook)"
                        )))
                    }
                    _ if hook_like => Some(v.to_owned()),
                    _ => {
                        return Err(Error::invalid(format!(
                            "strategy option {key}: {v:?} is not \"gloo\", \"nccl\", \"none\" or the name of an \
                             accelerator's collectives hook (1 to 64 characters of [a-z0-9_-])"
                        )))
                    }
                }
            }
            "timeout" => {
                let d = crate::callbacks::timer::parse_duration(v)
                    .map_err(|e| e.context(format!("strategy option {key}")))?;
                if d.is_zero() {
                    return Err(Error::invalid(format!("strategy option {key}: the timeout must be positive")));
                }
                self.timeout = d
            }
            "bucket_cap_mb" if v.eq_ignore_ascii_case("none") => self.ddp.bucket_cap_mb = None,
            "bucket_cap_mb" => self.ddp.bucket_cap_mb = Some(number()?),
            "num_nodes" => {
                self.num_nodes = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| Error::invalid(format!("strategy option {key}: {v:?} is not an integer >= 1")))?
            }
            _ if self.fsdp.set(key, v).map_err(|e| e.context(format!("strategy option {key}")))? => {}
            _ if self.model_parallel.set(key, v).map_err(|e| e.context(format!("strategy option {key}")))? => {}
            _ => {
                return Err(Error::invalid(format!(
                    "unknown strategy option {key:?}; known: find_unused_parameters, broadcast_buffers, \
                     sync_batchnorm, process_group_backend, timeout, bucket_cap_mb, num_nodes, {}, {}",
                    super::fsdp::KEYS,
                    super::model_parallel::KEYS
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn names_and_settings() {
        assert!(list().iter().any(|i| i.name == "ddp"));
        let s = lookup("DDP_find_unused_parameters_true").unwrap();
        assert_eq!((s.kind, s.ddp.find_unused_parameters), (StrategyKind::Ddp, true));
        assert_eq!(lookup("auto").unwrap().kind, StrategyKind::Auto);
        assert_eq!(lookup("dp").unwrap().kind, StrategyKind::Dp);
        assert_eq!(lookup("xla").unwrap().kind, StrategyKind::Xla);
        assert_eq!(lookup("fsdp").unwrap().kind, StrategyKind::Fsdp);
        assert_eq!(lookup("model_parallel").unwrap().kind, StrategyKind::ModelParallel);
        let e = lookup("deepspeed").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(e.message.contains("not available"), "{e}");
        let mut s = lookup("ddp").unwrap();
        s.set("timeout", "2.5").unwrap();
        s.set("process_group_backend", "gloo").unwrap();
        s.set("num_nodes", "2").unwrap();
        assert_eq!(
            (s.timeout, s.process_group_backend.as_deref(), s.num_nodes),
            (Duration::from_millis(2500), Some("gloo"), 2)
        );
        assert!(s.set("timeout", "-1").is_err());
        assert!(s.set("timeout", "1e300").is_err());
        assert!(s.set("num_nodes", "0").is_err());
        assert!(s.set("colour", "red").is_err());
        assert_eq!(s.timeout, Duration::from_millis(2500));
        // The bucket cap remembers whether it was set (torch's first
        // bucket depends on it); booleans parse as trainer options do.
        assert_eq!(s.ddp.bucket_cap_mb, None);
        s.set("bucket_cap_mb", "4").unwrap();
        assert_eq!(s.ddp.bucket_cap_mb, Some(4.0));
        s.set("bucket_cap_mb", "None").unwrap();
        assert_eq!(s.ddp.bucket_cap_mb, None);
        s.set("find_unused_parameters", "yes").unwrap();
        s.set("broadcast_buffers", "off").unwrap();
        assert!(s.ddp.find_unused_parameters && !s.ddp.broadcast_buffers);
        assert!(s.set("broadcast_buffers", "maybe").is_err());
    }
}
