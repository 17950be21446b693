//! EarlyStopping: stops training when a monitored metric stops improving,
//! reaches a threshold, diverges or becomes non-finite (Lightning's rules).
use super::monitor::Mode;
use crate::checkpoint::numbers::{self, Infinity};
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::collections::BTreeMap;

/// Options; `monitor` is required, the rest default as Lightning's.
#[derive(Debug, Clone)]
pub struct EarlyStoppingOptions {
    /// The metric to watch.
    pub monitor: String,
    /// Smallest change that counts as an improvement (default 0).
    pub min_delta: f64,
    /// Checks without improvement before stopping (default 3).
    pub patience: i64,
    /// Min or max (default min).
    pub mode: Mode,
    /// A missing metric is an error (default true).
    pub strict: bool,
    /// Stop when the metric is NaN or infinite (default true).
    pub check_finite: bool,
    /// Stop as soon as the metric is better than this.
    pub stopping_threshold: Option<f64>,
    /// Stop as soon as the metric is worse than this.
    pub divergence_threshold: Option<f64>,
    /// Check at the end of training epochs instead of after validation;
    /// `None` decides as Lightning does.
    pub check_on_train_epoch_end: Option<bool>,
}

impl EarlyStoppingOptions {
    /// Lightning's defaults for `monitor`.
    pub fn new(monitor: &str) -> Self {
        EarlyStoppingOptions {
            monitor: monitor.to_string(),
            min_delta: 0.0,
            patience: 3,
            mode: Mode::Min,
            strict: true,
            check_finite: true,
            stopping_threshold: None,
            divergence_threshold: None,
            check_on_train_epoch_end: None,
        }
    }
}

/// The EarlyStopping callback.
pub struct EarlyStopping {
    opts: EarlyStoppingOptions,
    /// Checks in a row without improvement.
    pub wait_count: i64,
    /// Epoch at which it stopped training (0 if it did not).
    pub stopped_epoch: i64,
    /// Best score seen.
    pub best_score: f64,
    /// Why it stopped, if it did.
    pub reason: Option<String>,
}

/// What EarlyStopping has seen (Lightning's `wait_count`, `stopped_epoch`,
/// `best_score`), as hooks read it during a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EarlyStoppingState {
    /// Checks in a row without improvement.
    pub wait_count: i64,
    /// Epoch at which it stopped training (0 if it did not).
    pub stopped_epoch: i64,
    /// Best score seen (+inf / -inf before one, for min / max).
    pub best_score: f64,
}

impl EarlyStopping {
    /// Its state now.
    pub fn state(&self) -> EarlyStoppingState {
        EarlyStoppingState {
            wait_count: self.wait_count,
            stopped_epoch: self.stopped_epoch,
            best_score: self.best_score,
        }
    }

    /// The state of the first EarlyStopping among `callbacks`, if any
    /// (Lightning's `trainer.early_stopping_callback`).
    pub fn first_state<'c>(
        callbacks: impl IntoIterator<Item = &'c Box<dyn crate::trainer::Callback>>,
    ) -> Option<EarlyStoppingState> {
        callbacks
            .into_iter()
            .find_map(|c| c.as_any().and_then(|a| a.downcast_ref::<EarlyStopping>()).map(EarlyStopping::state))
    }

    /// Creates the callback after checking the options.
    pub fn new(opts: EarlyStoppingOptions) -> Result<Self> {
        if opts.monitor.is_empty() {
            return Err(Error::invalid("EarlyStopping needs a metric to monitor"));
        }
        if opts.patience < 0 {
            return Err(Error::invalid(format!("patience must be >= 0, got {}", opts.patience)));
        }
        let best_score = opts.mode.worst();
        Ok(EarlyStopping { opts, wait_count: 0, stopped_epoch: 0, best_score, reason: None })
    }

    /// The signed min_delta: an improvement must beat the best by this much.
    fn improved(&self, current: f64) -> bool {
        match self.opts.mode {
            Mode::Min => current + self.opts.min_delta.abs() < self.best_score,
            Mode::Max => current - self.opts.min_delta.abs() > self.best_score,
        }
    }

    /// Applies Lightning's stopping criteria to `current`.
    fn evaluate(&mut self, current: f64) -> Option<String> {
        let m = &self.opts.monitor;
        let mode = self.opts.mode;
        if self.opts.check_finite && !current.is_finite() {
            return Some(format!(
                "Monitored metric {m} = {current} is not finite. Previous best value was {:.3}.",
                self.best_score
            ));
        }
        if let Some(t) = self.opts.stopping_threshold {
            if mode.better(current, t) {
                return Some(format!(
                    "Stopping threshold reached: {m} = {current} {} {t}.",
                    if mode == Mode::Min { "<" } else { ">" }
                ));
            }
        }
        if let Some(t) = self.opts.divergence_threshold {
            if mode.better(t, current) {
                return Some(format!(
                    "Divergence threshold reached: {m} = {current} {} {t}.",
                    if mode == Mode::Min { ">" } else { "<" }
                ));
            }
        }
        if self.improved(current) {
            self.best_score = current;
            self.wait_count = 0;
            return None;
        }
        self.wait_count += 1;
        (self.wait_count >= self.opts.patience).then(|| {
            format!(
                "Monitored metric {m} did not improve in the last {} records. Best score: {:.3}.",
                self.wait_count, self.best_score
            )
        })
    }

    fn check(&mut self, ctx: &mut HookContext) -> Result<()> {
        if ctx.state.fast_dev_run || ctx.state.sanity_checking {
            return Ok(());
        }
        let current = match ctx.state.callback_metrics.read(&self.opts.monitor)? {
            Some(v) => v,
            None if self.opts.strict => {
                return Err(Error::state(format!(
                "EarlyStopping could not find the monitored metric `{}`; available: {:?} (set strict=false to skip)",
                self.opts.monitor,
                ctx.state.callback_metrics.names()
            )))
            }
            None => return Ok(()),
        };
        if let Some(reason) = self.evaluate(current) {
            ctx.state.should_stop = true;
            self.stopped_epoch = ctx.state.epoch;
            self.reason = Some(reason);
        }
        Ok(())
    }

    fn check_on_train_epoch_end(&self, ctx: &HookContext) -> bool {
        self.opts.check_on_train_epoch_end.unwrap_or(
            ctx.state.val_once_per_epoch && ctx.state.check_val_every_n_epoch == Some(1)
                || ctx.state.num_val_batches == 0,
        )
    }
}

impl Callback for EarlyStopping {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn name(&self) -> String {
        format!("EarlyStopping{{monitor={:?}, mode={:?}}}", self.opts.monitor, self.opts.mode.as_str())
    }

    fn kind(&self) -> String {
        "EarlyStopping".into()
    }

    fn monitors(&self) -> bool {
        true
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        let checked = match ctx.hook {
            Hook::TrainEpochEnd if self.check_on_train_epoch_end(ctx) => self.check(ctx),
            Hook::ValidationEnd if ctx.stage == "fit" && !self.check_on_train_epoch_end(ctx) => self.check(ctx),
            _ => Ok(()),
        };
        // What hooks read of the run's first EarlyStopping: the first one
        // to get a hook claims the slot (the run calls its callbacks in
        // order), and keeps it current.
        let me = std::ptr::from_ref(self) as usize;
        if ctx.state.early_stopping.is_none_or(|(owner, _)| owner == me) {
            ctx.state.early_stopping = Some((me, self.state()));
        }
        checked
    }

    fn lightning_state_key(&self) -> Option<String> {
        Some(format!(
            "EarlyStopping{{'monitor': {}, 'mode': '{}'}}",
            crate::checkpoint::lightning::py_repr_opt(Some(&self.opts.monitor)),
            self.opts.mode.as_str()
        ))
    }

    fn state_dict(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("wait_count".to_string(), self.wait_count.to_string()),
            ("stopped_epoch".to_string(), self.stopped_epoch.to_string()),
            ("best_score".to_string(), self.best_score.to_string()),
            ("patience".to_string(), self.opts.patience.to_string()),
        ])
    }

    /// Restores the counters and the best score: counts are whole numbers,
    /// not negative; the best score a number (infinite where it starts, or
    /// after an infinite metric), never NaN; anything else is a `Format`
    /// error and changes nothing.
    fn load_state_dict(&mut self, state: &BTreeMap<String, String>) -> Result<()> {
        let num = |k: &str, allowed: Infinity| -> Result<f64> {
            let v = state
                .get(k)
                .ok_or_else(|| Error::format(format!("EarlyStopping state: `{k}` is missing or not a number")))?;
            numbers::parse(v, allowed, &format!("EarlyStopping state: `{k}`"))
        };
        let count = |k: &str| -> Result<i64> {
            let v = num(k, Infinity::Refused)?;
            if v.fract() != 0.0 || !(0.0..=crate::checkpoint::MAX_COUNTER as f64).contains(&v) {
                return Err(Error::format(format!("EarlyStopping state: `{k}` = {v} is not a count")));
            }
            Ok(v as i64)
        };
        let wait_count = count("wait_count")?;
        let stopped_epoch = count("stopped_epoch")?;
        let best_score = num("best_score", Infinity::Allowed)?;
        self.wait_count = wait_count;
        self.stopped_epoch = stopped_epoch;
        self.best_score = best_score;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patience_min_delta_thresholds_and_non_finite() {
        let mut es =
            EarlyStopping::new(EarlyStoppingOptions { patience: 2, min_delta: 0.1, ..EarlyStoppingOptions::new("l") })
                .unwrap();
        assert!(es.evaluate(1.0).is_none());
        assert!(es.evaluate(0.95).is_none()); // not better by 0.1
        assert_eq!(es.wait_count, 1);
        assert!(es.evaluate(0.85).is_none()); // better by more than 0.1
        assert_eq!(es.wait_count, 0);
        assert!(es.evaluate(0.9).is_none());
        assert!(es.evaluate(0.9).unwrap().contains("did not improve"));
        let mut es = EarlyStopping::new(EarlyStoppingOptions {
            stopping_threshold: Some(0.5),
            ..EarlyStoppingOptions::new("l")
        })
        .unwrap();
        assert!(es.evaluate(0.4).unwrap().contains("threshold"));
        let mut es = EarlyStopping::new(EarlyStoppingOptions {
            divergence_threshold: Some(5.0),
            ..EarlyStoppingOptions::new("l")
        })
        .unwrap();
        assert!(es.evaluate(6.0).unwrap().contains("Divergence"));
        let mut es = EarlyStopping::new(EarlyStoppingOptions::new("l")).unwrap();
        assert!(es.evaluate(f64::NAN).unwrap().contains("not finite"));
        let mut es =
            EarlyStopping::new(EarlyStoppingOptions { mode: Mode::Max, ..EarlyStoppingOptions::new("acc") }).unwrap();
        assert!(es.evaluate(0.5).is_none());
        assert!(es.evaluate(0.6).is_none());
        assert_eq!(es.best_score, 0.6);
    }
}
