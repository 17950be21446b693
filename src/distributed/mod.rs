//! Distributed training on libtorch's c10d: process groups (Gloo on CPU,
//! NCCL on CUDA, a custom accelerator's collectives on its devices), DDP's
//! Reducer, cluster environments (torchrun, SLURM, Lightning) and fulmen's
//! own launcher.
pub mod collectives;
pub mod context;
pub mod ddp;
pub mod env;
mod failures;
pub mod group;
pub mod launcher;
pub mod reducer;

pub use collectives::{AbortProbe, CommGroup, DeviceBackend, DeviceCollectives, KeyStore};
pub use context::{
    abort, abort_with_reason, current, explain_backward, join, shutdown, DistContext, JoinOptions, DEFAULT_TIMEOUT,
};
pub use ddp::{Ddp, DdpOptions};
pub use env::{ClusterEnv, EnvKind};
pub use group::{gloo_available, nccl_available, ProcessGroup, ReduceOp, Rendezvous};
pub use reducer::{backward_armed, Reducer};
