//! The data loader: batches of a dataset, shuffled deterministically per epoch.
use std::sync::Arc;

use tch::Tensor;

use super::dataset::Dataset;
use super::sampler::EpochOrder;
use crate::error::{Error, Result};

/// The largest world a loader can be split for (a bound on the padding).
const MAX_WORLD: usize = 1 << 20;

/// The largest batch a loader hands out (its index list is allocated).
pub const MAX_BATCH_SIZE: usize = 1 << 24;

/// The most worker threads a loader starts.
pub const MAX_WORKERS: usize = 64;

/// The most batches a worker reads ahead.
pub const MAX_PREFETCH_FACTOR: usize = 64;

/// How a [`DataLoader`] cuts an epoch into batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataLoaderOptions {
    /// Samples per batch (at least 1).
    pub batch_size: usize,
    /// Shuffle the samples every epoch (with a permutation keyed by `(seed, epoch)`).
    pub shuffle: bool,
    /// Seed of the shuffle.
    pub seed: u64,
    /// Drop the last batch when it is smaller than `batch_size`.
    pub drop_last: bool,
    /// Copy each batch into page-locked (pinned) host memory, so that its
    /// copy to a GPU overlaps (torch's `pin_memory`). Without CUDA it does
    /// nothing, as torch's DataLoader then does.
    pub pin_memory: bool,
    /// Worker threads that read batches ahead of the loop, in the loader's
    /// order (torch's `num_workers`; 0: the loop's own thread reads them).
    pub num_workers: usize,
    /// Batches each worker reads ahead (torch's `prefetch_factor`, default 2).
    pub prefetch_factor: usize,
}

impl Default for DataLoaderOptions {
    /// torch's defaults: batch size 1, no shuffle, seed 0, keep the last
    /// batch, no pinning, no workers (prefetch factor 2 when there are).
    fn default() -> Self {
        DataLoaderOptions {
            batch_size: 1,
            shuffle: false,
            seed: 0,
            drop_last: false,
            pin_memory: false,
            num_workers: 0,
            prefetch_factor: 2,
        }
    }
}

/// Hands out the batches of a dataset epoch by epoch.
#[derive(Clone)]
pub struct DataLoader {
    dataset: Arc<dyn Dataset>,
    opts: DataLoaderOptions,
    /// `(rank, world)` when this loader reads one rank's share (DDP).
    shard: Option<(usize, usize)>,
}

impl std::fmt::Debug for DataLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader").field("dataset_len", &self.dataset.len()).field("opts", &self.opts).finish()
    }
}

impl DataLoader {
    /// A loader over `dataset`. Invalid arguments: a `batch_size` outside
    /// 1..=MAX_BATCH_SIZE, `num_workers` above MAX_WORKERS, a
    /// `prefetch_factor` outside 1..=MAX_PREFETCH_FACTOR, workers over a
    /// dataset that must be read on the loop's thread.
    pub fn new(dataset: Arc<dyn Dataset>, opts: DataLoaderOptions) -> Result<Self> {
        if opts.batch_size == 0 || opts.batch_size > MAX_BATCH_SIZE {
            return Err(Error::invalid(format!(
                "DataLoader::new: batch_size must be in 1..={MAX_BATCH_SIZE}, got {}",
                opts.batch_size
            )));
        }
        if opts.num_workers > MAX_WORKERS || !(1..=MAX_PREFETCH_FACTOR).contains(&opts.prefetch_factor) {
            return Err(Error::invalid(format!(
                "DataLoader::new: num_workers must be in 0..={MAX_WORKERS} and prefetch_factor in \
                 1..={MAX_PREFETCH_FACTOR}, got {} and {}",
                opts.num_workers, opts.prefetch_factor
            )));
        }
        if opts.num_workers > 0 && !dataset.reads_on_any_thread() {
            return Err(Error::invalid(
                "DataLoader::new: num_workers > 0 reads batches on worker threads, and this dataset must be read \
                 on the loop's thread (a host dataset whose vtable does not set any_thread)",
            ));
        }
        Ok(DataLoader { dataset, opts, shard: None })
    }

    /// The same loader reading only rank `rank` of `world`'s share, as
    /// torch's DistributedSampler (drop_last=False): the epoch's order
    /// (shuffled with the loader's seed and the epoch when shuffling) is
    /// padded by repeating its start to a multiple of `world`, and rank r
    /// takes samples r, r + world, r + 2 world, ... Every rank gets the
    /// same number of samples, and together they cover the dataset.
    pub fn sharded(&self, rank: usize, world: usize) -> Result<DataLoader> {
        if world == 0 || rank >= world {
            return Err(Error::invalid(format!("DataLoader::sharded: rank {rank} is outside a world of {world}")));
        }
        if world > MAX_WORLD {
            return Err(Error::invalid(format!("DataLoader::sharded: a world of {world} ranks exceeds {MAX_WORLD}")));
        }
        Ok(DataLoader { dataset: Arc::clone(&self.dataset), opts: self.opts.clone(), shard: Some((rank, world)) })
    }

    /// The same loader (and shard) with batches of `batch_size` samples.
    pub fn with_batch_size(&self, batch_size: usize) -> Result<DataLoader> {
        let opts = DataLoaderOptions { batch_size, ..self.opts.clone() };
        let resized = DataLoader::new(Arc::clone(&self.dataset), opts)?;
        Ok(DataLoader { shard: self.shard, ..resized })
    }

    /// Samples this loader reads per epoch.
    fn samples(&self) -> usize {
        let n = self.dataset.len();
        match self.shard {
            Some((_, world)) => n.div_ceil(world),
            None => n,
        }
    }

    /// Number of batches per epoch, as torch's `len(DataLoader)`.
    pub fn len(&self) -> usize {
        let n = self.samples();
        if self.opts.drop_last {
            n / self.opts.batch_size
        } else {
            n.div_ceil(self.opts.batch_size)
        }
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<dyn Dataset> {
        &self.dataset
    }

    /// The options.
    pub fn options(&self) -> &DataLoaderOptions {
        &self.opts
    }

    /// The order this loader reads in `epoch`: shuffled with a permutation
    /// keyed by `(seed, epoch)` (reproducible across runs and machines,
    /// independent of torch's global RNG), or in order; computed per
    /// position, never materialised.
    fn order(&self, epoch: u64) -> EpochOrder {
        EpochOrder::new(self.dataset.len() as u64, self.opts.shuffle, self.opts.seed, epoch)
    }

    /// Indices of batch `index` of `epoch` (empty past the end), in
    /// O(batch size): this rank's share of the epoch's order, padded as
    /// DistributedSampler pads (the order repeats from its start).
    pub fn batch(&self, epoch: u64, index: usize) -> Vec<i64> {
        self.batch_of(&self.order(epoch), index)
    }

    fn batch_of(&self, order: &EpochOrder, index: usize) -> Vec<i64> {
        if index >= self.len() || order.is_empty() {
            return Vec::new();
        }
        let bs = self.opts.batch_size;
        let start = index.saturating_mul(bs);
        let end = start.saturating_add(bs).min(self.samples());
        let n = order.len();
        (start..end)
            .map(|p| {
                // u128: p * world + rank may pass 2^64 for huge datasets.
                let global = match self.shard {
                    Some((rank, world)) => p as u128 * world as u128 + rank as u128,
                    None => p as u128,
                };
                order.at((global % n as u128) as u64) as i64
            })
            .collect()
    }

    /// The indices of each batch of `epoch`, one batch at a time: the
    /// epoch's order is computed once, each call costs O(batch size).
    pub fn batch_indices_fn(&self, epoch: u64) -> impl Fn(usize) -> Vec<i64> + '_ {
        let order = self.order(epoch);
        move |index| self.batch_of(&order, index)
    }

    /// Indices of every batch of `epoch` (for tests and small datasets;
    /// the loops use [`DataLoader::iter`], which computes one batch at a time).
    pub fn batch_indices(&self, epoch: u64) -> Vec<Vec<i64>> {
        let order = self.order(epoch);
        (0..self.len()).map(|b| self.batch_of(&order, b)).collect()
    }

    /// Iterator over the batches of `epoch` (each item the dataset's
    /// `get_batch` of one batch's indices, pinned with `pin_memory` where
    /// CUDA is available): computed lazily on this thread, or read ahead by
    /// `num_workers` threads (the same batches in the same order).
    pub fn iter(&self, epoch: u64) -> Result<Box<dyn Iterator<Item = Result<Vec<Tensor>>> + '_>> {
        if self.opts.num_workers > 0 && !self.is_empty() {
            let workers = super::prefetch::Prefetcher::start(self, epoch)?;
            return Ok(Box::new(workers));
        }
        let order = self.order(epoch);
        let pin = self.pins();
        Ok(Box::new((0..self.len()).map(move |b| pinned_if(pin, self.dataset.get_batch(&self.batch_of(&order, b))?))))
    }

    /// Batch `index` of `epoch` (as [`DataLoader::iter`] gives it).
    pub fn get(&self, epoch: u64, index: usize) -> Result<Vec<Tensor>> {
        pinned_if(self.pins(), self.dataset.get_batch(&self.batch(epoch, index))?)
    }

    /// Whether batches go to pinned memory: asked for, and CUDA is here.
    fn pins(&self) -> bool {
        self.opts.pin_memory && tch::Cuda::is_available()
    }
}

/// With `pin`, the batch's CPU tensors in pinned memory (others as they
/// are); without, the batch unchanged.
fn pinned_if(pin: bool, batch: Vec<Tensor>) -> Result<Vec<Tensor>> {
    if !pin {
        return Ok(batch);
    }
    batch.into_iter().map(crate::tensor::pinned::pin).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::TensorDataset;
    use crate::error::ErrorCode;
    use tch::{Device, Kind};

    fn loader(n: i64, batch_size: usize, shuffle: bool, drop_last: bool) -> DataLoader {
        let y = Tensor::arange(n, (Kind::Int64, Device::Cpu));
        let ds = Arc::new(TensorDataset::new(vec![y]).unwrap());
        let opts = DataLoaderOptions { batch_size, shuffle, seed: 17, drop_last, ..Default::default() };
        DataLoader::new(ds, opts).unwrap()
    }

    #[test]
    fn pin_memory_keeps_batches_and_pins_where_cuda_is() {
        let plain = loader(10, 3, true, false);
        let mut opts = plain.options().clone();
        opts.pin_memory = true;
        let pinning = DataLoader::new(Arc::clone(plain.dataset()), opts).unwrap();
        let cuda = tch::Cuda::is_available();
        for (a, b) in plain.iter(2).unwrap().zip(pinning.iter(2).unwrap()) {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!(a, b);
            assert_eq!(crate::tensor::pinned::is_pinned(&b[0]).unwrap(), cuda);
        }
        assert_eq!(pinning.get(2, 1).unwrap(), plain.get(2, 1).unwrap());
    }

    #[test]
    fn len_with_and_without_drop_last() {
        assert_eq!(loader(10, 3, false, false).len(), 4);
        assert_eq!(loader(10, 3, false, true).len(), 3);
        assert_eq!(loader(9, 3, true, false).len(), 3);
        assert_eq!(loader(9, 3, true, true).len(), 3);
        assert_eq!(loader(2, 3, false, true).len(), 0);
        assert!(loader(2, 3, false, true).is_empty());
        let l = loader(10, 3, true, true);
        assert_eq!(l.batch_indices(0).len(), 3);
        assert!(l.batch_indices(0).iter().all(|b| b.len() == 3));
        let l = loader(10, 3, false, false);
        assert_eq!(l.batch_indices(0).last().unwrap(), &vec![9]);
        assert_eq!(l.iter(0).unwrap().count(), 4);
        assert_eq!(l.options().batch_size, 3);
        assert_eq!(l.dataset().len(), 10);
    }

    #[test]
    fn shards_cover_the_dataset_like_distributed_sampler() {
        let l = loader(10, 2, false, false);
        let parts: Vec<Vec<i64>> = (0..3).map(|r| l.sharded(r, 3).unwrap().batch_indices(0).concat()).collect();
        // 10 samples padded to 12: rank 0 gets 0,3,6,9 and rank 1 1,4,7,0.
        assert_eq!(parts[0], vec![0, 3, 6, 9]);
        assert_eq!(parts[1], vec![1, 4, 7, 0]);
        assert_eq!(parts[2], vec![2, 5, 8, 1]);
        assert_eq!(l.sharded(1, 3).unwrap().len(), 2);
        let s = loader(9, 4, true, false);
        let mut all: Vec<i64> = (0..3).flat_map(|r| s.sharded(r, 3).unwrap().batch_indices(4).concat()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..9).collect::<Vec<i64>>());
        assert_ne!(s.sharded(0, 3).unwrap().batch_indices(4), s.sharded(0, 3).unwrap().batch_indices(5));
        let tiny = loader(1, 1, false, false);
        assert_eq!(tiny.sharded(3, 4).unwrap().batch_indices(0), vec![vec![0]]);
        assert_eq!(l.sharded(3, 3).unwrap_err().code, ErrorCode::InvalidArgument);
    }

    /// A dataset that counts its reads, fails on one index, and records
    /// the threads that read it.
    struct Probe {
        reads: std::sync::atomic::AtomicUsize,
        threads: std::sync::Mutex<std::collections::HashSet<std::thread::ThreadId>>,
        fail_at: i64,
        any_thread: bool,
    }

    impl Dataset for Probe {
        fn len(&self) -> usize {
            50
        }
        fn get_batch(&self, indices: &[i64]) -> Result<Vec<Tensor>> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.threads.lock().unwrap().insert(std::thread::current().id());
            if indices.contains(&self.fail_at) {
                return Err(Error::invalid(format!("sample {} is broken", self.fail_at)));
            }
            Ok(vec![Tensor::from_slice(indices)])
        }
        fn reads_on_any_thread(&self) -> bool {
            self.any_thread
        }
    }

    fn probe(fail_at: i64, any_thread: bool) -> Arc<Probe> {
        Arc::new(Probe { reads: Default::default(), threads: Default::default(), fail_at, any_thread })
    }

    #[test]
    fn workers_read_the_same_batches_in_the_same_order() {
        let ds = probe(-1, true);
        let base = DataLoaderOptions { batch_size: 4, shuffle: true, seed: 3, ..Default::default() };
        let plain = DataLoader::new(ds.clone(), base.clone()).unwrap();
        let want: Vec<Vec<Tensor>> = plain.iter(1).unwrap().map(|b| b.unwrap()).collect();
        for (workers, prefetch) in [(1, 1), (3, 2), (13, 5), (64, 1)] {
            let opts = DataLoaderOptions { num_workers: workers, prefetch_factor: prefetch, ..base.clone() };
            let l = DataLoader::new(ds.clone(), opts).unwrap();
            let got: Vec<Vec<Tensor>> = l.iter(1).unwrap().map(|b| b.unwrap()).collect();
            assert_eq!(got, want, "{workers} workers");
        }
        let main = std::thread::current().id();
        assert!(ds.threads.lock().unwrap().iter().any(|t| *t != main));
    }

    #[test]
    fn an_early_stop_waits_for_the_workers_and_errors_come_in_order() {
        let ds = probe(-1, true);
        let opts = DataLoaderOptions { batch_size: 1, num_workers: 4, prefetch_factor: 2, ..Default::default() };
        let l = DataLoader::new(ds.clone(), opts).unwrap();
        let mut it = l.iter(0).unwrap();
        it.next().unwrap().unwrap();
        drop(it);
        // Joined: no read happens after the drop, and at most the queues'
        // batches plus one per worker were read.
        let reads = ds.reads.load(std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(ds.reads.load(std::sync::atomic::Ordering::SeqCst), reads);
        assert!(reads <= 1 + 4 * (2 + 1), "{reads} reads");

        let failing = probe(9, true);
        let opts = DataLoaderOptions { batch_size: 2, num_workers: 3, ..Default::default() };
        let l = DataLoader::new(failing, opts).unwrap();
        let results: Vec<Result<Vec<Tensor>>> = l.iter(0).unwrap().take(6).collect();
        assert!(results[..4].iter().all(|r| r.is_ok()));
        assert!(results[4].as_ref().unwrap_err().message.contains("sample 9 is broken"));
    }

    #[test]
    fn workers_are_bounded_and_need_a_dataset_read_on_any_thread() {
        let bad = |workers, prefetch, any_thread| {
            let opts = DataLoaderOptions { num_workers: workers, prefetch_factor: prefetch, ..Default::default() };
            DataLoader::new(probe(-1, any_thread), opts).unwrap_err()
        };
        assert!(bad(MAX_WORKERS + 1, 2, true).message.contains("num_workers"));
        assert!(bad(2, 0, true).message.contains("prefetch_factor"));
        assert!(bad(2, MAX_PREFETCH_FACTOR + 1, true).message.contains("prefetch_factor"));
        assert!(bad(1, 2, false).message.contains("loop's thread"));
        let opts = DataLoaderOptions { num_workers: 0, ..Default::default() };
        DataLoader::new(probe(-1, false), opts).unwrap();
    }

    #[test]
    fn batch_size_zero_is_invalid() {
        let y = Tensor::arange(4, (Kind::Int64, Device::Cpu));
        let ds = Arc::new(TensorDataset::new(vec![y]).unwrap());
        let opts = DataLoaderOptions { batch_size: 0, ..Default::default() };
        assert_eq!(DataLoader::new(ds, opts).unwrap_err().code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn every_index_once_per_epoch() {
        let l = loader(103, 8, true, false);
        for epoch in 0..3 {
            let mut seen: Vec<i64> = Vec::new();
            for batch in l.iter(epoch).unwrap() {
                let b = batch.unwrap();
                seen.extend(Vec::<i64>::try_from(&b[0]).unwrap());
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..103).collect::<Vec<i64>>());
        }
    }

    #[test]
    fn order_is_reproducible() {
        let a = loader(100, 10, true, false);
        let b = loader(100, 10, true, false);
        assert_eq!(a.batch_indices(5), b.batch_indices(5));
        assert_ne!(a.batch_indices(5), a.batch_indices(6));
        assert_ne!(a.batch_indices(0).concat(), (0..100).collect::<Vec<i64>>());
        let plain = loader(25, 10, false, false);
        assert_eq!(plain.batch_indices(3).concat(), (0..25).collect::<Vec<i64>>());
        assert_eq!(plain.batch_indices(0), plain.batch_indices(1));
    }
}
