//! Lightning's `SpikeDetection` callback (fabric's rules): after every
//! training batch the loss is compared with the running mean of the last
//! `window` losses; a loss that is not an improvement on the previous one
//! and differs from the mean by at least `atol` and by at least `rtol`
//! times the mean (each check skipped when its tolerance is unset), or a
//! non-finite loss with `finite_only`, is a spike. A spike lists its batch
//! and the one before in a JSON file of batches to skip and fails the fit
//! (Lightning raises `TrainingSpikeException`), naming the batch.
use super::monitor::Mode;
use crate::error::{Error, ErrorCode, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};

/// The largest `window` accepted.
pub const MAX_SPIKE_WINDOW: usize = 1 << 20;

/// The callback's arguments; the defaults are Lightning's.
#[derive(Debug, Clone, PartialEq)]
pub struct SpikeDetectionOptions {
    /// A lower loss is an improvement (min, the default) or a higher one.
    pub mode: Mode,
    /// Losses in the running mean (default 10).
    pub window: usize,
    /// Batches of each epoch (by index) never checked (default 1).
    pub warmup: i64,
    /// The absolute tolerance (default none).
    pub atol: Option<f64>,
    /// The relative tolerance, times the running mean (default 2).
    pub rtol: Option<f64>,
    /// The JSON file of batches to skip (a path ending in `.json`), or its
    /// folder (`skip_batches.json` in it); `None`: `skip_batches.json` in
    /// the trainer's `default_root_dir`.
    pub exclude_batches_path: Option<PathBuf>,
    /// A NaN or infinite loss is a spike (default true); otherwise a NaN
    /// is never one, an infinite one only by the tolerances, and neither
    /// joins the running mean.
    pub finite_only: bool,
}

impl Default for SpikeDetectionOptions {
    fn default() -> Self {
        SpikeDetectionOptions {
            mode: Mode::Min,
            window: 10,
            warmup: 1,
            atol: None,
            rtol: Some(2.0),
            exclude_batches_path: None,
            finite_only: true,
        }
    }
}

impl SpikeDetectionOptions {
    /// Checks the options.
    pub fn validate(&self) -> Result<()> {
        if self.window == 0 || self.window > MAX_SPIKE_WINDOW {
            return Err(Error::invalid(format!(
                "SpikeDetection: window must be 1 to {MAX_SPIKE_WINDOW}, got {}",
                self.window
            )));
        }
        if self.warmup < 0 {
            return Err(Error::invalid(format!("SpikeDetection: warmup must be >= 0, got {}", self.warmup)));
        }
        for (what, tol) in [("atol", self.atol), ("rtol", self.rtol)] {
            if tol.is_some_and(|t| !t.is_finite()) {
                return Err(Error::invalid(format!("SpikeDetection: {what} must be finite (or unset)")));
            }
        }
        if self.exclude_batches_path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(Error::invalid("SpikeDetection: exclude_batches_path is empty"));
        }
        Ok(())
    }
}

/// The SpikeDetection callback.
pub struct SpikeDetection {
    opts: SpikeDetectionOptions,
    /// The last `window` losses taken in; `None` for a NaN, which the mean
    /// (torchmetrics' `MeanMetric`) skips though it takes a place.
    window: VecDeque<Option<f64>>,
    /// The last loss taken in (0 before any).
    last_val: f64,
    /// The batches to skip: each spike's and the one before it.
    bad_batches: Vec<i64>,
}

impl SpikeDetection {
    /// The callback with `opts` (checked).
    pub fn new(opts: SpikeDetectionOptions) -> Result<Self> {
        opts.validate()?;
        Ok(SpikeDetection { opts, window: VecDeque::new(), last_val: 0.0, bad_batches: Vec::new() })
    }

    /// The batches listed to skip so far.
    pub fn bad_batches(&self) -> &[i64] {
        &self.bad_batches
    }

    /// torchmetrics' `Running(MeanMetric(), window)`: the mean of the
    /// window's losses, NaN when it holds none.
    fn running_mean(&self) -> f64 {
        let (sum, n) = self.window.iter().flatten().fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
        sum / f64::from(n)
    }

    /// Fabric's `_is_spike` against the running mean `running`.
    fn is_spike(&self, loss: f64, running: f64) -> bool {
        if self.opts.finite_only && !loss.is_finite() {
            return true;
        }
        let diff = loss - self.last_val;
        let better = match self.opts.mode {
            Mode::Min => diff <= 0.0,
            Mode::Max => diff >= 0.0,
        };
        if better {
            return false;
        }
        let gap = (loss - running).abs();
        self.opts.atol.is_none_or(|a| gap >= a.abs()) && self.opts.rtol.is_none_or(|r| gap >= (r * running).abs())
    }

    /// Checks the loss of batch `batch_idx` (of its epoch): `Some(running
    /// mean)` for a spike; otherwise the loss joins the window (a
    /// non-finite one only with `finite_only`, as fabric's).
    pub fn observe(&mut self, loss: f64, batch_idx: i64) -> Option<f64> {
        let running = self.running_mean();
        if batch_idx >= self.opts.warmup && self.is_spike(loss, running) {
            return Some(running);
        }
        if self.opts.finite_only || loss.is_finite() {
            if self.window.len() == self.opts.window {
                self.window.pop_front();
            }
            self.window.push_back((!loss.is_nan()).then_some(loss));
            self.last_val = loss;
        }
        None
    }

    /// Where the batches to skip go, Lightning's rule.
    fn file(&self, root_dir: &Path) -> PathBuf {
        match &self.opts.exclude_batches_path {
            None => root_dir.join("skip_batches.json"),
            Some(p) if p.to_string_lossy().ends_with(".json") => p.clone(),
            Some(p) => p.join("skip_batches.json"),
        }
    }

    /// Writes the batches to skip as Python's `json.dump(..., indent=4)`.
    fn write_bad_batches(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("SpikeDetection: creating {}: {e}", dir.display())))?;
        }
        crate::fs_safe::write_atomic(path, json_list(&self.bad_batches).as_bytes())
    }

    fn on_train_batch_end(&mut self, ctx: &HookContext) -> Result<()> {
        // A manual step may return no loss: nothing to check.
        let Some(loss) = ctx.output else { return Ok(()) };
        let loss = loss_value(loss)?;
        let batch = ctx.batch_idx;
        let Some(running) = self.observe(loss, batch) else { return Ok(()) };
        self.bad_batches.extend([batch - 1, batch]);
        let path = self.file(&ctx.state.root_dir);
        let tolerances = format!(
            "mode {}, atol {}, rtol {}, window {}",
            self.opts.mode.as_str(),
            self.opts.atol.map_or("none".into(), |a| a.to_string()),
            self.opts.rtol.map_or("none".into(), |r| r.to_string()),
            self.opts.window
        );
        let spike = Error::new(
            ErrorCode::NonFinite,
            format!(
                "Training spike detected in batch {batch} (epoch {}): loss {loss} against a running mean of \
                 {running} ({tolerances}); batches {} and {batch} are listed to skip in {}",
                ctx.state.epoch,
                batch - 1,
                path.display()
            ),
        );
        if ctx.state.global_rank == 0 {
            if let Err(e) = self.write_bad_batches(&path) {
                return Err(spike.then_failed("writing the batches to skip", &e));
            }
        }
        Err(spike)
    }
}

/// The value of a one-element loss.
fn loss_value(loss: &Tensor) -> Result<f64> {
    let flat = loss.f_detach()?.f_to_kind(Kind::Double)?.f_reshape([-1i64])?;
    if flat.size() != [1] {
        return Err(Error::shape(format!("SpikeDetection: the loss has shape {:?}, not one element", loss.size())));
    }
    Ok(flat.f_double_value(&[0])?)
}

/// `values` as Python's `json.dump(values, f, indent=4)` writes them.
pub(crate) fn json_list(values: &[i64]) -> String {
    if values.is_empty() {
        return "[]".into();
    }
    let items: Vec<String> = values.iter().map(|v| format!("    {v}")).collect();
    format!("[\n{}\n]", items.join(",\n"))
}

impl Callback for SpikeDetection {
    fn name(&self) -> String {
        "SpikeDetection".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        if ctx.stage != "fit" {
            return Ok(());
        }
        match ctx.hook {
            Hook::Setup if ctx.state.world_size > 1 => Err(Error::unsupported(format!(
                "SpikeDetection with {} processes: its decision is not shared between ranks here; \
                 run it in a single process",
                ctx.state.world_size
            ))),
            Hook::TrainBatchEnd => self.on_train_batch_end(ctx),
            _ => Ok(()),
        }
    }
}

/// Each series' first spike (batch and running mean) is what Lightning
/// 2.6's own `lightning.fabric.utilities.spike.SpikeDetection` finds on
/// the same losses (its `on_train_batch_end` fed them one by one).
#[cfg(test)]
mod tests {
    use super::*;

    fn detector(opts: SpikeDetectionOptions) -> SpikeDetection {
        SpikeDetection::new(opts).unwrap()
    }

    /// The first batch whose loss is a spike, with the running mean then.
    fn first_spike(d: &mut SpikeDetection, losses: &[f64]) -> Option<(i64, f64)> {
        losses.iter().enumerate().find_map(|(i, l)| d.observe(*l, i as i64).map(|m| (i as i64, m)))
    }

    #[test]
    fn a_loss_thrice_the_mean_is_a_spike() {
        // rtol 2: a loss at least 3 times the mean (|l - m| >= 2m).
        let mut d = detector(SpikeDetectionOptions::default());
        let losses = [1.0, 0.9, 0.8, 0.85, 0.7, 2.5, 5.0];
        // 2.5 against a mean of 0.85 differs by 1.65 < 1.7: not yet.
        assert_eq!(first_spike(&mut d, &losses), Some((6, 1.125)));
        assert_eq!(first_spike(&mut detector(SpikeDetectionOptions::default()), &losses[..6]), None);
        // Lower losses are never spikes, however far from the mean.
        let mut d = detector(SpikeDetectionOptions { rtol: None, atol: Some(0.1), ..Default::default() });
        assert_eq!(first_spike(&mut d, &[5.0, 1.0, 0.5, 0.1]), None);
        // Batch 0 is the warm-up; an epoch's batch indices start again.
        let mut d = detector(SpikeDetectionOptions::default());
        assert_eq!(d.observe(100.0, 0), None);
    }

    #[test]
    fn both_tolerances_must_be_passed() {
        let opts = SpikeDetectionOptions { atol: Some(1.0), rtol: Some(0.1), warmup: 0, ..Default::default() };
        let mut d = detector(opts.clone());
        // The first loss has no mean to compare with (NaN): no spike.
        assert_eq!(first_spike(&mut d, &[1.0, 1.5, 1.4]), None);
        let mut d = detector(opts);
        assert_eq!(first_spike(&mut d, &[1.0, 2.5]), Some((1, 1.0)));
        // With neither tolerance, any loss that is not lower is one.
        let mut d = detector(SpikeDetectionOptions { rtol: None, ..Default::default() });
        assert_eq!(first_spike(&mut d, &[1.0, 0.9, 0.9000001]), Some((2, 0.95)));
    }

    #[test]
    fn the_window_and_non_finite_losses() {
        let opts =
            SpikeDetectionOptions { window: 2, mode: Mode::Max, rtol: None, atol: Some(5.0), ..Default::default() };
        let mut d = detector(opts);
        // Max mode: a drop is the spike; the mean is of the last 2 losses.
        assert_eq!(first_spike(&mut d, &[9.0, 10.0, 12.0, 3.0]), Some((3, 11.0)));
        // finite_only: NaN is a spike after the warm-up, but inside it
        // takes a place in the window without counting in the mean.
        let mut d = detector(SpikeDetectionOptions { window: 3, warmup: 2, ..Default::default() });
        assert_eq!(d.observe(1.0, 0), None);
        assert_eq!(d.observe(f64::NAN, 1), None);
        assert_eq!(d.running_mean(), 1.0);
        assert_eq!(d.observe(f64::INFINITY, 2), Some(1.0));
        // Without it, a NaN is never a spike and stays out of the window;
        // an infinite loss is one only by the tolerances.
        let mut d = detector(SpikeDetectionOptions { finite_only: false, ..Default::default() });
        assert_eq!(first_spike(&mut d, &[1.0, f64::NAN, 1.1]), None);
        assert_eq!(d.window.len(), 2);
        assert_eq!(d.observe(f64::INFINITY, 3), Some(1.05));
    }

    #[test]
    fn options_are_checked_and_the_file_is_pythons_json() {
        let bad = |o: SpikeDetectionOptions| SpikeDetection::new(o).err().map(|e| e.code);
        assert_eq!(bad(SpikeDetectionOptions { window: 0, ..Default::default() }), Some(ErrorCode::InvalidArgument));
        assert_eq!(bad(SpikeDetectionOptions { warmup: -1, ..Default::default() }), Some(ErrorCode::InvalidArgument));
        assert_eq!(
            bad(SpikeDetectionOptions { atol: Some(f64::NAN), ..Default::default() }),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(json_list(&[3, 4]), "[\n    3,\n    4\n]");
        assert_eq!(json_list(&[]), "[]");
        let d = detector(SpikeDetectionOptions::default());
        assert_eq!(d.file(Path::new("/r")), Path::new("/r/skip_batches.json"));
        let d = detector(SpikeDetectionOptions { exclude_batches_path: Some("/x/y".into()), ..Default::default() });
        assert_eq!(d.file(Path::new("/r")), Path::new("/x/y/skip_batches.json"));
        let d =
            detector(SpikeDetectionOptions { exclude_batches_path: Some("/x/b.json".into()), ..Default::default() });
        assert_eq!(d.file(Path::new("/r")), Path::new("/x/b.json"));
    }
}
