//! Strategies: how a run spreads over devices and processes (Lightning's
//! `strategy=`). The registry names them; [`StrategySpec`] is a parsed
//! choice with its settings; the trainer runs it.
mod registry;

pub use registry::{list, lookup, StrategyInfo, StrategyKind, StrategySpec};
