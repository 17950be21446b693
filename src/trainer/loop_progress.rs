//! Loop progress as Lightning keeps it (`lightning.pytorch.loops.progress`):
//! events counted as `ready`, `started`, `processed` and `completed`, in
//! all (`total`) and in the current epoch or run (`current`). The fit loop
//! updates a [`FitProgress`] where Lightning's loops update theirs, and a
//! checkpoint saves it whole: Lightning-format files write it as
//! `loops.fit_loop`, and a resume continues from it.
use serde::{Deserialize, Serialize};

/// Which counts an event has (Lightning's tracker classes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Counts {
    /// `_ReadyCompletedTracker`: ready and completed.
    #[default]
    ReadyCompleted,
    /// `_StartedTracker`: ready, started and completed.
    Started,
    /// `_ProcessedTracker`: all four.
    Processed,
}

/// One set of counts (Lightning's trackers); the counts an event's
/// [`Counts`] lacks stay 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tracker {
    /// Events ready to start.
    pub ready: i64,
    /// Events started (after their `on_*_start` hooks).
    pub started: i64,
    /// Events processed (their work done, before `on_*_end`).
    pub processed: i64,
    /// Events completed (after their `on_*_end` hooks).
    pub completed: i64,
}

/// Counts in all and in the current epoch or run (Lightning's `_Progress`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Which counts the event has.
    pub counts: Counts,
    /// Since the start of training.
    pub total: Tracker,
    /// In the current epoch or run.
    pub current: Tracker,
}

impl Progress {
    /// No events yet, with the counts `counts` names.
    pub fn new(counts: Counts) -> Self {
        Progress { counts, ..Default::default() }
    }

    fn both(&mut self, f: impl Fn(&mut Tracker)) {
        f(&mut self.total);
        f(&mut self.current);
    }

    /// One more event ready.
    pub fn increment_ready(&mut self) {
        self.both(|t| t.ready += 1);
    }

    /// One more event started (events that count it).
    pub fn increment_started(&mut self) {
        if self.counts != Counts::ReadyCompleted {
            self.both(|t| t.started += 1);
        }
    }

    /// One more event processed (events that count it).
    pub fn increment_processed(&mut self) {
        if self.counts == Counts::Processed {
            self.both(|t| t.processed += 1);
        }
    }

    /// One more event completed.
    pub fn increment_completed(&mut self) {
        self.both(|t| t.completed += 1);
    }

    /// `n` more events, each counted in every count the event has.
    pub fn increment_by(&mut self, n: i64) {
        let counts = self.counts;
        self.both(|t| {
            t.ready += n;
            if counts != Counts::ReadyCompleted {
                t.started += n;
            }
            if counts == Counts::Processed {
                t.processed += n;
            }
            t.completed += n;
        });
    }

    /// A new epoch or run: `current` starts from zero.
    pub fn reset_on_run(&mut self) {
        self.current = Tracker::default();
    }

    /// A restart: `current` goes back to its last completed event.
    pub fn reset_on_restart(&mut self) {
        let done = self.current.completed;
        self.current.ready = done;
        if self.counts != Counts::ReadyCompleted {
            self.current.started = done;
        }
        if self.counts == Counts::Processed {
            self.current.processed = done;
        }
    }
}

/// Batch progress (Lightning's `_BatchProgress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchProgress {
    /// The batches' counts.
    pub progress: Progress,
    /// Whether the batch last fetched is the last one.
    pub is_last_batch: bool,
}

impl Default for BatchProgress {
    fn default() -> Self {
        BatchProgress { progress: Progress::new(Counts::Processed), is_last_batch: false }
    }
}

impl BatchProgress {
    /// A new epoch or run: `current` from zero, no last batch yet.
    pub fn reset_on_run(&mut self) {
        self.progress.reset_on_run();
        self.is_last_batch = false;
    }
}

/// Optimizer progress (Lightning's `_OptimizerProgress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptimizerProgress {
    /// `optimizer.step` calls.
    pub step: Progress,
    /// `optimizer.zero_grad` calls.
    pub zero_grad: Progress,
}

impl Default for OptimizerProgress {
    fn default() -> Self {
        OptimizerProgress { step: Progress::new(Counts::ReadyCompleted), zero_grad: Progress::new(Counts::Started) }
    }
}

impl Tracker {
    fn minus(&self, other: &Tracker) -> Tracker {
        Tracker {
            ready: self.ready - other.ready,
            started: self.started - other.started,
            processed: self.processed - other.processed,
            completed: self.completed - other.completed,
        }
    }

    fn add(&mut self, by: &Tracker) {
        self.ready += by.ready;
        self.started += by.started;
        self.processed += by.processed;
        self.completed += by.completed;
    }
}

impl Progress {
    fn since(&self, before: &Progress) -> Progress {
        Progress {
            counts: self.counts,
            total: self.total.minus(&before.total),
            current: self.current.minus(&before.current),
        }
    }

    fn advance(&mut self, by: &Progress) {
        self.total.add(&by.total);
        self.current.add(&by.current);
    }
}

impl OptimizerProgress {
    /// What was counted from `before` to this (a captured step's counts,
    /// which each replay counts again).
    pub fn since(&self, before: &OptimizerProgress) -> OptimizerProgress {
        OptimizerProgress { step: self.step.since(&before.step), zero_grad: self.zero_grad.since(&before.zero_grad) }
    }

    /// Counts `by` (from [`OptimizerProgress::since`]) once more.
    pub fn advance(&mut self, by: &OptimizerProgress) {
        self.step.advance(&by.step);
        self.zero_grad.advance(&by.zero_grad);
    }

    fn reset_on_run(&mut self) {
        self.step.reset_on_run();
        self.zero_grad.reset_on_run();
    }

    fn reset_on_restart(&mut self) {
        self.step.reset_on_restart();
        self.zero_grad.reset_on_restart();
    }
}

/// Everything the fit loop counts (Lightning's `fit_loop` state: its
/// epoch progress and its epoch loop's batch, scheduler, optimizer and
/// validation progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FitProgress {
    /// Epochs (`fit_loop.epoch_progress`).
    pub epoch: Progress,
    /// Training batches that stepped, counted after a batch's validation
    /// (`epoch_loop._batches_that_stepped`).
    pub batches_that_stepped: i64,
    /// Training batches (`epoch_loop.batch_progress`).
    pub batch: BatchProgress,
    /// Scheduler steps the loop took (`epoch_loop.scheduler_progress`).
    pub scheduler: Progress,
    /// Automatic optimization's steps and `zero_grad` calls.
    pub optimizer: OptimizerProgress,
    /// Manual optimization's optimizer steps; Lightning never resets its
    /// `current`, which so counts the fit's steps as `total` does.
    pub manual_step: Progress,
    /// Fit's validation batches (`epoch_loop.val_loop.batch_progress`):
    /// `total` in the epoch, `current` in the last validation.
    pub val_batch: BatchProgress,
}

impl Default for FitProgress {
    fn default() -> Self {
        FitProgress {
            epoch: Progress::new(Counts::Processed),
            batches_that_stepped: 0,
            batch: BatchProgress::default(),
            scheduler: Progress::new(Counts::ReadyCompleted),
            optimizer: OptimizerProgress::default(),
            manual_step: Progress::new(Counts::ReadyCompleted),
            val_batch: BatchProgress::default(),
        }
    }
}

/// Where in an epoch a checkpoint's progress was saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedAt {
    /// Before an epoch's first batch (every epoch count equal).
    EpochStart,
    /// After a batch, inside an epoch (its `on_train_batch_end`).
    BatchEnd,
    /// After the epoch's training batches (`on_train_epoch_end`, or the
    /// validation at the epoch's end): processed, not completed.
    EpochEnd,
}

impl FitProgress {
    /// The start of an epoch's training loop: a new epoch counts its
    /// batches, scheduler and optimizer steps and validation batches from
    /// zero; a resumed one (`resumed`) keeps what it restored.
    pub fn start_epoch(&mut self, resumed: bool) {
        if !resumed {
            self.batch.reset_on_run();
            self.scheduler.reset_on_run();
            self.optimizer.reset_on_run();
            self.val_batch.progress.total = Tracker::default();
        }
    }

    /// Whether every count lies in `0..=max` (a progress read from a file).
    pub fn counts_within(&self, max: i64) -> bool {
        let progresses = [
            &self.epoch,
            &self.batch.progress,
            &self.scheduler,
            &self.optimizer.step,
            &self.optimizer.zero_grad,
            &self.manual_step,
            &self.val_batch.progress,
        ];
        let ok = |n: i64| (0..=max).contains(&n);
        ok(self.batches_that_stepped)
            && progresses
                .iter()
                .flat_map(|p| [p.total, p.current])
                .all(|t| ok(t.ready) && ok(t.started) && ok(t.processed) && ok(t.completed))
    }

    /// Training batches done in the current epoch.
    pub fn batches_in_epoch(&self) -> i64 {
        self.batch.progress.current.processed
    }

    /// Whether the current epoch's training batches are all done (its last
    /// batch processed).
    pub fn epoch_batches_done(&self) -> bool {
        let c = self.batch.progress.current;
        self.batch.is_last_batch && c.processed > 0 && c.processed == c.ready
    }

    /// `zero_grad` calls beyond one per optimizer step (an LBFGS closure's
    /// re-evaluations): in all, and in the current epoch.
    pub fn extra_zero_grads(&self) -> (i64, i64) {
        let o = &self.optimizer;
        let total = (o.zero_grad.total.completed - o.step.total.completed).max(0);
        (total, (o.zero_grad.current.completed - o.step.current.completed).clamp(0, total))
    }

    /// Where in an epoch this progress was saved, from its epoch counts.
    pub fn saved_at(&self) -> SavedAt {
        let e = self.epoch.current;
        if e.processed == e.ready && e.completed + 1 == e.processed {
            SavedAt::EpochEnd
        } else if e.completed == e.processed && e.processed == e.ready {
            SavedAt::EpochStart
        } else {
            SavedAt::BatchEnd
        }
    }

    /// The progress a resume continues from, as Lightning's loops restore
    /// theirs (their `reset` on restart): an epoch saved at its end is
    /// completed; inside an epoch, the batch saved at its end is completed
    /// and `_batches_that_stepped` counts it when it `stepped`, then every
    /// `current` goes back to its last completed event (an epoch whose last
    /// batch that was is completed too); the epoch's counts are those of an
    /// epoch started.
    pub fn restarted(mut self, num_training_batches: Option<i64>, stepped: bool) -> Self {
        match self.saved_at() {
            SavedAt::EpochStart => {}
            SavedAt::EpochEnd => self.epoch.increment_completed(),
            SavedAt::BatchEnd => {
                // The fit loop's restart reads it before the epoch loop's.
                let last_batch = self.batch.is_last_batch;
                let b = self.batch.progress.total;
                let at_batch_end = b.started == b.ready && b.processed == b.started && b.completed + 1 == b.processed;
                if at_batch_end {
                    if stepped {
                        self.batches_that_stepped += 1;
                    }
                    self.batch.progress.increment_completed();
                    if num_training_batches.is_some_and(|n| self.batch.progress.current.completed >= n) {
                        self.batch.reset_on_run();
                        self.scheduler.reset_on_run();
                        self.optimizer.reset_on_run();
                        self.val_batch.progress.total = Tracker::default();
                    }
                }
                self.batch.progress.reset_on_restart();
                self.scheduler.reset_on_restart();
                self.optimizer.reset_on_restart();
                if at_batch_end && last_batch {
                    self.epoch.increment_processed();
                    self.epoch.increment_completed();
                }
            }
        }
        self
    }
}

#[cfg(test)]
#[path = "loop_progress_tests.rs"]
mod tests;
