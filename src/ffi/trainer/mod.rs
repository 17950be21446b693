//! The Trainer: options, precision plugins, strategies, runs, tuning
<<<<<<< HEAD
//! (`fulmen/trainer.h`). `gen_options` is generated from
//! `src/ffi/options_table.rs`.
#[rustfmt::skip]
pub mod gen_options;
=======
//! (`fulmen/trainer.h`).
pub mod after_run;
>>>>>>> after-run
pub mod loaders;
pub mod precision;
pub mod runs;
pub mod strategy;
pub mod tuner;
pub mod tuner_batch_size;
