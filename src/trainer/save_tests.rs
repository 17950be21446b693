use super::*;
use crate::checkpoint::Checkpoint;
use crate::data::{DataLoader, DataLoaderOptions, TensorDataset};
use crate::error::ErrorCode;
use crate::nn::Module;
use crate::optim::{Sgd, SgdOptions};
use crate::test_dirs::TempDir;
use crate::trainer::{OptimizerSetup, SharedModel, StepContext, Trainer, TrainerOptions};
use std::sync::{Arc, Mutex};
use tch::{Device as TchDevice, Kind};

/// A progress as `epochs` whole epochs of `batches` batches leave it.
fn after_epochs(epochs: i64, batches: i64) -> FitProgress {
    let mut p = FitProgress::default();
    for _ in 0..epochs {
        p.start_epoch(false);
        p.epoch.increment_ready();
        p.epoch.increment_started();
        for b in 0..batches {
            p.batch.is_last_batch = b + 1 == batches;
            p.batch.progress.increment_ready();
            p.batch.progress.increment_started();
            p.batch.progress.increment_processed();
            p.batch.progress.increment_completed();
        }
        p.epoch.increment_processed();
        p.epoch.increment_completed();
    }
    p
}

#[test]
fn a_fit_that_ended_stands_between_epochs() {
    let p = after_epochs(2, 3);
    // After fit: the epoch counter is past the finished epochs.
    assert!(between_epochs(&p, 2));
    // A resumed fit's hooks before its first epoch: the epoch it resumed
    // after is still the current one, finished.
    assert!(!between_epochs(&p, 1));
    // Inside an epoch (its on_train_epoch_end): processed, not completed.
    let mut inside = after_epochs(1, 3);
    inside.epoch.increment_ready();
    inside.epoch.increment_started();
    inside.epoch.increment_processed();
    assert!(!between_epochs(&inside, 1));
    // Before any epoch: nothing done, nothing skipped either way.
    assert!(between_epochs(&FitProgress::default(), 0));
}

/// A linear regression on a shared model, trained with plain SGD.
pub(crate) struct Regression {
    pub(crate) model: SharedModel,
}

impl Regression {
    pub(crate) fn new() -> Self {
        Regression { model: Arc::new(Mutex::new(Module::linear(2, 1, true).unwrap())) }
    }
}

impl LightningModule for Regression {
    fn model(&self) -> Option<SharedModel> {
        Some(Arc::clone(&self.model))
    }

    fn training_step(&mut self, _ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        let out = self.model.lock().unwrap_or_else(|p| p.into_inner()).forward(&batch[0])?;
        Ok(Some((out - &batch[1]).square().mean(Kind::Float)))
    }

    fn predict_step(&mut self, _ctx: &mut StepContext, _batch: &[Tensor]) -> Result<Option<Tensor>> {
        Ok(None)
    }

    fn configure_optimizers(&mut self, _setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>> {
        let params = self.model.lock().unwrap_or_else(|p| p.into_inner()).parameters();
        let sgd = Sgd::new(params, SgdOptions { lr: 0.1, ..Default::default() })?;
        Ok(vec![OptimizerConfig::new(Box::new(sgd), None)])
    }
}

/// 8 samples in batches of 4: two batches per epoch.
pub(crate) fn loader() -> DataLoader {
    let opts = (Kind::Float, TchDevice::Cpu);
    let ds = TensorDataset::new(vec![Tensor::randn([8, 2], opts), Tensor::randn([8, 1], opts)]).unwrap();
    DataLoader::new(Arc::new(ds), DataLoaderOptions { batch_size: 4, ..Default::default() }).unwrap()
}

/// A trainer of `epochs` epochs on the CPU writing fulmen's own
/// checkpoints, with no logger, checkpoint callback, progress bar or
/// summary.
pub(crate) fn trainer(dir: &TempDir, epochs: i64) -> Trainer {
    let mut o = TrainerOptions::default();
    let root = dir.to_string_lossy().to_string();
    let epochs = epochs.to_string();
    for (k, v) in [
        ("max_epochs", epochs.as_str()),
        ("accelerator", "cpu"),
        ("logger", "false"),
        ("enable_checkpointing", "false"),
        ("enable_progress_bar", "false"),
        ("enable_model_summary", "false"),
        ("handle_signals", "false"),
        ("checkpoint_format", "safetensors"),
        ("default_root_dir", root.as_str()),
    ] {
        o.set(k, v).unwrap();
    }
    Trainer::new(o).unwrap()
}

#[test]
fn saving_needs_a_run_and_its_module() {
    let dir = TempDir::new("save-rules");
    let mut t = trainer(&dir, 1);
    let mut m = Regression::new();
    let path = dir.join("early.ckpt");
    let e = t.save_checkpoint(&mut m, &path, true).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{e}");
    assert!(!path.exists());
    // Before a run the queries answer as Lightning's trainer does.
    assert_eq!(t.estimated_stepping_batches().unwrap_err().code, ErrorCode::InvalidState);
    assert_eq!((t.num_training_batches(), t.should_stop(), t.is_last_batch()), (None, false, false));
    assert_eq!(t.num_devices().unwrap(), 1);
    let data = loader();
    t.fit(&mut m, &data, None, None).unwrap();
    let mut other = Regression::new();
    let e = t.save_checkpoint(&mut other, &path, false).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
    assert!(!path.exists());
}

#[test]
fn a_checkpoint_saved_after_fit_resumes_at_the_next_epoch() {
    let dir = TempDir::new("save-after-fit");
    let mut t = trainer(&dir, 2);
    let mut m = Regression::new();
    let data = loader();
    t.fit(&mut m, &data, None, None).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (4, 2));
    assert_eq!((t.num_training_batches(), t.is_last_batch(), t.should_stop()), (Some(2), true, false));
    assert_eq!(t.estimated_stepping_batches().unwrap(), Some(4));
    assert_eq!((t.num_devices().unwrap(), t.node_rank().unwrap()), (1, 0));

    let path = dir.join("after.ckpt");
    t.save_checkpoint(&mut m, &path, false).unwrap();
    let ck = Checkpoint::load(&path).unwrap();
    assert!(!ck.weights_only);
    assert_eq!((ck.epoch, ck.global_step, ck.batches_stepped), (2, 4, 4));
    // Between epochs: the next fit starts epoch 2 from its first batch.
    assert_eq!((ck.batches_in_epoch, ck.epoch_finished), (0, false));
    assert_eq!(ck.optimizer_states.len(), 1);
    assert!(ck.rng_state.is_some());
    let saved = ck.progress.unwrap();
    assert_eq!(saved.saved_at(), SavedAt::EpochStart);
    assert_eq!(saved.epoch.current.completed, 2);

    let weights = dir.join("weights.ckpt");
    t.save_checkpoint(&mut m, &weights, true).unwrap();
    let w = Checkpoint::load(&weights).unwrap();
    assert!(w.weights_only);
    assert_eq!(w.state_dict.len(), 2);

    // A resumed fit to 3 epochs runs one more epoch from there.
    let mut resumed = trainer(&dir, 3);
    resumed.fit(&mut m, &data, None, path.to_str()).unwrap();
    assert_eq!((resumed.global_step(), resumed.current_epoch()), (6, 3));
}
