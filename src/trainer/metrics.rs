//! Logged metrics: per-step values, per-epoch means weighted by batch size,
//! and the callback metrics readable after a run (Lightning's semantics).
use std::collections::BTreeMap;

/// Where a metric is aggregated and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFlags {
    /// Record the value of each step.
    pub on_step: bool,
    /// Record the mean over the epoch.
    pub on_epoch: bool,
    /// Show it in the progress output.
    pub prog_bar: bool,
}

#[derive(Debug, Clone, Default)]
struct EpochAccumulator {
    weighted_sum: f64,
    weight: f64,
    prog_bar: bool,
    on_step: bool,
}

/// Metrics of one run (fit, validate, test).
#[derive(Debug, Default)]
pub struct MetricStore {
    step: BTreeMap<String, f64>,
    epoch: BTreeMap<String, EpochAccumulator>,
    /// Latest value of every metric: epoch means and step values.
    pub callback_metrics: BTreeMap<String, f64>,
    /// Metrics shown in the progress output.
    pub progress_metrics: BTreeMap<String, f64>,
}

impl MetricStore {
    /// Records one logged value.
    pub fn log(&mut self, name: &str, value: f64, flags: LogFlags, batch_size: f64) {
        let both = flags.on_step && flags.on_epoch;
        if flags.on_step {
            let key = if both { format!("{name}_step") } else { name.to_string() };
            self.step.insert(key.clone(), value);
            self.callback_metrics.insert(key.clone(), value);
            if flags.prog_bar {
                self.progress_metrics.insert(key, value);
            }
        }
        if flags.on_epoch {
            let acc = self.epoch.entry(name.to_string()).or_default();
            acc.weighted_sum += value * batch_size;
            acc.weight += batch_size;
            acc.prog_bar |= flags.prog_bar;
            acc.on_step |= both;
        }
    }

    /// Takes the step values logged since the last call.
    pub fn take_step_values(&mut self) -> BTreeMap<String, f64> {
        std::mem::take(&mut self.step)
    }

    /// Ends an epoch: turns accumulators into means, records them as
    /// callback metrics and returns them (named `x_epoch` when `x` was
    /// also logged per step).
    pub fn end_epoch(&mut self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (name, acc) in std::mem::take(&mut self.epoch) {
            if acc.weight <= 0.0 {
                continue;
            }
            let mean = acc.weighted_sum / acc.weight;
            let key = if acc.on_step { format!("{name}_epoch") } else { name.clone() };
            self.callback_metrics.insert(key.clone(), mean);
            self.callback_metrics.insert(name.clone(), mean);
            if acc.prog_bar {
                self.progress_metrics.insert(key.clone(), mean);
            }
            out.insert(key, mean);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_mean_is_weighted_by_batch_size() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: false, on_epoch: true, prog_bar: false };
        m.log("acc", 1.0, f, 30.0);
        m.log("acc", 0.0, f, 10.0);
        let e = m.end_epoch();
        assert_eq!(e["acc"], 0.75);
        assert_eq!(m.callback_metrics["acc"], 0.75);
    }

    #[test]
    fn step_and_epoch_get_suffixes() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: true, on_epoch: true, prog_bar: true };
        m.log("loss", 2.0, f, 1.0);
        m.log("loss", 4.0, f, 1.0);
        assert_eq!(m.take_step_values()["loss_step"], 4.0);
        let e = m.end_epoch();
        assert_eq!(e["loss_epoch"], 3.0);
        assert_eq!(m.callback_metrics["loss"], 3.0);
        assert_eq!(m.progress_metrics["loss_epoch"], 3.0);
    }
}
