//! Strategies: how a run spreads over devices and processes (Lightning's
//! `strategy=`). The registry names them; [`StrategySpec`] is a parsed
//! choice with its settings; each strategy's behaviour is one file behind
//! the `Strategy` trait (`strategy.rs`), which the trainer runs.
mod data_parallel;
mod ddp;
mod dp;
pub mod fsdp;
mod gathered_optimizers;
pub mod model_parallel;
mod registry;
mod single_device;
mod strategy;
pub(crate) mod xla;

pub(crate) use ddp::DdpStrategy;
pub(crate) use dp::DpStrategy;
pub(crate) use fsdp::FsdpStrategy;
pub(crate) use model_parallel::ModelParallelStrategy;
pub use registry::{list, lookup, StrategyInfo, StrategyKind, StrategySpec};
pub(crate) use single_device::SingleDeviceStrategy;
pub(crate) use strategy::{Sharded, Strategy};
