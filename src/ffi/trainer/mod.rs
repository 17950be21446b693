//! The Trainer: options, precision plugins, strategies, runs, tuning
//! (`fulmen/trainer.h`). `gen_options` is generated from
//! `src/ffi/options_table.rs`.
pub mod checkpoint_io;
pub mod datamodule_runs;
pub mod fabric;
#[rustfmt::skip]
pub mod gen_options;
pub mod loaders;
pub mod precision;
pub mod runs;
pub mod strategy;
pub mod tuner;
pub mod tuner_batch_size;
