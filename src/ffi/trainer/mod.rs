//! The Trainer: options, precision plugins, strategies, runs, tuning
//! (`fulmen/trainer.h`).
pub mod after_run;
pub mod loaders;
pub mod precision;
pub mod runs;
pub mod strategy;
pub mod tuner;
pub mod tuner_batch_size;
