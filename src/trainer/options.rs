//! Trainer options, with Lightning's names and defaults.
use crate::error::{Error, Result};
use std::path::PathBuf;

/// How many batches of a loader an epoch uses (`limit_*_batches`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BatchLimit {
    /// Every batch.
    All,
    /// A fraction of the batches, in (0, 1].
    Fraction(f64),
    /// At most this many batches.
    Count(usize),
}

impl BatchLimit {
    /// Reads Lightning's convention: a float in [0, 1] is a fraction (1.0 =
    /// all), a whole number above 1 is a count.
    pub fn from_f64(v: f64) -> Result<Self> {
        if !v.is_finite() || v < 0.0 {
            return Err(Error::invalid(format!("batch limit {v} must be a fraction in [0, 1] or a count")));
        }
        if v == 1.0 {
            Ok(BatchLimit::All)
        } else if v < 1.0 {
            Ok(BatchLimit::Fraction(v))
        } else if v.fract() == 0.0 {
            Ok(BatchLimit::Count(v as usize))
        } else {
            Err(Error::invalid(format!("batch limit {v} above 1 must be a whole number of batches")))
        }
    }

    /// Number of batches to run out of `available` (None = unknown length).
    pub fn apply(self, available: Option<usize>) -> Option<usize> {
        match (self, available) {
            (BatchLimit::All, a) => a,
            (BatchLimit::Count(c), Some(a)) => Some(c.min(a)),
            (BatchLimit::Count(c), None) => Some(c),
            (BatchLimit::Fraction(f), Some(a)) => Some((a as f64 * f) as usize),
            (BatchLimit::Fraction(_), None) => None,
        }
    }
}

/// Options of a [`crate::trainer::Trainer`].
#[derive(Debug, Clone)]
pub struct TrainerOptions {
    /// Stop after this many epochs. `None` with `max_steps == -1` means
    /// 1000, as Lightning.
    pub max_epochs: Option<i64>,
    /// Stop after this many optimizer steps; -1 for no limit.
    pub max_steps: i64,
    /// Batches per training epoch.
    pub limit_train_batches: BatchLimit,
    /// Batches per validation run.
    pub limit_val_batches: BatchLimit,
    /// Batches per test run.
    pub limit_test_batches: BatchLimit,
    /// Batches per predict run.
    pub limit_predict_batches: BatchLimit,
    /// Write step-level metrics to the loggers every N steps.
    pub log_every_n_steps: i64,
    /// Seed everything at the start of fit / validate / test / predict.
    pub seed: Option<u64>,
    /// Folder for logs and checkpoints (Lightning's `default_root_dir`).
    pub default_root_dir: PathBuf,
    /// Print progress to stderr.
    pub enable_progress_bar: bool,
    /// Write metrics to `<root>/lightning_logs/version_N/metrics.csv`.
    pub enable_csv_logger: bool,
    /// End the run with an error when a training loss is NaN or infinite.
    pub detect_nonfinite_loss: bool,
}

impl Default for TrainerOptions {
    fn default() -> Self {
        TrainerOptions {
            max_epochs: None,
            max_steps: -1,
            limit_train_batches: BatchLimit::All,
            limit_val_batches: BatchLimit::All,
            limit_test_batches: BatchLimit::All,
            limit_predict_batches: BatchLimit::All,
            log_every_n_steps: 50,
            seed: None,
            default_root_dir: PathBuf::from("."),
            enable_progress_bar: true,
            enable_csv_logger: true,
            detect_nonfinite_loss: true,
        }
    }
}

impl TrainerOptions {
    /// Checks the options for values Lightning would refuse.
    pub fn validate(&self) -> Result<()> {
        if let Some(e) = self.max_epochs {
            if e < -1 {
                return Err(Error::invalid(format!("max_epochs must be -1 (no limit) or >= 0, got {e}")));
            }
        }
        if self.max_steps < -1 {
            return Err(Error::invalid(format!("max_steps must be -1 (no limit) or >= 0, got {}", self.max_steps)));
        }
        if self.log_every_n_steps < 1 {
            return Err(Error::invalid(format!("log_every_n_steps must be >= 1, got {}", self.log_every_n_steps)));
        }
        Ok(())
    }

    /// The epoch limit in effect (`None` = unlimited).
    pub fn epoch_limit(&self) -> Option<i64> {
        match self.max_epochs {
            Some(-1) => None,
            Some(e) => Some(e),
            None if self.max_steps == -1 => Some(1000),
            None => None,
        }
    }
}
