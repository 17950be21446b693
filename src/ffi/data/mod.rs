//! Datasets, loaders, batches and feature scaling (`fulmen/data.h`).
//! `gen_options` is generated from `src/ffi/options_table.rs`.
pub mod batch;
pub mod datasets;
#[rustfmt::skip]
pub mod gen_options;
pub mod scaler;
