//! Data: map-style datasets that hand out whole batches, CSV loading, subsets
//! and splits, a deterministic shuffling data loader.
mod csv;
mod dataset;
mod loader;
mod prefetch;
mod random_split;
pub mod rng;
pub mod sampler;
mod scaler;
mod scaling;
mod subset;
mod tensor_dataset;

pub use self::csv::{load_csv, CsvOptions};
pub use self::dataset::Dataset;
pub use self::loader::{DataLoader, DataLoaderOptions, MAX_BATCH_SIZE, MAX_PREFETCH_FACTOR, MAX_WORKERS};
pub use self::random_split::{random_split, split_lengths, MAX_RANDOM_SPLIT, MAX_SPLIT_PARTS};
pub use self::rng::{permutation, SplitMix64};
pub use self::scaler::{ScaledDataset, Scaler, ScalerKind};
pub use self::scaling::Scaling;
pub use self::subset::{split_every, Subset};
pub use self::tensor_dataset::TensorDataset;
