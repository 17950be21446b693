//! Settings that hold while one run (fit, validate, test, predict) is on
//! the calling thread: the time limit of host callbacks, autograd's
//! anomaly detection and the SIGINT / SIGTERM watch. All are restored when
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

/// The settings of one run; dropping it restores the previous ones.
pub(crate) struct RunSettings {
    timeout: Option<Duration>,
    anomaly: Option<bool>,
    _signals: super::interrupt::SignalGuard,
}

impl RunSettings {
    /// Applies `opts.callback_timeout` and `opts.detect_anomaly`.
    pub fn enter(opts: &TrainerOptions) -> Result<RunSettings> {
        let anomaly = if opts.detect_anomaly && !runtime::anomaly() {
            runtime::set_anomaly(true)?;
            Some(false)
        } else {
            None
        };
        let timeout = CALLBACK_TIMEOUT.with(|c| c.replace(opts.callback_timeout));
        let _signals = super::interrupt::SignalGuard::install(opts.handle_signals);
        Ok(RunSettings { timeout, anomaly, _signals })
    }
}

impl Drop for RunSettings {
    fn drop(&mut self) {
        CALLBACK_TIMEOUT.with(|c| c.set(self.timeout));
        if let Some(previous) = self.anomaly {
            let _ = runtime::set_anomaly(previous);
        }
    }
}
