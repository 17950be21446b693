//! Learning-rate schedulers (`fulmen/schedulers.h`). `gen_options` is
//! generated from `src/ffi/options_table.rs`.
#[rustfmt::skip]
pub mod gen_options;
pub mod host;
pub mod scheduler;
