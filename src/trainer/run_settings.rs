//! Settings that hold while one run (fit, validate, test, predict) is on
//! the calling thread: the time limit of host callbacks, autograd's
//! anomaly detection, deterministic algorithms, cuDNN's benchmark flag,
//! barebones mode and the SIGINT / SIGTERM watch. All are restored when
//! the run ends, however it ends.
use super::options::{Deterministic, TrainerOptions};
use crate::error::Result;
use crate::tensor::runtime;
use std::cell::Cell;
use std::time::Duration;

thread_local! {
    static CALLBACK_TIMEOUT: Cell<Option<Duration>> = const { Cell::new(None) };
    static BAREBONES: Cell<Barebones> = const { Cell::new(Barebones::Off) };
}

/// Barebones mode on this thread, and whether a dropped log was reported.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Barebones {
    Off,
    On,
    Warned,
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

/// Whether a `log` call is dropped because the running trainer is in
/// barebones mode (Lightning's `self.log` under `Trainer(barebones=True)`);
/// the first dropped call of a run prints Lightning's warning.
pub fn barebones_drops_log() -> bool {
    BAREBONES.with(|b| match b.get() {
        Barebones::Off => false,
        Barebones::Warned => true,
        Barebones::On => {
            b.set(Barebones::Warned);
            eprintln!(
                "fulmen: warning: You are trying to `self.log()` but `Trainer(barebones=True)` is configured. \
                 Logging can impact raw speed so it is disabled under this setting."
            );
            true
        }
    })
}

/// Serializes the tests that change libtorch's process-wide flags.
#[cfg(test)]
pub(crate) fn test_global_flags_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The cuDNN benchmark flag a run sets, as Lightning's `_set_torch_flags`:
/// the option when given, else off when deterministic, else untouched.
pub(crate) fn benchmark_for(opts: &TrainerOptions) -> Option<bool> {
    match (opts.benchmark, opts.deterministic) {
        (Some(b), _) => Some(b),
        (None, Deterministic::Off) => None,
        (None, _) => Some(false),
    }
}

/// What a run changed, restored when dropped (also when `enter` fails
/// half-way).
#[derive(Default)]
struct Restore {
    timeout: Option<Option<Duration>>,
    anomaly: Option<bool>,
    /// The (on, warn_only) pair replaced.
    deterministic: Option<(bool, bool)>,
    benchmark: Option<bool>,
    barebones: Option<Barebones>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(previous) = self.timeout {
            CALLBACK_TIMEOUT.with(|c| c.set(previous));
        }
        if let Some(previous) = self.barebones {
            BAREBONES.with(|c| c.set(previous));
        }
        if let Some(previous) = self.anomaly {
            let _ = runtime::set_anomaly(previous);
        }
        if let Some(previous) = self.benchmark {
            let _ = runtime::set_cudnn_benchmark(previous);
        }
        if let Some((on, warn_only)) = self.deterministic {
            let _ = runtime::set_deterministic_mode(on, warn_only);
        }
    }
}

/// The settings of one run; dropping it restores the previous ones.
pub(crate) struct RunSettings {
    _restore: Restore,
    _signals: super::interrupt::SignalGuard,
}

impl RunSettings {
    /// Applies `opts.callback_timeout`, `opts.detect_anomaly`,
    /// `opts.deterministic` (libtorch's deterministic algorithms, as
    /// Lightning's `Trainer(deterministic=True)` or `"warn"`),
    /// `opts.benchmark` and `opts.barebones`.
    pub fn enter(opts: &TrainerOptions) -> Result<RunSettings> {
        let mut restore = Restore::default();
        if opts.deterministic != Deterministic::Off {
            let want = (true, opts.deterministic == Deterministic::Warn);
            let previous = runtime::deterministic_mode();
            if previous != want {
                runtime::set_deterministic_mode(want.0, want.1)?;
                restore.deterministic = Some(previous);
            }
        }
        if opts.deterministic != Deterministic::Off && opts.benchmark == Some(true) {
            eprintln!(
                "fulmen: warning: You passed `deterministic=True` and `benchmark=True`. Note that PyTorch ignores \
                 torch.backends.cudnn.deterministic=True when torch.backends.cudnn.benchmark=True."
            );
        }
        if let Some(b) = benchmark_for(opts) {
            let previous = runtime::cudnn_benchmark();
            if previous != b {
                runtime::set_cudnn_benchmark(b)?;
                restore.benchmark = Some(previous);
            }
        }
        if opts.detect_anomaly && !runtime::anomaly() {
            runtime::set_anomaly(true)?;
            restore.anomaly = Some(false);
        }
        restore.timeout = Some(CALLBACK_TIMEOUT.with(|c| c.replace(opts.callback_timeout)));
        let mode = if opts.barebones { Barebones::On } else { Barebones::Off };
        restore.barebones = Some(BAREBONES.with(|c| c.replace(mode)));
        let _signals = super::interrupt::SignalGuard::install(opts.handle_signals);
        Ok(RunSettings { _restore: restore, _signals })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_hold_for_the_run_and_are_restored() {
        let _lock = test_global_flags_lock();
        let mut opts = TrainerOptions::default();
        opts.set("deterministic", "warn").unwrap();
        opts.set("handle_signals", "false").unwrap();
        runtime::set_cudnn_benchmark(true).unwrap();
        {
            let _run = RunSettings::enter(&opts).unwrap();
            assert_eq!(runtime::deterministic_mode(), (true, true));
            assert!(!runtime::cudnn_benchmark(), "deterministic turns benchmark off when it is not given");
        }
        assert_eq!(runtime::deterministic_mode(), (false, false));
        assert!(runtime::cudnn_benchmark());
        opts.set("deterministic", "false").unwrap();
        opts.set("benchmark", "false").unwrap();
        {
            let _run = RunSettings::enter(&opts).unwrap();
            assert!(!runtime::cudnn_benchmark());
        }
        assert!(runtime::cudnn_benchmark());
        runtime::set_cudnn_benchmark(false).unwrap();
    }

    #[test]
    fn barebones_drops_logs_during_its_run_only() {
        let mut opts = TrainerOptions::default();
        opts.set("barebones", "true").unwrap();
        opts.set("handle_signals", "false").unwrap();
        assert!(!barebones_drops_log());
        {
            let _run = RunSettings::enter(&opts).unwrap();
            assert!(barebones_drops_log());
            assert!(barebones_drops_log());
        }
        assert!(!barebones_drops_log());
    }
}
