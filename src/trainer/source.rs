//! Where batches come from: anything that yields the batches of an epoch.
use crate::data::DataLoader;
use crate::error::Result;
use tch::Tensor;

/// Iterator over the batches of one epoch.
pub type BatchIter<'a> = Box<dyn Iterator<Item = Result<Vec<Tensor>>> + 'a>;

/// A source of batches for the trainer's loops: a [`DataLoader`] over a
/// map-style dataset, or a host iterator.
pub trait BatchSource {
    /// Number of batches per epoch, when known.
    fn num_batches(&self) -> Option<usize>;
    /// The batches of `epoch`.
    fn batches(&self, epoch: u64) -> Result<BatchIter<'_>>;
    /// The part rank `rank` of `world` reads under DDP, when the source can
    /// be split (a DataLoader: a distributed sampler); `None` means every
    /// rank reads the whole source (host iterators split themselves).
    fn shard(&self, rank: usize, world: usize) -> Option<Box<dyn BatchSource + Send>> {
        let _ = (rank, world);
        None
    }
    /// Samples per batch, for a source whose batches can be resized (the
    /// batch size finder).
    fn batch_size(&self) -> Option<usize> {
        None
    }
    /// Samples in the dataset, when known.
    fn dataset_len(&self) -> Option<usize> {
        None
    }
    /// The same source with batches of `batch_size` samples; `None` for a
    /// source that cannot be resized.
    fn resized(&self, batch_size: usize) -> Option<Result<Box<dyn BatchSource + Send>>> {
        let _ = batch_size;
        None
    }
    /// The dataset indices of the samples of each batch of `epoch` (a
    /// function of the batch's index, O(batch size) a call), when the
    /// source knows them; `None` for sources that only yield batches.
    fn sample_indices(&self, epoch: u64) -> Option<Box<dyn Fn(usize) -> Vec<i64> + '_>> {
        let _ = epoch;
        None
    }
    /// Batch `index` of `epoch` without iterating (for host-owned loops);
    /// sources that can only be iterated answer `Unsupported`.
    fn batch_at(&self, epoch: u64, index: usize) -> Result<Vec<Tensor>> {
        let _ = (epoch, index);
        Err(crate::error::Error::new(
            crate::error::ErrorCode::Unsupported,
            "this loader can only be iterated (a host iterator); batches by index need a loader over a dataset",
        ))
    }
}

impl BatchSource for DataLoader {
    fn num_batches(&self) -> Option<usize> {
        Some(self.len())
    }

    fn batches(&self, epoch: u64) -> Result<BatchIter<'_>> {
        self.iter(epoch)
    }

    fn shard(&self, rank: usize, world: usize) -> Option<Box<dyn BatchSource + Send>> {
        self.sharded(rank, world).ok().map(|l| Box::new(l) as Box<dyn BatchSource + Send>)
    }

    fn batch_size(&self) -> Option<usize> {
        Some(self.options().batch_size)
    }

    fn dataset_len(&self) -> Option<usize> {
        Some(self.dataset().len())
    }

    fn resized(&self, batch_size: usize) -> Option<Result<Box<dyn BatchSource + Send>>> {
        Some(self.with_batch_size(batch_size).map(|l| Box::new(l) as Box<dyn BatchSource + Send>))
    }

    fn sample_indices(&self, epoch: u64) -> Option<Box<dyn Fn(usize) -> Vec<i64> + '_>> {
        Some(Box::new(self.batch_indices_fn(epoch)))
    }

    fn batch_at(&self, epoch: u64, index: usize) -> Result<Vec<Tensor>> {
        if index >= self.len() {
            return Err(crate::error::Error::new(
                crate::error::ErrorCode::OutOfRange,
                format!("batch {index} of an epoch of {} batches", self.len()),
            ));
        }
        self.get(epoch, index)
    }
}
