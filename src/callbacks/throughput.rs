//! ThroughputMonitor: batches and samples per second over a sliding window
//! of batches, per device and (with several ranks) for the whole job, for
//! training, validation, test and predict, as Lightning's
//! `ThroughputMonitor` with fabric's `Throughput`. A batch's samples are its
//! first tensor's first dimension. Names: `train/time`, `train/batches`,
//! `train/samples`, `train/device/batches_per_sec`,
//! `train/device/samples_per_sec`, and `train/batches_per_sec`,
//! `train/samples_per_sec` with several ranks; given the FLOPs of a batch
//! (Lightning's `flops_per_batch`), `train/device/flops_per_sec` (and
//! `train/flops_per_sec` with several ranks), and given the device's peak
//! FLOPs, `train/device/mfu`.
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
    /// (elapsed seconds, batches, samples, FLOPs of the batch over all
    /// ranks) of the last `window` updates.
    window: VecDeque<(f64, u64, u64, f64)>,
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

    fn update(&mut self, samples: u64, flops: f64, cap: usize) {
        let elapsed = self.t0.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
        self.batches += 1;
        self.samples += samples;
        // fabric's _MonotonicWindow: time must grow.
        if self.window.back().is_some_and(|(t, _, _, _)| elapsed <= *t) {
            return;
        }
        if self.window.len() == cap {
            self.window.pop_front();
        }
        self.window.push_back((elapsed, self.batches, self.samples, flops));
    }

    /// fabric's `Throughput.compute`, the names prefixed with `stage`.
    fn compute(&self, stage: &str, sep: &str, cap: usize, world: usize, flops: &Flops) -> Vec<(String, f64)> {
        let Some(&(time, batches, samples, _)) = self.window.back() else { return Vec::new() };
        let mut m = vec![
            (format!("{stage}{sep}time"), time),
            (format!("{stage}{sep}batches"), batches as f64),
            (format!("{stage}{sep}samples"), samples as f64),
        ];
        if self.window.len() == cap {
            let (t0, b0, s0, f0) = self.window[0];
            let dt = time - t0;
            let (dev_batches, dev_samples) = ((batches - b0) as f64 / dt, (samples - s0) as f64 / dt);
            m.push((format!("{stage}{sep}device{sep}batches_per_sec"), dev_batches));
            m.push((format!("{stage}{sep}device{sep}samples_per_sec"), dev_samples));
            if world > 1 {
                m.push((format!("{stage}{sep}batches_per_sec"), dev_batches * world as f64));
                m.push((format!("{stage}{sep}samples_per_sec"), dev_samples * world as f64));
            }
            if flops.per_batch.is_some() {
                // fabric sums the window's FLOPs but the first update's.
                let all = self.window.iter().map(|w| w.3).sum::<f64>() - f0;
                let per_sec = all / dt;
                let dev = per_sec / world as f64;
                if world > 1 {
                    m.push((format!("{stage}{sep}flops_per_sec"), per_sec));
                }
                m.push((format!("{stage}{sep}device{sep}flops_per_sec"), dev));
                if let Some(peak) = flops.available {
                    m.push((format!("{stage}{sep}device{sep}mfu"), dev / peak));
                }
            }
        }
        m
    }
}

/// What the FLOP metrics need: a batch's FLOPs on one device (Lightning's
/// `flops_per_batch`) and the device's peak FLOPs per second (Lightning's
/// `available_flops`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Flops {
    /// FLOPs of one batch on one device; `None`: no FLOP metrics.
    pub per_batch: Option<f64>,
    /// Peak FLOPs per second of one device; `None`: no `mfu`.
    pub available: Option<f64>,
}

impl Flops {
    /// Checks the values: finite and > 0.
    pub fn new(per_batch: Option<f64>, available: Option<f64>) -> Result<Self> {
        for (what, v) in [("flops_per_batch", per_batch), ("available_flops", available)] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(Error::invalid(format!("ThroughputMonitor: {what} must be a finite number > 0, got {v}")));
            }
        }
        Ok(Flops { per_batch, available })
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
    flops: Flops,
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
            flops: Flops::default(),
        })
    }

    /// The monitor with FLOP metrics (see [`Flops`]).
    pub fn with_flops(mut self, flops: Flops) -> Self {
        self.flops = flops;
        self
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
        let (window, world, flops) = (self.window, ctx.state.world_size.max(1), self.flops);
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
                // fabric keeps each update's FLOPs summed over the ranks.
                let batch_flops = flops.per_batch.map_or(0.0, |f| f * world as f64);
                m.update(samples.max(1) as u64, batch_flops, window);
                m.iter += 1;
                let (metrics, step) = if ctx.hook == TrainBatchEnd {
                    // Only when the optimizers stepped (accumulation over).
                    let stepped = ctx.state.batches_stepped > ctx.state.log_step;
                    let metrics = (stepped && due).then(|| m.compute(stage, &self.separator, window, world, &flops));
                    (metrics, ctx.state.log_step)
                } else {
                    (due.then(|| m.compute(stage, &self.separator, window, world, &flops)), m.iter)
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
            m.update(8, 0.0, 3);
        }
        let got = m.compute("train", "/", 3, 2, &Flops::default());
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

    #[test]
    fn flops_as_fabric() {
        // Times 1, 2, 3 s; 100 FLOPs per batch per device, two ranks.
        let mut m = StageMeter::default();
        for t in [1.0, 2.0, 3.0] {
            m.batches += 1;
            m.samples += 4;
            m.window.push_back((t, m.batches, m.samples, 200.0));
        }
        let flops = Flops::new(Some(100.0), Some(50.0)).unwrap();
        let got: std::collections::BTreeMap<String, f64> = m.compute("train", "/", 3, 2, &flops).into_iter().collect();
        // fabric: (sum - first) / (t_last - t_first) = 400 / 2 over the job.
        assert_eq!(got["train/flops_per_sec"], 200.0);
        assert_eq!(got["train/device/flops_per_sec"], 100.0);
        assert_eq!(got["train/device/mfu"], 2.0);
        let one = m.compute("train", "/", 3, 1, &Flops::new(Some(100.0), None).unwrap());
        let names: Vec<&str> = one.iter().map(|(k, _)| k.as_str()).collect();
        assert!(names.contains(&"train/device/flops_per_sec") && !names.contains(&"train/device/mfu"));
        assert!(!names.contains(&"train/flops_per_sec"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Flops::new(Some(bad), None).is_err() && Flops::new(None, Some(bad)).is_err());
        }
    }
}
