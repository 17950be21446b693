//! Datasets, loaders, batches and feature scaling (`fulmen/data.h`).
pub mod batch;
pub mod datasets;
pub mod scaler;
