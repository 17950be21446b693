//! FSDP's settings (Lightning's `FSDPStrategy(...)` arguments that fulmen
//! has): how parameters are sharded, which modules become sharding units,
//! and what a checkpoint holds.
use crate::error::{Error, ErrorCode, Result};
use tch::Kind;

/// What is sharded across the ranks (torch's `ShardingStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardingStrategy {
    /// Parameters, gradients and optimizer state sharded; a unit's
    /// parameters are gathered for its forward, freed after it and
    /// gathered again for its backward.
    #[default]
    FullShard,
    /// Gradients and optimizer state sharded; parameters gathered for the
    /// forward stay until the backward ends (no second gather).
    ShardGradOp,
    /// Nothing sharded: every rank holds everything and gradients are
    /// averaged (DDP's numbers, FSDP's code path).
    NoShard,
    /// FULL_SHARD among the ranks of a node, each node a replica: the
    /// gathers and reduce-scatters stay within the node, and the gradient
    /// shards are averaged across the nodes.
    HybridShard,
    /// HYBRID_SHARD with SHARD_GRAD_OP within the node (torch's
    /// `_HYBRID_SHARD_ZERO2`).
    HybridShardZero2,
}

impl ShardingStrategy {
    /// Parses torch's names ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"),
    /// any case.
    pub fn parse(text: &str) -> Result<ShardingStrategy> {
        match text.trim().to_ascii_uppercase().as_str() {
            "FULL_SHARD" => Ok(ShardingStrategy::FullShard),
            "SHARD_GRAD_OP" => Ok(ShardingStrategy::ShardGradOp),
            "NO_SHARD" => Ok(ShardingStrategy::NoShard),
            "HYBRID_SHARD" => Ok(ShardingStrategy::HybridShard),
            "_HYBRID_SHARD_ZERO2" | "HYBRID_SHARD_ZERO2" => Ok(ShardingStrategy::HybridShardZero2),
            _ => Err(Error::invalid(format!(
                "sharding_strategy {text:?}: expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or \
                 _HYBRID_SHARD_ZERO2"
            ))),
        }
    }

    /// torch's name.
    pub fn name(self) -> &'static str {
        match self {
            ShardingStrategy::FullShard => "FULL_SHARD",
            ShardingStrategy::ShardGradOp => "SHARD_GRAD_OP",
            ShardingStrategy::NoShard => "NO_SHARD",
            ShardingStrategy::HybridShard => "HYBRID_SHARD",
            ShardingStrategy::HybridShardZero2 => "_HYBRID_SHARD_ZERO2",
        }
    }

    /// Whether a unit's gathered parameters are freed after its forward.
    pub fn reshards_after_forward(self) -> bool {
        matches!(self, ShardingStrategy::FullShard | ShardingStrategy::HybridShard)
    }

    /// Whether it shards within a node and replicates across nodes.
    pub fn is_hybrid(self) -> bool {
        matches!(self, ShardingStrategy::HybridShard | ShardingStrategy::HybridShardZero2)
    }
}

/// The settings of the `fsdp` strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct FsdpOptions {
    /// What is sharded.
    pub sharding_strategy: ShardingStrategy,
    /// Module class names whose every instance is a sharding unit
    /// (Lightning's `auto_wrap_policy={Block}`), as `Module::type_name`
    /// gives them ("Sequential", "TransformerEncoderLayer", "HostModule",
    /// ...).
    pub wrap_classes: Vec<String>,
    /// A module whose parameters not yet in a unit number at least this
    /// many becomes a unit (torch's `size_based_auto_wrap_policy`).
    pub min_num_params: Option<u64>,
    /// Module class names whose every instance below the root runs its
    /// forward as a checkpoint (Lightning's
    /// `activation_checkpointing_policy={Block}`): its activations are not
    /// kept, and backward runs the forward again.
    pub checkpoint_classes: Vec<String>,
    /// `state_dict_type="sharded"`: checkpoints are directories in
    /// `torch.distributed.checkpoint`'s format, each rank writing its
    /// shards; otherwise ("full") rank 0 writes one gathered `.ckpt`.
    pub sharded_checkpoints: bool,
    /// torch's `MixedPrecisionPolicy.param_dtype`: the dtype parameters
    /// are gathered in and the forward and backward compute in (each
    /// unit's floating inputs cast to it), the shards staying in theirs
    /// for the optimizers; `None`: the parameters' own.
    pub param_dtype: Option<Kind>,
    /// torch's `MixedPrecisionPolicy.reduce_dtype`: the dtype gradients
    /// are reduce-scattered in; `None`: `param_dtype`'s.
    pub reduce_dtype: Option<Kind>,
    /// torch FSDP's `forward_prefetch`: a unit's forward starts gathering
    /// the unit that ran after it in the last forward (off by default, as
    /// in torch).
    pub forward_prefetch: bool,
    /// torch FSDP's `backward_prefetch=BACKWARD_PRE`: a unit's backward
    /// starts gathering the unit whose backward comes next (on by default,
    /// as in torch).
    pub backward_prefetch: bool,
    /// FSDP1's `sync_module_states` (on by default, unlike torch): before
    /// sharding, the ranks check that they hold the same parameters and
    /// take rank 0's parameters and buffers. Off: no collective before
    /// the first gather, each rank must start from the same values (as
    /// FSDP2's `fully_shard`, which a mixed job with Python ranks needs).
    pub sync_module_states: bool,
    /// FSDP2's `set_reduce_scatter_unused_params(True)`, and FSDP2's
    /// reduce-scatters on the wire: a unit's reduce-scatter carries exactly
    /// the gradients of its parameters that have or require one (zeros
    /// where a rank has none; a frozen one without a gradient left out),
    /// so each of those gets a gradient, zeros where no rank had one; a
    /// unit reduces in backward only when its inputs required a gradient,
    /// the others (the root, units fed the data, units gathered before and
    /// without gradients now) at the end of the backward, as FSDP2's final
    /// callback. Off (the default): one more element per parameter says
    /// whether any rank had a gradient, so a parameter no rank had one for
    /// keeps none, as on one device, and every unit reduces as soon as its
    /// gradients are there.
    pub reduce_scatter_unused_params: bool,
    /// Lightning's `cpu_offload` (torch's `CPUOffloadPolicy`): the shards,
    /// their gradients and so the optimizer states live in the host's
    /// memory (the shards pinned under CUDA), the optimizers step there; each gather
    /// copies a unit's shards to the device, each reduce-scatter's result
    /// is copied back. Only the gathered parameters, the activations and
    /// the buffers take device memory.
    pub cpu_offload: bool,
}

impl Default for FsdpOptions {
    fn default() -> Self {
        FsdpOptions {
            sharding_strategy: ShardingStrategy::default(),
            wrap_classes: Vec::new(),
            min_num_params: None,
            checkpoint_classes: Vec::new(),
            sharded_checkpoints: false,
            param_dtype: None,
            reduce_dtype: None,
            forward_prefetch: false,
            backward_prefetch: true,
            sync_module_states: true,
            reduce_scatter_unused_params: false,
            cpu_offload: false,
        }
    }
}

/// A floating dtype by torch's or Lightning's name ("bf16", "bfloat16",
/// "16", "fp16", "float16", "half", "32", "fp32", "float32"), or `None`
/// for "none".
fn parse_dtype(key: &str, v: &str) -> Result<Option<Kind>> {
    let name = v.trim().trim_start_matches("torch.").to_ascii_lowercase();
    match name.as_str() {
        "" | "none" => Ok(None),
        "bf16" | "bfloat16" => Ok(Some(Kind::BFloat16)),
        "16" | "fp16" | "float16" | "half" => Ok(Some(Kind::Half)),
        "32" | "fp32" | "float32" | "float" => Ok(Some(Kind::Float)),
        _ => Err(Error::invalid(format!(
            "strategy option {key}: {v:?} is not a floating dtype (bf16, fp16, fp32 or none)"
        ))),
    }
}

impl FsdpOptions {
    /// Sets one setting from text; `Ok(false)` when `key` is not FSDP's.
    pub fn set(&mut self, key: &str, v: &str) -> Result<bool> {
        match key {
            "sharding_strategy" => self.sharding_strategy = ShardingStrategy::parse(v)?,
            "auto_wrap_policy" => self.wrap_classes = parse_class_list(key, v)?,
            "activation_checkpointing_policy" => self.checkpoint_classes = parse_class_list(key, v)?,
            "min_num_params" => {
                self.min_num_params = match v {
                    "" | "none" | "None" => None,
                    _ => Some(v.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                        Error::invalid(format!("strategy option {key}: {v:?} is not an integer >= 1 or \"none\""))
                    })?),
                }
            }
            "param_dtype" => self.param_dtype = parse_dtype(key, v)?,
            "forward_prefetch" => self.forward_prefetch = crate::parse::parse_bool(key, v)?,
            "sync_module_states" => self.sync_module_states = crate::parse::parse_bool(key, v)?,
            "reduce_scatter_unused_params" => self.reduce_scatter_unused_params = crate::parse::parse_bool(key, v)?,
            "cpu_offload" => self.cpu_offload = crate::parse::parse_bool(key, v)?,
            "backward_prefetch" => {
                self.backward_prefetch = match v.trim().to_ascii_uppercase().as_str() {
                    "BACKWARD_PRE" | "TRUE" | "1" => true,
                    "NONE" | "FALSE" | "0" | "" => false,
                    "BACKWARD_POST" => {
                        return Err(Error::new(
                            ErrorCode::Unsupported,
                            "strategy option backward_prefetch: BACKWARD_POST is not supported (a unit's gather \
                             starts in the pre-backward hook of the unit before it: BACKWARD_PRE, as FSDP2 does)",
                        ))
                    }
                    _ => {
                        return Err(Error::invalid(format!(
                            "strategy option {key}: {v:?} is not \"BACKWARD_PRE\" or \"none\""
                        )))
                    }
                }
            }
            "reduce_dtype" => self.reduce_dtype = parse_dtype(key, v)?,
            "state_dict_type" => match v {
                "full" => self.sharded_checkpoints = false,
                "sharded" => self.sharded_checkpoints = true,
                _ => {
                    return Err(Error::invalid(format!("strategy option {key}: {v:?} is not \"full\" or \"sharded\"")))
                }
            },
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Refuses settings that do not go together: a `param_dtype`,
    /// `reduce_dtype` or `cpu_offload` under NO_SHARD, where nothing is
    /// gathered or reduce-scattered to cast or to copy to the device.
    pub fn validate(&self) -> Result<()> {
        if self.sharding_strategy == ShardingStrategy::NoShard && self.cpu_offload {
            return Err(Error::new(
                ErrorCode::Unsupported,
                "strategy \"fsdp\": fsdp_cpu_offload with NO_SHARD (every rank computes on its whole parameters, \
                 nothing is gathered onto the device); use FULL_SHARD, SHARD_GRAD_OP or a hybrid sharding",
            ));
        }
        if self.sharding_strategy == ShardingStrategy::NoShard
            && (self.param_dtype.is_some() || self.reduce_dtype.is_some())
        {
            return Err(Error::new(
                ErrorCode::Unsupported,
                "strategy \"fsdp\": fsdp_param_dtype / fsdp_reduce_dtype with NO_SHARD (nothing is gathered or \
                 reduce-scattered to cast); use a precision such as bf16-mixed, or FULL_SHARD / SHARD_GRAD_OP",
            ));
        }
        Ok(())
    }
}

/// The keys [`FsdpOptions::set`] knows, for error messages.
pub const KEYS: &str = "sharding_strategy, auto_wrap_policy, min_num_params, activation_checkpointing_policy, \
                        state_dict_type, param_dtype, reduce_dtype, forward_prefetch, backward_prefetch, \
                        sync_module_states, reduce_scatter_unused_params, cpu_offload";

/// A comma-separated list of class names ("none" or "" for none).
fn parse_class_list(key: &str, v: &str) -> Result<Vec<String>> {
    if v.is_empty() || v.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let names: Vec<String> = v.split(',').map(|n| n.trim().to_owned()).collect();
    if names.len() > 64 {
        return Err(Error::invalid(format!("{key}: more than 64 class names")));
    }
    for n in &names {
        let ok = (1..=128).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(Error::invalid(format!("{key}: {n:?} is not a class name (1 to 128 letters, digits or _)")));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_refuse() {
        let mut o = FsdpOptions::default();
        assert_eq!(o.sharding_strategy, ShardingStrategy::FullShard);
        assert!(o.set("sharding_strategy", "shard_grad_op").unwrap());
        assert_eq!(o.sharding_strategy.name(), "SHARD_GRAD_OP");
        assert!(o.set("sharding_strategy", "HYBRID_SHARD").unwrap());
        assert!(o.sharding_strategy.is_hybrid() && o.sharding_strategy.reshards_after_forward());
        assert!(o.set("sharding_strategy", "_hybrid_shard_zero2").unwrap());
        assert!(o.sharding_strategy.is_hybrid() && !o.sharding_strategy.reshards_after_forward());
        // Sharded checkpoints of a hybrid sharding: the first node writes the rows.
        assert!(o.set("state_dict_type", "sharded").unwrap());
        o.validate().unwrap();
        assert!(o.set("state_dict_type", "full").unwrap());
        assert!(o.set("sharding_strategy", "FULL_SHARD").unwrap());
        assert!(o.set("sharding_strategy", "half").is_err());
        assert!(o.set("auto_wrap_policy", "Sequential, TransformerEncoderLayer").unwrap());
        assert_eq!(o.wrap_classes, ["Sequential", "TransformerEncoderLayer"]);
        assert!(o.set("auto_wrap_policy", "a.b").is_err());
        assert!(o.set("activation_checkpointing_policy", "TransformerEncoderLayer").unwrap());
        assert_eq!(o.checkpoint_classes, ["TransformerEncoderLayer"]);
        let e = o.set("activation_checkpointing_policy", "a b").unwrap_err();
        assert!(e.message.contains("activation_checkpointing_policy"), "{e}");
        assert!(o.set("min_num_params", "100").unwrap());
        assert_eq!(o.min_num_params, Some(100));
        assert!(o.set("min_num_params", "0").is_err());
        assert!(o.set("state_dict_type", "full").unwrap());
        assert!(o.set("state_dict_type", "sharded").unwrap());
        assert!(o.sharded_checkpoints);
        assert!(o.set("state_dict_type", "shards").is_err());
        assert!(o.set("param_dtype", "torch.bfloat16").unwrap());
        assert!(o.set("reduce_dtype", "fp32").unwrap());
        assert_eq!((o.param_dtype, o.reduce_dtype), (Some(Kind::BFloat16), Some(Kind::Float)));
        assert!(o.validate().is_ok());
        assert!(o.set("sharding_strategy", "NO_SHARD").unwrap());
        assert_eq!(o.validate().unwrap_err().code, ErrorCode::Unsupported);
        assert!(o.set("param_dtype", "none").unwrap());
        assert_eq!(o.param_dtype, None);
        assert_eq!(o.validate().unwrap_err().code, ErrorCode::Unsupported);
        assert!(o.set("reduce_dtype", "none").unwrap());
        assert!(o.validate().is_ok());
        assert!(o.set("reduce_dtype", "int8").unwrap_err().message.contains("reduce_dtype"));
        assert!(!o.set("bucket_cap_mb", "4").unwrap());
        // Prefetching: backward on and forward off by default, as in torch.
        let mut o = FsdpOptions::default();
        assert!(o.backward_prefetch && !o.forward_prefetch);
        assert!(o.set("forward_prefetch", "true").unwrap() && o.forward_prefetch);
        assert!(o.set("backward_prefetch", "none").unwrap() && !o.backward_prefetch);
        assert!(o.set("backward_prefetch", "BACKWARD_PRE").unwrap() && o.backward_prefetch);
        assert_eq!(o.set("backward_prefetch", "BACKWARD_POST").unwrap_err().code, ErrorCode::Unsupported);
        assert!(o.set("backward_prefetch", "sometimes").is_err());
        assert!(o.set("forward_prefetch", "sometimes").is_err());
        // FSDP2's wire: no synchronisation before sharding, no flags in
        // the reduce-scatter; off and on by default.
        assert!(o.sync_module_states && !o.reduce_scatter_unused_params);
        assert!(o.set("sync_module_states", "false").unwrap() && !o.sync_module_states);
        assert!(o.set("reduce_scatter_unused_params", "true").unwrap() && o.reduce_scatter_unused_params);
        assert!(o.set("sync_module_states", "maybe").unwrap_err().message.contains("sync_module_states"));
        // CPU offload: off by default; nothing to offload under NO_SHARD.
        assert!(!o.cpu_offload);
        assert!(o.set("cpu_offload", "true").unwrap() && o.cpu_offload);
        o.validate().unwrap();
        assert!(o.set("sharding_strategy", "NO_SHARD").unwrap());
        let e = o.validate().unwrap_err();
        assert!(e.code == ErrorCode::Unsupported && e.message.contains("cpu_offload"), "{e}");
        assert!(o.set("cpu_offload", "often").unwrap_err().message.contains("cpu_offload"));
    }
}
