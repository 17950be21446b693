//! Distributed jobs: joining, collectives, DDP, vendors' collectives
//! (`fulmen/distributed.h`).
pub mod collectives;
pub mod fsdp;
pub mod job;
pub mod tensor_parallel;
