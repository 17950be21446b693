//! Loader workers: background threads that read a loader's batches ahead of
//! the loop, in the loader's order (torch's DataLoader `num_workers` and
//! `prefetch_factor`, with threads instead of processes). Worker `w` of `n`
//! reads batches `w`, `w + n`, ... into its own bounded queue; the loop
//! takes them round-robin, so the order and the batches are those of
//! `num_workers = 0`.
use super::loader::DataLoader;
use crate::error::{Error, ErrorCode, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use tch::Tensor;

/// The batches of one epoch, read ahead by worker threads. Dropping it
/// stops the workers and waits for them (each finishes the batch it is
/// reading), so no worker outlives the epoch's iteration.
pub struct Prefetcher {
    queues: Vec<Receiver<Result<Vec<Tensor>>>>,
    workers: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    next: usize,
    len: usize,
}

impl Prefetcher {
    /// Starts the loader's `num_workers` threads (at most one per batch)
    /// reading `epoch`, each at most `prefetch_factor` batches ahead.
    pub fn start(loader: &DataLoader, epoch: u64) -> Result<Self> {
        let (len, prefetch) = (loader.len(), loader.options().prefetch_factor);
        let count = loader.options().num_workers.min(len).max(1);
        let stop = Arc::new(AtomicBool::new(false));
        // Host sources read on the workers keep the run's callback limit.
        let timeout = crate::trainer::run_settings::callback_timeout();
        let mut this = Prefetcher { queues: Vec::with_capacity(count), workers: Vec::new(), stop, next: 0, len };
        for w in 0..count {
            let (tx, rx) = sync_channel(prefetch.max(1));
            let (loader, stop) = (loader.clone(), Arc::clone(&this.stop));
            let spawned = std::thread::Builder::new().name(format!("fulmen-loader-{w}")).spawn(move || {
                crate::trainer::run_settings::inherit_callback_timeout(timeout);
                let mut b = w;
                while b < len && !stop.load(Ordering::Relaxed) {
                    let batch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loader.get(epoch, b)))
                        .unwrap_or_else(|_| {
                            Err(Error::new(ErrorCode::Panic, format!("loader worker {w} panicked reading batch {b}")))
                        });
                    let failed = batch.is_err();
                    if tx.send(batch).is_err() || failed {
                        break;
                    }
                    b += count;
                }
            });
            match spawned {
                Ok(handle) => {
                    this.workers.push(handle);
                    this.queues.push(rx);
                }
                // `this` stops the workers already started as it drops.
                Err(e) => return Err(Error::state(format!("cannot start loader worker {w}: {e}"))),
            }
        }
        Ok(this)
    }
}

impl Iterator for Prefetcher {
    type Item = Result<Vec<Tensor>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.len {
            return None;
        }
        let b = self.next;
        self.next += 1;
        Some(self.queues[b % self.queues.len()].recv().unwrap_or_else(|_| {
            Err(Error::state(format!("the loader worker reading batch {b} stopped after an earlier error")))
        }))
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A worker blocked on a full queue wakes with an error and stops.
        self.queues.clear();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
