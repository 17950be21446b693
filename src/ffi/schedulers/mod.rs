//! Learning-rate schedulers (`fulmen/schedulers.h`).
pub mod host;
pub mod scheduler;
