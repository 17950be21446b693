//! Timer: tracks the time spent in each stage and stops training once a
//! duration is exceeded (the Trainer's `max_time` uses it).
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The Timer callback.
pub struct Timer {
    duration: Option<Duration>,
    check_each_step: bool,
    started: Option<Instant>,
    /// Seconds from earlier runs (restored from a checkpoint).
    offset: f64,
    /// Set when the timer stopped training.
    pub stopped: bool,
}

/// Reads a duration: seconds ("90", "1.5") or Lightning's "DD:HH:MM:SS",
/// at most `MAX_DURATION`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = || Error::invalid(format!("duration {text:?} must be seconds or \"DD:HH:MM:SS\""));
    let t = text.trim();
    if let Ok(s) = t.parse::<f64>() {
        if s.is_finite() && s >= 0.0 {
            return Duration::try_from_secs_f64(s).map_err(|_| too_long()).and_then(check_max);
        }
        return Err(bad());
    }
    let parts: Vec<&str> = t.split(':').collect();
    if parts.len() != 4 {
        return Err(bad());
    }
    let n: Vec<u64> =
        parts.iter().map(|p| p.parse::<u64>()).collect::<std::result::Result<_, _>>().map_err(|_| bad())?;
    let secs = n[0]
        .checked_mul(24)
        .and_then(|h| h.checked_add(n[1]))
        .and_then(|h| h.checked_mul(60))
        .and_then(|m| m.checked_add(n[2]))
        .and_then(|m| m.checked_mul(60))
        .and_then(|s| s.checked_add(n[3]))
        .ok_or_else(too_long)?;
    Ok(Duration::from_secs(secs)).and_then(check_max)
}

/// The longest duration an option accepts: 100 years.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn too_long() -> Error {
    Error::invalid(format!("a duration may be at most {} seconds (100 years)", MAX_DURATION.as_secs()))
}

fn check_max(d: Duration) -> Result<Duration> {
    if d > MAX_DURATION {
        return Err(too_long());
    }
    Ok(d)
}

impl Timer {
    /// A timer stopping after `duration` (None: only measures), checked
    /// every step (`interval` "step") or every epoch ("epoch").
    pub fn new(duration: Option<Duration>, interval: &str) -> Result<Self> {
        let check_each_step = match interval {
            "step" => true,
            "epoch" => false,
            other => {
                return Err(Error::invalid(format!("Timer interval must be \"step\" or \"epoch\", got {other:?}")))
            }
        };
        Ok(Timer { duration, check_each_step, started: None, offset: 0.0, stopped: false })
    }

    /// Seconds spent in fit, this run and restored ones.
    pub fn elapsed(&self) -> f64 {
        self.offset + self.started.map_or(0.0, |s| s.elapsed().as_secs_f64())
    }

    fn check(&mut self, ctx: &mut HookContext) {
        ctx.state.time_elapsed.insert("fit".into(), self.elapsed());
        if let Some(d) = self.duration {
            if self.elapsed() >= d.as_secs_f64() {
                ctx.state.should_stop = true;
                self.stopped = true;
            }
        }
    }
}

impl Callback for Timer {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn name(&self) -> String {
        "Timer".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match ctx.hook {
            Hook::TrainStart => self.started = Some(Instant::now()),
            Hook::TrainBatchEnd if self.check_each_step => self.check(ctx),
            Hook::TrainEpochEnd if !self.check_each_step => self.check(ctx),
            Hook::TrainEnd => {
                ctx.state.time_elapsed.insert("fit".into(), self.elapsed());
            }
            _ => {}
        }
        Ok(())
    }

    fn state_dict(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("time_elapsed_fit".to_string(), self.elapsed().to_string())])
    }

    /// Restores the seconds spent in earlier runs (none when the state has
    /// no entry); a time that is not a finite number >= 0 is a `Format`
    /// error and changes nothing.
    fn load_state_dict(&mut self, state: &BTreeMap<String, String>) -> Result<()> {
        let Some(text) = state.get("time_elapsed_fit") else {
            self.offset = 0.0;
            return Ok(());
        };
        let what = "Timer state: time_elapsed_fit";
        let seconds = crate::checkpoint::numbers::parse(text, crate::checkpoint::numbers::Infinity::Refused, what)?;
        if seconds < 0.0 {
            return Err(Error::format(format!("{what} {seconds} is negative")));
        }
        self.offset = seconds;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("00:01:00:05").unwrap(), Duration::from_secs(3605));
        assert!(parse_duration("1:2").is_err());
        assert!(parse_duration("-3").is_err());
        assert!(parse_duration("99999999999999999:23:59:59").is_err());
        assert!(parse_duration("1e300").is_err());
        assert_eq!(parse_duration("36500:00:00:00").unwrap(), MAX_DURATION);
    }
}
