//! Cluster environments: who launched this process and where its ranks
//! meet (Lightning's TorchElastic, SLURM and Lightning environments).
use crate::error::{Error, Result};

/// Which launcher set the environment up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvKind {
    /// torchrun / torch.distributed.run (`RANK`, `GROUP_RANK`,
    /// `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `WORLD_SIZE`).
    TorchElastic,
    /// A SLURM job step (`SLURM_NTASKS`, `SLURM_PROCID`, ...).
    Slurm,
    /// torch's `env://` contract: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
    /// `MASTER_PORT` set by whoever started the processes, no `LOCAL_RANK`.
    TorchEnv,
    /// fulmen's own launcher, or a user who set `LOCAL_RANK`, `NODE_RANK`,
    /// `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` by hand.
    Lightning,
}

impl EnvKind {
    /// The environment's name as Lightning calls it.
    pub fn name(self) -> &'static str {
        match self {
            EnvKind::TorchElastic => "torchelastic",
            EnvKind::Slurm => "slurm",
            EnvKind::TorchEnv => "env://",
            EnvKind::Lightning => "lightning",
        }
    }
}

/// This process's place in a distributed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEnv {
    /// The launcher.
    pub kind: EnvKind,
    /// Global rank.
    pub rank: usize,
    /// Rank within the node (selects the device).
    pub local_rank: usize,
    /// Index of the node.
    pub node_rank: usize,
    /// Number of processes in the job.
    pub world_size: usize,
    /// Address of rank 0's store.
    pub master_addr: String,
    /// Port of rank 0's store; 0 means "pick a free one" (fulmen's own
    /// launcher, before it starts the other ranks).
    pub master_port: u16,
    /// Whether every rank is a store client (torchrun's agent store).
    pub all_clients: bool,
    /// Whether the processes were started by someone else (torchrun, SLURM,
    /// or fulmen's launcher in a child); otherwise fulmen starts them.
    pub external: bool,
}

fn parse_num<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value.trim().parse().map_err(|_| Error::invalid(format!("environment variable {name}={value:?} is not a number")))
}

/// Reads the environment through `get` (the process environment in
/// [`ClusterEnv::detect`]): torchrun first, then SLURM, else Lightning's
/// environment with `devices_per_node` processes on each of `num_nodes`.
pub fn detect_with(
    get: &dyn Fn(&str) -> Option<String>,
    devices_per_node: usize,
    num_nodes: usize,
) -> Result<ClusterEnv> {
    let num = |name: &str, default: usize| -> Result<usize> {
        match get(name) {
            Some(v) if !v.trim().is_empty() => parse_num(name, &v),
            _ => Ok(default),
        }
    };
    let port = |default: u16| -> Result<u16> {
        match get("MASTER_PORT") {
            Some(v) if !v.trim().is_empty() => parse_num("MASTER_PORT", &v),
            _ => Ok(default),
        }
    };
    let addr = || get("MASTER_ADDR").filter(|v| !v.trim().is_empty()).unwrap_or_else(|| "127.0.0.1".to_owned());
    let elastic = ["RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"].iter().all(|k| get(k).is_some());
    let env = if elastic {
        ClusterEnv {
            kind: EnvKind::TorchElastic,
            rank: num("RANK", 0)?,
            local_rank: num("LOCAL_RANK", 0)?,
            node_rank: num("GROUP_RANK", 0)?,
            world_size: num("WORLD_SIZE", 1)?,
            master_addr: addr(),
            master_port: port(29500)?,
            all_clients: get("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v == "True" || v == "1"),
            external: true,
        }
    } else if get("SLURM_NTASKS").is_some()
        && !matches!(get("SLURM_JOB_NAME").as_deref(), Some("bash") | Some("interactive"))
    {
        let job = get("SLURM_JOB_ID").unwrap_or_default();
        let digits: String = job.chars().filter(char::is_ascii_digit).collect();
        let tail = &digits[digits.len().saturating_sub(4)..];
        let default_port = 15000 + tail.parse::<u16>().unwrap_or(0);
        let master_addr = match get("MASTER_ADDR").filter(|v| !v.is_empty()) {
            Some(a) => a,
            None => first_slurm_host(&get("SLURM_NODELIST").or_else(|| get("SLURM_JOB_NODELIST")).unwrap_or_default())
                .unwrap_or_else(|| "127.0.0.1".to_owned()),
        };
        validate_slurm(get, devices_per_node, num_nodes)?;
        ClusterEnv {
            kind: EnvKind::Slurm,
            rank: num("SLURM_PROCID", 0)?,
            local_rank: num("SLURM_LOCALID", 0)?,
            node_rank: num("SLURM_NODEID", 0)?,
            world_size: num("SLURM_NTASKS", 1)?,
            master_addr,
            master_port: port(default_port)?,
            all_clients: false,
            external: true,
        }
    } else if get("LOCAL_RANK").is_none() && get("RANK").is_some() && get("WORLD_SIZE").is_some() {
        // torch.distributed's env:// variables: every process was started
        // by someone else; ranks of a node are numbered consecutively.
        let rank = num("RANK", 0)?;
        let per_node = devices_per_node.max(1);
        ClusterEnv {
            kind: EnvKind::TorchEnv,
            rank,
            local_rank: rank % per_node,
            node_rank: rank / per_node,
            world_size: num("WORLD_SIZE", 1)?,
            master_addr: addr(),
            // Required, as torch's env:// rendezvous requires it (0: the
            // join reports it missing).
            master_port: port(0)?,
            all_clients: false,
            external: true,
        }
    } else {
        let external = get("LOCAL_RANK").is_some();
        let local_rank = num("LOCAL_RANK", 0)?;
        let node_rank = num("NODE_RANK", num("GROUP_RANK", 0)?)?;
        let world_size = match get("WORLD_SIZE") {
            Some(v) if external => parse_num("WORLD_SIZE", &v)?,
            _ => devices_per_node * num_nodes,
        };
        let rank = node_rank * devices_per_node + local_rank;
        // A RANK that disagrees would have two processes take one rank and
        // wait for the missing one until the job's timeout.
        if let Some(given) = get("RANK") {
            if parse_num::<usize>("RANK", &given)? != rank {
                return Err(Error::invalid(format!(
                    "RANK={given}, but NODE_RANK {node_rank} x {devices_per_node} devices per node + LOCAL_RANK \
                     {local_rank} gives rank {rank}: set devices to the processes per node (or GROUP_RANK and \
                     LOCAL_WORLD_SIZE, as torchrun does)"
                )));
            }
        }
        ClusterEnv {
            kind: EnvKind::Lightning,
            rank,
            local_rank,
            node_rank,
            world_size,
            master_addr: addr(),
            master_port: port(0)?,
            all_clients: false,
            external,
        }
    };
    if env.world_size == 0 || env.rank >= env.world_size {
        return Err(Error::invalid(format!(
            "{} environment: rank {} does not fit a world of {} processes",
            env.kind.name(),
            env.rank,
            env.world_size
        )));
    }
    Ok(env)
}

/// Lightning's SLURM checks: `--ntasks` without `--ntasks-per-node`, and
/// `devices` / `num_nodes` that disagree with the job's tasks per node and
/// nodes, are errors.
fn validate_slurm(get: &dyn Fn(&str) -> Option<String>, devices: usize, nodes: usize) -> Result<()> {
    let ntasks: usize = match get("SLURM_NTASKS") {
        Some(v) => parse_num("SLURM_NTASKS", &v)?,
        None => 1,
    };
    let per_node = get("SLURM_NTASKS_PER_NODE");
    if ntasks > 1 && per_node.is_none() {
        return Err(Error::invalid(format!(
            "You set `--ntasks={ntasks}` in your SLURM bash script, but this variable is not supported. \
             HINT: Use `--ntasks-per-node={ntasks}` instead."
        )));
    }
    if let Some(v) = per_node {
        // SLURM may write "4(x2)" for uneven layouts: the first count.
        let first: String = v.chars().take_while(char::is_ascii_digit).collect();
        let n: usize = parse_num("SLURM_NTASKS_PER_NODE", &first)?;
        if n != devices {
            return Err(Error::invalid(format!(
                "You set `devices={devices}`, but the number of tasks per node configured in SLURM \
                 `--ntasks-per-node={v}` does not match. HINT: Set `devices={n}`."
            )));
        }
    }
    if let Some(v) = get("SLURM_NNODES") {
        let n: usize = parse_num("SLURM_NNODES", &v)?;
        if n != nodes {
            return Err(Error::invalid(format!(
                "You set `num_nodes={nodes}`, but the number of nodes configured in SLURM `--nodes={v}` does not \
                 match. HINT: Set `num_nodes={n}`."
            )));
        }
    }
    Ok(())
}

impl ClusterEnv {
    /// Reads the process environment (see [`detect_with`]).
    pub fn detect(devices_per_node: usize, num_nodes: usize) -> Result<ClusterEnv> {
        detect_with(&|k| std::env::var(k).ok(), devices_per_node, num_nodes)
    }

    /// Whether a launcher already started this job's processes, as seen
    /// from the process environment (torchrun, SLURM, or `LOCAL_RANK`).
    pub fn launched_externally() -> bool {
        detect_with(&|k| std::env::var(k).ok(), 1, 1).map(|e| e.external).unwrap_or(true)
    }
}

/// The first host of a SLURM node list: "node[01-04,7],gpu2" -> "node01".
pub fn first_slurm_host(list: &str) -> Option<String> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    // The first entry ends at a comma outside brackets.
    let mut depth = 0;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let first = &list[..end];
    match first.find('[') {
        None => Some(first.to_owned()),
        Some(open) => {
            let inner = first[open + 1..].trim_end_matches(']');
            let range = inner.split(',').next()?;
            let start = range.split('-').next()?;
            Some(format!("{}{}", &first[..open], start))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)], devices: usize, nodes: usize) -> Result<ClusterEnv> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        detect_with(&|k| map.get(k).cloned(), devices, nodes)
    }

    #[test]
    fn torchrun_variables() {
        let e = env(
            &[
                ("RANK", "3"),
                ("GROUP_RANK", "1"),
                ("LOCAL_RANK", "1"),
                ("LOCAL_WORLD_SIZE", "2"),
                ("WORLD_SIZE", "4"),
                ("MASTER_ADDR", "10.0.0.1"),
                ("MASTER_PORT", "29400"),
                ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ],
            1,
            1,
        )
        .unwrap();
        assert_eq!(e.kind, EnvKind::TorchElastic);
        assert_eq!((e.rank, e.local_rank, e.node_rank, e.world_size), (3, 1, 1, 4));
        assert_eq!((e.master_addr.as_str(), e.master_port), ("10.0.0.1", 29400));
        assert!(e.all_clients && e.external);
    }

    #[test]
    fn slurm_variables() {
        let e = env(
            &[
                ("SLURM_NTASKS", "8"),
                ("SLURM_NTASKS_PER_NODE", "4"),
                ("SLURM_NNODES", "2"),
                ("SLURM_PROCID", "5"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_NODEID", "2"),
                ("SLURM_JOB_ID", "1234567"),
                ("SLURM_NODELIST", "gpu[07-10,12],cpu1"),
            ],
            4,
            2,
        )
        .unwrap();
        assert_eq!(e.kind, EnvKind::Slurm);
        assert_eq!((e.rank, e.local_rank, e.node_rank, e.world_size), (5, 1, 2, 8));
        assert_eq!(e.master_addr, "gpu07");
        assert_eq!(e.master_port, 15000 + 4567);
        // An interactive allocation is not a job step.
        let e = env(&[("SLURM_NTASKS", "8"), ("SLURM_JOB_NAME", "bash")], 2, 1).unwrap();
        assert_eq!(e.kind, EnvKind::Lightning);
    }

    #[test]
    fn slurm_layouts_must_match_devices_and_nodes() {
        let slurm = [("SLURM_NTASKS", "4"), ("SLURM_NTASKS_PER_NODE", "2"), ("SLURM_NNODES", "2")];
        assert!(env(&slurm, 2, 2).is_ok());
        let err = env(&slurm, 3, 2).unwrap_err();
        assert!(err.message.contains("`--ntasks-per-node=2` does not match. HINT: Set `devices=2`"), "{}", err.message);
        let err = env(&slurm, 2, 1).unwrap_err();
        assert!(err.message.contains("HINT: Set `num_nodes=2`"), "{}", err.message);
        let err = env(&[("SLURM_NTASKS", "4")], 4, 1).unwrap_err();
        assert!(err.message.contains("Use `--ntasks-per-node=4` instead"), "{}", err.message);
    }

    #[test]
    fn torch_env_contract_without_local_rank() {
        let vars = [("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "10.1.2.3"), ("MASTER_PORT", "29411")];
        let e = env(&vars, 1, 1).unwrap();
        assert_eq!(e.kind, EnvKind::TorchEnv);
        assert_eq!((e.rank, e.local_rank, e.node_rank, e.world_size), (1, 0, 1, 2));
        assert_eq!((e.master_addr.as_str(), e.master_port), ("10.1.2.3", 29411));
        assert!(e.external);
        let e = env(&[("RANK", "3"), ("WORLD_SIZE", "4"), ("MASTER_PORT", "1")], 2, 2).unwrap();
        assert_eq!((e.local_rank, e.node_rank), (1, 1));
        assert!(env(&[("RANK", "2"), ("WORLD_SIZE", "2")], 1, 1).is_err());
    }

    #[test]
    fn lightning_environment() {
        let e = env(&[], 3, 1).unwrap();
        assert_eq!((e.kind, e.rank, e.world_size, e.external), (EnvKind::Lightning, 0, 3, false));
        assert_eq!((e.master_addr.as_str(), e.master_port), ("127.0.0.1", 0));
        let e = env(&[("LOCAL_RANK", "2"), ("WORLD_SIZE", "3"), ("MASTER_PORT", "4000")], 3, 1).unwrap();
        assert_eq!((e.rank, e.local_rank, e.external, e.master_port), (2, 2, true, 4000));
        let e = env(&[("LOCAL_RANK", "1"), ("NODE_RANK", "1")], 2, 2).unwrap();
        assert_eq!((e.rank, e.world_size), (3, 4));
        // A RANK that agrees is fine; one that does not is refused at once.
        let e = env(&[("RANK", "3"), ("LOCAL_RANK", "1"), ("NODE_RANK", "1"), ("WORLD_SIZE", "4")], 2, 2).unwrap();
        assert_eq!(e.rank, 3);
        let e = env(&[("RANK", "3"), ("LOCAL_RANK", "1"), ("NODE_RANK", "1"), ("WORLD_SIZE", "4")], 1, 2).unwrap_err();
        assert!(e.message.contains("RANK=3") && e.message.contains("gives rank 2"), "{e}");
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(env(&[("LOCAL_RANK", "x")], 2, 1).is_err());
        assert!(env(&[("LOCAL_RANK", "5"), ("WORLD_SIZE", "2")], 2, 1).is_err());
        assert!(env(&[("MASTER_PORT", "99999")], 2, 1).is_err());
    }

    #[test]
    fn slurm_host_lists() {
        assert_eq!(first_slurm_host("node1").as_deref(), Some("node1"));
        assert_eq!(first_slurm_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_slurm_host("n[3-5]").as_deref(), Some("n3"));
        assert_eq!(first_slurm_host("n[9,11]x").as_deref(), Some("n9"));
        assert_eq!(first_slurm_host(""), None);
    }
}
