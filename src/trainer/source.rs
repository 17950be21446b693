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
