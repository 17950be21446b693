//! Lightning's `WandbLogger` in W&B's offline mode: runs written as the
//! `.wandb` transaction logs `wandb sync` uploads.
pub mod logger;
pub mod records;
pub mod transaction_log;

#[cfg(test)]
mod tests;

pub use logger::{SharedWandbLogger, WandbLogger};
