//! ThroughputMonitor: batches and samples per second over a sliding window
//! of batches, per device and (with several ranks) for the whole job, for
//! training, validation, test and predict, as Lightning's
//! `ThroughputMonitor` with fabric's `Throughput` (no FLOP counts: there is
//! no `flops_per_batch`). A batch's samples are its first tensor's first
//! dimension. Names: `train/time`, `train/batches`, `train/samples`,
//! `train/device/batches_per_sec`, `train/device/samples_per_sec`, and
//! `train/batches_per_sec`, `train/samples_per_sec` with several ranks.
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::collections::VecDeque;
use std::time::Instant;

/// The largest window a ThroughputMonitor takes.
pub const MAX_WINDOW: usize = 1 << 20;

/// One stage's counters (fabric's `Throughput` and the callback's totals).
#[derive(Debug, Default)]
struct StageMeter {
    /// When the current measurement began (moved on past validation runs).
    t0: Option<Instant>,
    /// (elapsed seconds, batches, samples) of the last `window` updates.
    window: VecDeque<(f64, u64, u64)>,
    batches: u64,
    samples: u64,
    /// Evaluation batches over the whole run (Lightning's `total.ready`).
    iter: i64,
}

impl StageMeter {
    fn reset(&mut self) {
        self.window.clear();
        self.batches = 0;
        self.samples = 0;
    }

    fn update(&mut self, samples: u64, cap: usize) {
        let elapsed = self.t0.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
        self.batches += 1;
        self.samples += samples;
        // fabric's _MonotonicWindow: time must grow.
        if self.window.back().is_some_and(|(t, _, _)| elapsed <= *t) {
            return;
        }
        if self.window.len() == cap {
            self.window.pop_front();
        }
        self.window.push_back((elapsed, self.batches, self.samples));
    }

    /// fabric's `Throughput.compute`, the names prefixed with `stage`.
    fn compute(&self, stage: &str, sep: &str, cap: usize, world: usize) -> Vec<(String, f64)> {
        let Some(&(time, batches, samples)) = self.window.back() else { return Vec::new() };
        let mut m = vec![
            (format!("{stage}{sep}time"), time),
            (format!("{stage}{sep}batches"), batches as f64),
            (format!("{stage}{sep}samples"), samples as f64),
        ];
        if self.window.len() == cap {
            let (t0, b0, s0) = self.window[0];
            let dt = time - t0;
            let (dev_batches, dev_samples) = ((batches - b0) as f64 / dt, (samples - s0) as f64 / dt);
            m.push((format!("{stage}{sep}device{sep}batches_per_sec"), dev_batches));
            m.push((format!("{stage}{sep}device{sep}samples_per_sec"), dev_samples));
            if world > 1 {
                m.push((format!("{stage}{sep}batches_per_sec"), dev_batches * world as f64));
                m.push((format!("{stage}{sep}samples_per_sec"), dev_samples * world as f64));
            }
        }
        m
    }
}

/// The ThroughputMonitor callback.
#[derive(Debug)]
pub struct ThroughputMonitor {
    window: usize,
    separator: String,
    /// train, validate, test, predict.
    meters: [StageMeter; 4],
    /// When the last validation inside fit began.
    val_began: Option<Instant>,
}

impl ThroughputMonitor {
    /// A monitor averaging over `window_size` batches (>= 2; Lightning's
    /// default is 100) with `separator` between name parts ("/").
    pub fn new(window_size: usize, separator: &str) -> Result<Self> {
        if !(2..=MAX_WINDOW).contains(&window_size) {
            return Err(Error::invalid(format!(
                "ThroughputMonitor: window_size must be in [2, {MAX_WINDOW}], got {window_size}"
            )));
        }
        if separator.is_empty() || separator.contains(['\n', '\r', ',', '"']) {
            return Err(Error::invalid(format!("ThroughputMonitor: the separator {separator:?} cannot be in a name")));
        }
        Ok(ThroughputMonitor {
            window: window_size,
            separator: separator.to_string(),
            meters: Default::default(),
            val_began: None,
        })
    }

    fn stage_of(hook: Hook) -> Option<(usize, &'static str)> {
        use Hook::*;
        match hook {
            TrainStart | TrainBatchEnd => Some((0, "train")),
            ValidationStart | ValidationBatchEnd | ValidationEnd => Some((1, "validate")),
            TestStart | TestBatchEnd => Some((2, "test")),
            PredictStart | PredictBatchEnd => Some((3, "predict")),
            _ => None,
        }
    }
}

impl Callback for ThroughputMonitor {
    fn name(&self) -> String {
        "ThroughputMonitor".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        let Some((i, stage)) = Self::stage_of(ctx.hook) else { return Ok(()) };
        if ctx.state.sanity_checking {
            return Ok(());
        }
        let fitting = ctx.stage == "fit";
        let due = {
            let n = ctx.state.log_every_n_steps.max(1);
            (ctx.state.log_step + 1) % n == 0 || ctx.state.should_stop
        };
        let (window, world) = (self.window, ctx.state.world_size.max(1));
        use Hook::*;
        match ctx.hook {
            TrainStart | ValidationStart | TestStart | PredictStart => {
                let m = &mut self.meters[i];
                // Inside fit every validation run starts afresh; a later
                // validate / test / predict call goes on counting.
                if fitting || ctx.hook == TrainStart || m.t0.is_none() {
                    m.reset();
                }
                m.t0 = Some(Instant::now());
                if ctx.hook == ValidationStart && fitting {
                    self.val_began = m.t0;
                }
            }
            ValidationEnd if fitting => {
                // As Lightning, training's clock resumes where it stood, as
                // of the validation's last batch: the run does not count.
                let last = |m: &StageMeter| m.window.back().map_or(0.0, |w| w.0);
                let (train_last, val_last) = (last(&self.meters[0]), last(&self.meters[1]));
                if let Some(began) = self.val_began.take() {
                    let resumed = began + std::time::Duration::from_secs_f64(val_last);
                    self.meters[0].t0 = resumed.checked_sub(std::time::Duration::from_secs_f64(train_last));
                }
            }
            TrainBatchEnd | ValidationBatchEnd | TestBatchEnd | PredictBatchEnd => {
                // The device's queued work first, or the clock reads the
                // launch time (Lightning synchronizes CUDA here).
                if let Some(sync) = &ctx.state.device_sync {
                    sync.wait()?;
                }
                let samples = ctx.batch.and_then(|b| b.first()).and_then(|t| t.size().first().copied()).unwrap_or(1);
                let m = &mut self.meters[i];
                m.update(samples.max(1) as u64, window);
                m.iter += 1;
                let (metrics, step) = if ctx.hook == TrainBatchEnd {
                    // Only when the optimizers stepped (accumulation over).
                    let stepped = ctx.state.batches_stepped > ctx.state.log_step;
                    ((stepped && due).then(|| m.compute(stage, &self.separator, window, world)), ctx.state.log_step)
                } else {
                    (due.then(|| m.compute(stage, &self.separator, window, world)), m.iter)
                };
                if let Some(metrics) = metrics.filter(|v| !v.is_empty()) {
                    ctx.state.log_requests.push((step, metrics));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rates_as_fabric() {
        let mut m = StageMeter { t0: Some(Instant::now()), ..Default::default() };
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(2));
            m.update(8, 3);
        }
        let got = m.compute("train", "/", 3, 2);
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "train/time",
                "train/batches",
                "train/samples",
                "train/device/batches_per_sec",
                "train/device/samples_per_sec",
                "train/batches_per_sec",
                "train/samples_per_sec"
            ]
        );
        let (dev_b, dev_s, all_b) = (got[3].1, got[4].1, got[5].1);
        assert!((dev_s / dev_b - 8.0).abs() < 1e-9 && (all_b / dev_b - 2.0).abs() < 1e-9);
        assert!(ThroughputMonitor::new(1, "/").is_err() && ThroughputMonitor::new(10, "").is_err());
    }
}
