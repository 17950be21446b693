//! Hooks and callbacks: Lightning's built-in callbacks and host callbacks
//! (`fulmen/callbacks.h`).
pub mod averaging;
pub mod finetuning;
pub mod hooks;
pub mod prediction;
pub mod pruning;
pub mod spike;
pub mod standard;
pub mod swa;
pub mod training;
