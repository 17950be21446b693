//! Logged metrics: per-step values, per-epoch means weighted by batch size,
//! and the callback metrics readable after a run (Lightning's semantics).
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};

/// Where a metric is aggregated and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFlags {
    /// Record the value of each step.
    pub on_step: bool,
    /// Record the mean over the epoch.
    pub on_epoch: bool,
    /// Show it in the progress output.
    pub prog_bar: bool,
    /// Average it over ranks before it is recorded (DDP).
    pub sync_dist: bool,
}

impl LogFlags {
    /// The flags as `on_step=True, on_epoch=False, ...` for messages.
    pub fn describe(&self) -> String {
        let b = |v: bool| if v { "True" } else { "False" };
        format!(
            "on_step={}, on_epoch={}, prog_bar={}, sync_dist={}",
            b(self.on_step),
            b(self.on_epoch),
            b(self.prog_bar),
            b(self.sync_dist)
        )
    }
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
    /// Names logged with sync_dist.
    sync: BTreeSet<String>,
    /// The flags each name was first logged with in this epoch.
    flags: BTreeMap<String, LogFlags>,
    /// While a batch is split over DP replicas: per step key, the weighted
    /// sum, the weight and the number of values logged for it.
    split: Option<BTreeMap<String, (f64, f64, usize)>>,
}

impl MetricStore {
    /// Records one logged value. A name keeps the flags it was first
    /// logged with in the epoch: logging it again with other flags is an
    /// error, as in Lightning ("twice ... with different arguments").
    pub fn log(&mut self, name: &str, value: f64, flags: LogFlags, batch_size: f64) -> Result<()> {
        match self.flags.get(name) {
            Some(first) if *first != flags => {
                return Err(Error::invalid(format!(
                    "metric {name:?} was logged with {} and now with {}: a name must be logged with the same flags \
                     every time (as Lightning's `self.log` twice with different arguments)",
                    first.describe(),
                    flags.describe()
                )))
            }
            Some(_) => {}
            None => {
                self.flags.insert(name.to_string(), flags);
            }
        }
        let both = flags.on_step && flags.on_epoch;
        if flags.sync_dist && !self.sync.contains(name) {
            self.sync.insert(name.to_string());
        }
        if flags.on_step {
            let key = if both { format!("{name}_step") } else { name.to_string() };
            let value = match self.split.as_mut() {
                Some(split) => {
                    let e = split.entry(key.clone()).or_insert((0.0, 0.0, 0));
                    *e = (e.0 + value * batch_size, e.1 + batch_size, e.2 + 1);
                    if e.2 > 1 && e.1 > 0.0 {
                        e.0 / e.1
                    } else {
                        value
                    }
                }
                None => value,
            };
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
        Ok(())
    }

    /// Starts a batch split over DP replicas: until [`MetricStore::end_split`]
    /// a step value logged by several chunks is their mean weighted by the
    /// chunks' batch sizes (epoch means are weighted anyway).
    pub fn begin_split(&mut self) {
        self.split = Some(BTreeMap::new());
    }

    /// Ends a split batch.
    pub fn end_split(&mut self) {
        self.split = None;
    }

    /// Averages the step values logged with sync_dist over ranks with
    /// `mean` (one collective for all of them) and records the averages.
    pub fn sync_step(&mut self, mean: &dyn Fn(&mut [f64]) -> Result<()>) -> Result<()> {
        let keys: Vec<String> = self.step.keys().filter(|k| self.is_synced(k)).cloned().collect();
        if keys.is_empty() {
            return Ok(());
        }
        let mut values: Vec<f64> = keys.iter().map(|k| self.step[k]).collect();
        mean(&mut values)?;
        for (k, v) in keys.into_iter().zip(values) {
            self.step.insert(k.clone(), v);
            if let Some(p) = self.progress_metrics.get_mut(&k) {
                *p = v;
            }
            self.callback_metrics.insert(k, v);
        }
        Ok(())
    }

    /// Whether `key` (a name, or a name with `_step` / `_epoch`) was logged
    /// with sync_dist.
    fn is_synced(&self, key: &str) -> bool {
        let base = key.strip_suffix("_step").or_else(|| key.strip_suffix("_epoch")).unwrap_or(key);
        self.sync.contains(key) || self.sync.contains(base)
    }

    /// Takes the step values logged since the last call.
    pub fn take_step_values(&mut self) -> BTreeMap<String, f64> {
        std::mem::take(&mut self.step)
    }

    /// Ends an epoch: turns accumulators into means, records them as
    /// callback metrics and returns them (named `x_epoch` when `x` was
    /// also logged per step).
    pub fn end_epoch(&mut self) -> BTreeMap<String, f64> {
        self.end_epoch_synced(&|_| Ok(())).unwrap_or_default()
    }

    /// [`MetricStore::end_epoch`], with the epoch means of sync_dist
    /// metrics averaged over ranks by `mean` (one collective).
    pub fn end_epoch_synced(&mut self, mean: &dyn Fn(&mut [f64]) -> Result<()>) -> Result<BTreeMap<String, f64>> {
        let mut out = BTreeMap::new();
        let done: Vec<(String, EpochAccumulator)> =
            std::mem::take(&mut self.epoch).into_iter().filter(|(_, a)| a.weight > 0.0).collect();
        let mut means: Vec<f64> = done.iter().map(|(_, a)| a.weighted_sum / a.weight).collect();
        mean_selected(&mut means, |i| self.sync.contains(&done[i].0), mean)?;
        for ((name, acc), mean) in done.into_iter().zip(means) {
            let key = if acc.on_step { format!("{name}_epoch") } else { name.clone() };
            self.callback_metrics.insert(key.clone(), mean);
            self.callback_metrics.insert(name.clone(), mean);
            if acc.prog_bar {
                self.progress_metrics.insert(key.clone(), mean);
            }
            out.insert(key, mean);
        }
        Ok(out)
    }
}

/// Averages the entries of `values` that `selected` picks over ranks with
/// `mean` (one collective for all of them; none when none is picked).
pub(crate) fn mean_selected(
    values: &mut [f64],
    selected: impl Fn(usize) -> bool,
    mean: &dyn Fn(&mut [f64]) -> Result<()>,
) -> Result<()> {
    let picked: Vec<usize> = (0..values.len()).filter(|i| selected(*i)).collect();
    if picked.is_empty() {
        return Ok(());
    }
    let mut chosen: Vec<f64> = picked.iter().map(|i| values[*i]).collect();
    mean(&mut chosen)?;
    for (i, v) in picked.into_iter().zip(chosen) {
        values[i] = v;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_mean_is_weighted_by_batch_size() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: false, on_epoch: true, prog_bar: false, sync_dist: false };
        m.log("acc", 1.0, f, 30.0).unwrap();
        m.log("acc", 0.0, f, 10.0).unwrap();
        let e = m.end_epoch();
        assert_eq!(e["acc"], 0.75);
        assert_eq!(m.callback_metrics["acc"], 0.75);
    }

    #[test]
    fn step_and_epoch_get_suffixes() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: true, on_epoch: true, prog_bar: true, sync_dist: false };
        m.log("loss", 2.0, f, 1.0).unwrap();
        m.log("loss", 4.0, f, 1.0).unwrap();
        assert_eq!(m.take_step_values()["loss_step"], 4.0);
        let e = m.end_epoch();
        assert_eq!(e["loss_epoch"], 3.0);
        assert_eq!(m.callback_metrics["loss"], 3.0);
        assert_eq!(m.progress_metrics["loss_epoch"], 3.0);
    }

    #[test]
    fn sync_dist_values_go_through_the_reduction() {
        let mut m = MetricStore::default();
        let synced = LogFlags { on_step: true, on_epoch: true, prog_bar: false, sync_dist: true };
        let local = LogFlags { on_step: true, on_epoch: true, prog_bar: false, sync_dist: false };
        m.log("loss", 2.0, synced, 1.0).unwrap();
        m.log("acc", 0.5, local, 1.0).unwrap();
        let double = |v: &mut [f64]| {
            v.iter_mut().for_each(|x| *x *= 2.0);
            Ok(())
        };
        m.sync_step(&double).unwrap();
        let step = m.take_step_values();
        assert_eq!((step["loss_step"], step["acc_step"]), (4.0, 0.5));
        assert_eq!(m.callback_metrics["loss_step"], 4.0);
        let e = m.end_epoch_synced(&double).unwrap();
        assert_eq!((e["loss_epoch"], e["acc_epoch"]), (4.0, 0.5));
    }

    #[test]
    fn a_split_batch_logs_the_weighted_mean_of_its_chunks() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: true, on_epoch: true, prog_bar: false, sync_dist: false };
        m.begin_split();
        m.log("loss", 1.0, f, 3.0).unwrap();
        m.log("loss", 3.0, f, 1.0).unwrap();
        m.end_split();
        assert_eq!(m.take_step_values()["loss_step"], 1.5);
        m.log("loss", 7.0, f, 4.0).unwrap();
        assert_eq!(m.take_step_values()["loss_step"], 7.0);
        assert_eq!(m.end_epoch()["loss_epoch"], (3.0 + 3.0 + 28.0) / 8.0);
    }
}
