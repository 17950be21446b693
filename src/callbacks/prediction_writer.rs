//! Lightning's `BasePredictionWriter`: during predict, a writer receives
//! each batch's prediction when it is made (`write_interval` "batch"), a
//! loader's predictions of the epoch at its end ("epoch"), or both
//! ("batch_and_epoch"), with the dataset indices of the batches' samples
//! (Lightning's `batch_indices`; empty for a loader that cannot tell, a
//! host iterator). The writing itself is the host's: functions given as
//! closures.
use crate::error::{Error, ErrorCode, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use crate::trainer::Prediction;
use tch::Tensor;

/// When predictions are written (Lightning's `WriteInterval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteInterval {
    /// After each batch (Lightning's default).
    Batch,
    /// At the end of the epoch.
    Epoch,
    /// Both.
    BatchAndEpoch,
}

impl WriteInterval {
    /// Lightning's names: "batch", "epoch", "batch_and_epoch".
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "batch" => Ok(WriteInterval::Batch),
            "epoch" => Ok(WriteInterval::Epoch),
            "batch_and_epoch" => Ok(WriteInterval::BatchAndEpoch),
            _ => Err(Error::invalid(format!(
                "`write_interval` should be one of [\"batch\", \"epoch\", \"batch_and_epoch\"], got {s:?}"
            ))),
        }
    }

    /// Whether batches are written as they come.
    pub fn on_batch(self) -> bool {
        matches!(self, WriteInterval::Batch | WriteInterval::BatchAndEpoch)
    }

    /// Whether the epoch's predictions are written at its end.
    pub fn on_epoch(self) -> bool {
        matches!(self, WriteInterval::Epoch | WriteInterval::BatchAndEpoch)
    }

    /// Refuses a missing writer the interval needs.
    pub fn check_writers(self, batch_writer: bool, epoch_writer: bool) -> Result<()> {
        if self.on_batch() && !batch_writer {
            return Err(Error::new(
                ErrorCode::NullArgument,
                "write_interval writes batches: the batch writer is missing",
            ));
        }
        if self.on_epoch() && !epoch_writer {
            return Err(Error::new(
                ErrorCode::NullArgument,
                "write_interval writes epochs: the epoch writer is missing",
            ));
        }
        Ok(())
    }
}

/// One batch's prediction, as the batch writer gets it.
pub struct BatchPrediction<'a> {
    /// The tensor predict_step returned (`None`: nothing, or a dict).
    pub prediction: Option<&'a Tensor>,
    /// The whole prediction: the tensor, or the tuple or dict it made.
    pub value: &'a Prediction,
    /// The dataset indices of the batch's samples (empty when unknown).
    pub batch_indices: &'a [i64],
    /// The batch.
    pub batch: &'a [Tensor],
    /// The batch's index in its loader.
    pub batch_idx: i64,
    /// The loader's index.
    pub dataloader_idx: usize,
}

/// One loader's predictions of an epoch, as the epoch writer gets them.
pub struct EpochPredictions<'a> {
    /// The loader's index.
    pub dataloader_idx: usize,
    /// Each batch's prediction, in order ([`Prediction::output`] is the
    /// tensor predict_step returned).
    pub predictions: &'a [Prediction],
    /// Each batch's samples' dataset indices (empty when unknown).
    pub batch_indices: &'a [Vec<i64>],
}

/// Writes one batch's prediction.
pub type WriteBatchFn = Box<dyn FnMut(&BatchPrediction<'_>) -> Result<()>>;
/// Writes one loader's predictions of the epoch.
pub type WriteEpochFn = Box<dyn FnMut(&EpochPredictions<'_>) -> Result<()>>;

/// A loader's predictions and batch indices so far in the epoch.
type Collected = (Vec<Prediction>, Vec<Vec<i64>>);

/// The prediction writer callback.
pub struct PredictionWriter {
    interval: WriteInterval,
    on_batch: Option<WriteBatchFn>,
    on_epoch: Option<WriteEpochFn>,
    /// Per loader, what the epoch predicted so far (kept for the epoch
    /// writer only).
    epoch: Vec<Collected>,
}

impl PredictionWriter {
    /// A writer calling `on_batch` and / or `on_epoch` as `interval` says
    /// (check them first with [`WriteInterval::check_writers`]; a missing
    /// one is skipped).
    pub fn new(interval: WriteInterval, on_batch: Option<WriteBatchFn>, on_epoch: Option<WriteEpochFn>) -> Self {
        PredictionWriter { interval, on_batch, on_epoch, epoch: Vec::new() }
    }

    fn on_batch_end(&mut self, ctx: &HookContext) -> Result<()> {
        let indices = ctx.batch_indices.unwrap_or(&[]);
        // Without the step's whole prediction (a context made elsewhere),
        // the tensor it returned.
        let returned = Prediction {
            output: ctx.output.map(Tensor::shallow_clone),
            added: Vec::new(),
            names: Vec::new(),
            value: None,
        };
        let value = ctx.prediction.unwrap_or(&returned);
        if self.interval.on_batch() {
            if let Some(write) = self.on_batch.as_mut() {
                write(&BatchPrediction {
                    prediction: ctx.output,
                    value,
                    batch_indices: indices,
                    batch: ctx.batch.unwrap_or(&[]),
                    batch_idx: ctx.batch_idx,
                    dataloader_idx: ctx.dataloader_idx,
                })?;
            }
        }
        if self.interval.on_epoch() {
            let d = ctx.dataloader_idx;
            if self.epoch.len() <= d {
                self.epoch.resize_with(d + 1, Default::default);
            }
            self.epoch[d].0.push(value.share());
            self.epoch[d].1.push(indices.to_vec());
        }
        Ok(())
    }

    fn on_epoch_end(&mut self) -> Result<()> {
        let mut epoch = std::mem::take(&mut self.epoch);
        if !self.interval.on_epoch() {
            return Ok(());
        }
        let Some(write) = self.on_epoch.as_mut() else { return Ok(()) };
        if epoch.is_empty() {
            // No batch at all: the writer still hears of the epoch.
            epoch.push(Default::default());
        }
        for (d, (predictions, batch_indices)) in epoch.iter().enumerate() {
            write(&EpochPredictions { dataloader_idx: d, predictions, batch_indices })?;
        }
        Ok(())
    }
}

impl Callback for PredictionWriter {
    fn name(&self) -> String {
        "PredictionWriter".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        if ctx.stage != "predict" {
            return Ok(());
        }
        match ctx.hook {
            Hook::PredictEpochStart | Hook::Exception | Hook::Teardown => self.epoch.clear(),
            Hook::PredictBatchEnd => self.on_batch_end(ctx)?,
            Hook::PredictEpochEnd => self.on_epoch_end()?,
            _ => {}
        }
        Ok(())
    }

    fn wants_batch_indices(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainer::hooks::TrainerState;
    use std::cell::RefCell;
    use std::rc::Rc;

    type Seen = Rc<RefCell<Vec<String>>>;

    fn writer(interval: WriteInterval, seen: &Seen) -> PredictionWriter {
        let (b, e) = (seen.clone(), seen.clone());
        let on_batch: WriteBatchFn = Box::new(move |p: &BatchPrediction<'_>| {
            let v = p.prediction.map(|t| t.double_value(&[0]));
            b.borrow_mut().push(format!("batch {} of {}: {v:?} {:?}", p.batch_idx, p.dataloader_idx, p.batch_indices));
            Ok(())
        });
        let on_epoch: WriteEpochFn = Box::new(move |p: &EpochPredictions<'_>| {
            let v: Vec<Option<f64>> =
                p.predictions.iter().map(|t| t.output.as_ref().map(|t| t.double_value(&[0]))).collect();
            e.borrow_mut().push(format!("epoch of {}: {v:?} {:?}", p.dataloader_idx, p.batch_indices));
            Ok(())
        });
        PredictionWriter::new(interval, Some(on_batch), Some(on_epoch))
    }

    fn run(w: &mut PredictionWriter, batches: &[(usize, Option<f64>, Vec<i64>)]) {
        let mut state = TrainerState::default();
        w.on_hook(&mut HookContext::new(Hook::PredictEpochStart, "predict", &mut state)).unwrap();
        for (i, (d, value, indices)) in batches.iter().enumerate() {
            let out = value.map(|v| Tensor::from_slice(&[v]));
            let mut ctx = HookContext::new(Hook::PredictBatchEnd, "predict", &mut state);
            ctx.batch_idx = i as i64;
            ctx.dataloader_idx = *d;
            ctx.output = out.as_ref();
            ctx.batch_indices = Some(indices.as_slice());
            w.on_hook(&mut ctx).unwrap();
        }
        w.on_hook(&mut HookContext::new(Hook::PredictEpochEnd, "predict", &mut state)).unwrap();
    }

    #[test]
    fn intervals_write_batches_epochs_or_both() {
        let batches = [(0, Some(1.5), vec![0, 1]), (0, None, vec![2]), (1, Some(2.5), vec![])];
        let seen = Seen::default();
        run(&mut writer(WriteInterval::Batch, &seen), &batches);
        assert_eq!(
            *seen.borrow(),
            ["batch 0 of 0: Some(1.5) [0, 1]", "batch 1 of 0: None [2]", "batch 2 of 1: Some(2.5) []"]
        );
        let seen = Seen::default();
        run(&mut writer(WriteInterval::Epoch, &seen), &batches);
        assert_eq!(*seen.borrow(), ["epoch of 0: [Some(1.5), None] [[0, 1], [2]]", "epoch of 1: [Some(2.5)] [[]]"]);
        let seen = Seen::default();
        let mut w = writer(WriteInterval::BatchAndEpoch, &seen);
        run(&mut w, &batches[..1]);
        run(&mut w, &[]);
        assert_eq!(
            *seen.borrow(),
            ["batch 0 of 0: Some(1.5) [0, 1]", "epoch of 0: [Some(1.5)] [[0, 1]]", "epoch of 0: [] []"]
        );
        assert!(w.wants_batch_indices());
    }

    #[test]
    fn intervals_are_lightnings() {
        assert_eq!(WriteInterval::parse("batch_and_epoch").unwrap(), WriteInterval::BatchAndEpoch);
        assert_eq!(WriteInterval::parse("step").unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(WriteInterval::Epoch.check_writers(true, false).unwrap_err().code, ErrorCode::NullArgument);
        assert!(WriteInterval::Batch.check_writers(true, false).is_ok());
    }
}
