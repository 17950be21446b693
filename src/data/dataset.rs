//! The map-style dataset trait.
use tch::Tensor;

use crate::error::Result;

/// A map-style dataset that hands out whole batches.
pub trait Dataset: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;

    /// Whether the dataset holds no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The samples at `indices` stacked into one batch: a Vec of tensors whose
    /// first dim is `indices.len()` (e.g. `[features, labels]`).
    fn get_batch(&self, indices: &[i64]) -> Result<Vec<Tensor>>;

    /// Whether `get_batch` may run on a loader's worker threads (false for
    /// a host dataset that did not say so).
    fn reads_on_any_thread(&self) -> bool {
        true
    }
}
