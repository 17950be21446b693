//! Hooks and callbacks: Lightning's built-in callbacks and host callbacks
//! (`fulmen/callbacks.h`). `gen_options` is generated from
//! `src/ffi/options_table.rs`.
pub mod averaging;
pub mod finetuning;
#[rustfmt::skip]
pub mod gen_options;
pub mod hooks;
pub mod pruning;
pub mod spike;
pub mod standard;
pub mod swa;
pub mod training;
