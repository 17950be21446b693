//! Settings that hold while one run (fit, validate, test, predict) is on
//! the calling thread: the time limit of host callbacks, autograd's
//! anomaly detection, deterministic algorithms and the SIGINT / SIGTERM
//! watch. All are restored when
//! the run ends, however it ends.
use super::options::TrainerOptions;
use crate::error::Result;
use crate::tensor::runtime;
use std::cell::Cell;
use std::time::Duration;

thread_local! {
    static CALLBACK_TIMEOUT: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// The longest a host callback may run on this thread (the running
/// trainer's `callback_timeout`), if any.
pub fn callback_timeout() -> Option<Duration> {
    CALLBACK_TIMEOUT.with(Cell::get)
}

/// Gives a thread the run's callback limit: a loader worker's host calls
/// are bound as the loop's are. For threads fulmen starts for one run.
pub fn inherit_callback_timeout(limit: Option<Duration>) {
    CALLBACK_TIMEOUT.with(|c| c.set(limit));
}

/// The settings of one run; dropping it restores the previous ones.
pub(crate) struct RunSettings {
    timeout: Option<Duration>,
    anomaly: Option<bool>,
    deterministic: Option<bool>,
    _signals: super::interrupt::SignalGuard,
}

impl RunSettings {
    /// Applies `opts.callback_timeout`, `opts.detect_anomaly` and
    /// `opts.deterministic` (libtorch's deterministic algorithms, as
    /// Lightning's `Trainer(deterministic=True)`).
    pub fn enter(opts: &TrainerOptions) -> Result<RunSettings> {
        let deterministic = if opts.deterministic && !runtime::deterministic() {
            runtime::set_deterministic(true)?;
            Some(false)
        } else {
            None
        };
        let anomaly = if opts.detect_anomaly && !runtime::anomaly() {
            if let Err(e) = runtime::set_anomaly(true) {
                if let Some(previous) = deterministic {
                    let _ = runtime::set_deterministic(previous);
                }
                return Err(e);
            }
            Some(false)
        } else {
            None
        };
        let timeout = CALLBACK_TIMEOUT.with(|c| c.replace(opts.callback_timeout));
        let _signals = super::interrupt::SignalGuard::install(opts.handle_signals);
        Ok(RunSettings { timeout, anomaly, deterministic, _signals })
    }
}

impl Drop for RunSettings {
    fn drop(&mut self) {
        CALLBACK_TIMEOUT.with(|c| c.set(self.timeout));
        if let Some(previous) = self.anomaly {
            let _ = runtime::set_anomaly(previous);
        }
        if let Some(previous) = self.deterministic {
            let _ = runtime::set_deterministic(previous);
        }
    }
}
