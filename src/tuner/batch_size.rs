//! Lightning's `Tuner.scale_batch_size` (its BatchSizeFinder): short fits
//! of `steps_per_trial` steps at growing batch sizes until one runs out of
//! memory, then the largest that did not (`power`), or a binary search
//! between the two (`binsearch`, less a margin). Every decision is
//! Lightning's, so the same out-of-memory points give the same batch size
//! (`tests/interop/batch_size_parity.py`), with two differences where
//! Lightning 2.6 departs from what it documents: its first trial runs at
//! the loader's own batch size, fulmen's at `init_val`; where its power
//! mode doubles past `max_val` and returns that size, fulmen returns
//! `max_val`; a size at or past the dataset's length that ran out of
//! memory shrinks (Lightning keeps it: its power mode returns it, its
//! binsearch retries it without end); and `max_val` above 8192 bounds
//! every size (Lightning caps some at its default 8192 whatever
//! `max_val` says). The model's weights are put back afterwards.
use crate::error::{Error, ErrorCode, Result};
use crate::trainer::options::{BatchLimit, LoggerChoice};
use crate::trainer::{BatchSource, LightningModule, Trainer};
use tch::Tensor;

/// How the batch size grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchSizeMode {
    /// Double until a trial runs out of memory (the default).
    #[default]
    Power,
    /// Double until a trial runs out of memory, then search between the
    /// last size that fit and the one that did not.
    BinSearch,
}

/// Options of the search (Lightning's `scale_batch_size` arguments).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchSizeOptions {
    /// How the size grows.
    pub mode: BatchSizeMode,
    /// Optimizer steps per trial (default 3).
    pub steps_per_trial: i64,
    /// The first batch size tried (default 2).
    pub init_val: usize,
    /// The most trials (default 25).
    pub max_trials: i64,
    /// `binsearch`: the found size is reduced by this fraction, in [0, 1)
    /// (default 0.05).
    pub margin: f64,
    /// The largest batch size: sizes are capped at it, and the search ends
    /// once it reaches it, without trying it, as Lightning's (default 8192).
    pub max_val: usize,
}

impl Default for BatchSizeOptions {
    fn default() -> Self {
        BatchSizeOptions {
            mode: BatchSizeMode::Power,
            steps_per_trial: 3,
            init_val: 2,
            max_trials: 25,
            margin: 0.05,
            max_val: 8192,
        }
    }
}

impl BatchSizeOptions {
    fn validate(&self) -> Result<()> {
        if self.steps_per_trial < 1 || self.init_val < 1 || self.max_trials < 1 || self.max_val < 1 {
            return Err(Error::invalid(
                "scale_batch_size: steps_per_trial, init_val, max_trials and max_val must be at least 1",
            ));
        }
        if !(0.0..1.0).contains(&self.margin) {
            return Err(Error::invalid(format!("scale_batch_size: margin {} is not in [0, 1)", self.margin)));
        }
        Ok(())
    }
}

/// Whether a trial's error means it ran out of memory (Lightning's
/// `is_oom_error`: the out-of-memory code, or cuDNN's "not supported" that
/// a too large batch gives).
pub fn is_out_of_memory(e: &Error) -> bool {
    e.code == ErrorCode::OutOfMemory || e.message.contains("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.")
}

/// The search's state: the batch size the trials use now (Lightning's
/// `batch_size` attribute) and what bounds it.
struct Search<'a> {
    size: usize,
    dataset_len: Option<usize>,
    max_val: usize,
    trial: &'a mut dyn FnMut(usize) -> Result<bool>,
}

impl Search<'_> {
    /// Lightning's `_adjust_batch_size`: the size times `factor`, or
    /// `value`, capped at max_val; a size that reached the dataset's length
    /// does not grow. Returns the new size and whether it changed.
    fn adjust(&mut self, factor: f64, value: Option<usize>) -> (usize, bool) {
        self.resize(factor, value, true)
    }

    /// [`Search::adjust`] after a trial ran out of memory: the size shrinks
    /// whatever the dataset's length (Lightning 2.6 keeps a size at or past
    /// it, so its power mode returns a size that failed and its binsearch
    /// tries it again and again).
    fn shrink(&mut self, factor: f64, value: Option<usize>) -> usize {
        self.resize(factor, value, false).0
    }

    fn resize(&mut self, factor: f64, value: Option<usize>, growing: bool) -> (usize, bool) {
        if growing && self.dataset_len.is_some_and(|n| self.size >= n) {
            return (self.size, false);
        }
        let new = value.unwrap_or((self.size as f64 * factor) as usize).min(self.max_val);
        let changed = new != self.size;
        self.size = new;
        (new, changed)
    }

    /// Runs a trial at the current size: `Ok(true)` when it fit,
    /// `Ok(false)` when it ran out of memory.
    fn run(&mut self) -> Result<bool> {
        if self.size == 0 {
            return Err(Error::invalid("scale_batch_size: the batch size fell to 0 (every size ran out of memory)"));
        }
        (self.trial)(self.size)
    }

    /// Lightning's `_run_power_scaling`.
    fn power(&mut self, mut new_size: usize, max_trials: i64) -> Result<usize> {
        let mut any_success = false;
        for i in 0..max_trials {
            if new_size >= self.max_val {
                break;
            }
            if self.run()? {
                let last_successful = new_size;
                if i + 1 >= max_trials {
                    new_size = last_successful;
                    break;
                }
                let (size, changed) = self.adjust(2.0, None);
                new_size = size;
                if !changed {
                    break;
                }
                any_success = true;
            } else {
                new_size = self.shrink(0.5, None);
                if any_success {
                    break;
                }
            }
        }
        Ok(new_size)
    }

    /// Lightning's `_run_binsearch_scaling`.
    fn binsearch(&mut self, mut new_size: usize, max_trials: i64, margin: f64) -> Result<usize> {
        let (mut low, mut high) = (1usize, None::<usize>);
        let mut count = 0;
        loop {
            if new_size >= self.max_val {
                break;
            }
            if self.run()? {
                let last_successful = new_size;
                count += 1;
                if count >= max_trials {
                    new_size = last_successful;
                    break;
                }
                low = new_size;
                let (size, changed) = match high {
                    Some(h) if h - low <= 1 => break,
                    Some(h) => self.adjust(1.0, Some((h + low) / 2)),
                    None => self.adjust(2.0, None),
                };
                new_size = size;
                if !changed {
                    break;
                }
            } else {
                high = Some(new_size);
                new_size = self.shrink(1.0, Some((new_size + low) / 2));
                if high.is_some_and(|h| h.saturating_sub(low) <= 1) {
                    break;
                }
            }
        }
        if margin > 0.0 {
            new_size = ((new_size as f64 * (1.0 - margin)) as usize).max(1);
        }
        Ok(new_size)
    }
}

impl Trainer {
    /// Lightning's `Tuner(trainer).scale_batch_size`: trials of
    /// `steps_per_trial` optimizer steps on `train` at the sizes the search
    /// picks (validating on `val` as a fit would, at most that many
    /// batches), with this trainer's options but no loggers, checkpoints,
    /// progress bar or callbacks of its own. A trial that fails with an
    /// out-of-memory error is a size that does not fit; any other error
    /// ends the search. The trials train the model in turn, as Lightning's
    /// do; its weights are put back afterwards, whatever happened. Returns
    /// the batch size found; `train` itself is unchanged (the caller
    /// resizes it).
    pub fn scale_batch_size(
        &self,
        module: &mut dyn LightningModule,
        train: &dyn BatchSource,
        val: Option<&dyn BatchSource>,
        opts: &BatchSizeOptions,
    ) -> Result<usize> {
        opts.validate()?;
        if self.options().fast_dev_run != 0 {
            return Err(Error::invalid("scale_batch_size does not run with fast_dev_run"));
        }
        let start = train.batch_size().ok_or_else(|| {
            Error::new(
                ErrorCode::Unsupported,
                "scale_batch_size needs a loader over a dataset (a host iterator's batches cannot be resized)",
            )
        })?;
        let model =
            module.model().ok_or_else(|| Error::state("scale_batch_size needs a LightningModule with a model"))?;
        let mut run_opts = self.options().clone();
        run_opts.max_steps = opts.steps_per_trial;
        run_opts.logger = LoggerChoice { csv: false, tensorboard: false };
        run_opts.enable_checkpointing = false;
        run_opts.enable_progress_bar = false;
        run_opts.enable_model_summary = false;
        run_opts.limit_train_batches = BatchLimit::Fraction(1.0);
        run_opts.limit_val_batches = BatchLimit::Count(opts.steps_per_trial as usize);
        // Lightning's trials run the fit loop alone: no sanity check.
        run_opts.num_sanity_val_steps = 0;
        let saved: Vec<(String, Tensor)> = {
            let m = model.lock().unwrap_or_else(|p| p.into_inner());
            tch::no_grad(|| m.state_dict().into_iter().map(|(k, t)| (k, t.copy())).collect())
        };
        let mut trial = |size: usize| -> Result<bool> {
            let resized = train.resized(size).unwrap_or_else(|| Err(Error::state("the loader cannot be resized")))?;
            let mut runner = Trainer::new(run_opts.clone())?;
            // A libtorch error raised as a panic (an op with a scalar
            // argument) is an error here too, out of memory included.
            match crate::tensor::tch_panic::catch(|| runner.fit(module, &*resized, val, None)) {
                Ok(()) => Ok(true),
                Err(e) if is_out_of_memory(&e) => Ok(false),
                Err(e) => Err(e.context(format!("scale_batch_size: the trial at batch size {size}"))),
            }
        };
        // No loader batches more than MAX_BATCH_SIZE.
        let max_val = opts.max_val.min(crate::data::MAX_BATCH_SIZE);
        let mut search = Search { size: start, dataset_len: train.dataset_len(), max_val, trial: &mut trial };
        let found = search.adjust(1.0, Some(opts.init_val)).0;
        let found = match opts.mode {
            BatchSizeMode::Power => search.power(found, opts.max_trials),
            BatchSizeMode::BinSearch => search.binsearch(found, opts.max_trials, opts.margin),
        };
        let restored = model.lock().unwrap_or_else(|p| p.into_inner()).load_state_dict(&saved, true);
        let found = found?;
        restored.map_err(|e| e.context("scale_batch_size: putting the weights back"))?;
        if found == 0 {
            // Power mode's trials ran out while halving 1.
            return Err(Error::invalid("scale_batch_size: the batch size fell to 0 (every size ran out of memory)"));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes Lightning's search tries, with trials that fit up to
    /// `fits` on a dataset of `len` samples.
    fn search(mode: BatchSizeMode, fits: usize, len: usize, opts: BatchSizeOptions) -> (usize, Vec<usize>) {
        let mut tried = Vec::new();
        let mut trial = |size: usize| {
            tried.push(size);
            Ok(size <= fits)
        };
        let mut s = Search { size: 16, dataset_len: Some(len), max_val: opts.max_val, trial: &mut trial };
        let start = s.adjust(1.0, Some(opts.init_val)).0;
        let found = match mode {
            BatchSizeMode::Power => s.power(start, opts.max_trials),
            BatchSizeMode::BinSearch => s.binsearch(start, opts.max_trials, opts.margin),
        }
        .unwrap();
        (found, tried)
    }

    #[test]
    fn power_doubles_until_out_of_memory_then_halves() {
        let o = BatchSizeOptions::default();
        assert_eq!(search(BatchSizeMode::Power, 40, 1000, o), (32, vec![2, 4, 8, 16, 32, 64]));
        // The dataset's length stops the doubling.
        assert_eq!(search(BatchSizeMode::Power, 10_000, 100, o).0, 128);
        // A size at the dataset's length that fails shrinks all the same.
        assert_eq!(search(BatchSizeMode::Power, 40, 64, o), (32, vec![2, 4, 8, 16, 32, 64]));
        let exact = BatchSizeOptions { margin: 0.0, ..o };
        assert_eq!(search(BatchSizeMode::BinSearch, 40, 64, exact).0, 40);
        // max_val stops it before trying.
        let capped = BatchSizeOptions { max_val: 20, ..o };
        assert_eq!(search(BatchSizeMode::Power, 10_000, 1000, capped), (20, vec![2, 4, 8, 16]));
    }

    #[test]
    fn binsearch_narrows_between_the_last_fit_and_the_first_failure() {
        let o = BatchSizeOptions { margin: 0.0, ..Default::default() };
        let (found, tried) = search(BatchSizeMode::BinSearch, 40, 1000, o);
        assert_eq!(found, 40);
        assert_eq!(tried, vec![2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41]);
        let with_margin = BatchSizeOptions::default();
        assert_eq!(search(BatchSizeMode::BinSearch, 40, 1000, with_margin).0, 38);
    }
}
