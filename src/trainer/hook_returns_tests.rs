//! What the loops do with what a module's methods return, as Lightning 2.6
//! does: a training_step without a loss, `on_train_batch_start` returning
//! -1, and configure_optimizers without an optimizer. The expected counts
//! are those Lightning's own Trainer reaches on the same runs (2 epochs of
//! 10 batches, SGD with a StepLR stepping every step).
use crate::data::{DataLoader, DataLoaderOptions, TensorDataset};
use crate::error::{ErrorCode, Result};
use crate::nn::Module;
use crate::optim::{Sgd, SgdOptions, StepLr};
use crate::test_dirs::TempDir;
use crate::trainer::loop_progress::{FitProgress, Tracker};
use crate::trainer::{
    Callback, Hook, HookContext, Interval, LightningModule, OptimizerConfig, OptimizerSetup, SchedulerConfig,
    SharedModel, StepContext, Trainer, TrainerOptions,
};
use std::sync::{Arc, Mutex};
use tch::{Device as TchDevice, Kind, Tensor};

/// A linear regression whose training_step, on_train_batch_start and
/// configure_optimizers return what a test asks, counting the hooks.
struct Returns {
    model: SharedModel,
    /// training_step returns no loss when `batch_idx % n == n - 1`.
    none_every: Option<i64>,
    /// on_train_batch_start skips the rest of the epoch at (epoch, batch).
    skip_at: Option<(i64, i64)>,
    /// configure_optimizers adds nothing.
    no_optimizer: bool,
    steps: usize,
    batch_starts: usize,
    batch_ends: usize,
    no_output_ends: usize,
    backwards: usize,
    before_steps: usize,
    zero_grads: usize,
    /// Codes of the refusals of skip_rest_of_epoch outside on_train_batch_start.
    refused: Vec<ErrorCode>,
    /// The weights before a batch without a loss, and whether every such
    /// batch left them as they were.
    before_skipped: Option<Vec<Tensor>>,
    skipped_unchanged: Vec<bool>,
}

impl Returns {
    fn new() -> Self {
        tch::manual_seed(3);
        Returns {
            model: Arc::new(Mutex::new(Module::linear(4, 2, true).unwrap())),
            none_every: None,
            skip_at: None,
            no_optimizer: false,
            steps: 0,
            batch_starts: 0,
            batch_ends: 0,
            no_output_ends: 0,
            backwards: 0,
            before_steps: 0,
            zero_grads: 0,
            refused: Vec::new(),
            before_skipped: None,
            skipped_unchanged: Vec::new(),
        }
    }

    fn weights(&self) -> Vec<Tensor> {
        let m = self.model.lock().unwrap_or_else(|p| p.into_inner());
        m.parameters().iter().map(|p| p.detach().copy()).collect()
    }

    fn returns_none(&self, batch_idx: i64) -> bool {
        self.none_every.is_some_and(|n| batch_idx % n == n - 1)
    }
}

fn same(a: &[Tensor], b: &[Tensor]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.equal(y))
}

impl LightningModule for Returns {
    fn model(&self) -> Option<SharedModel> {
        Some(Arc::clone(&self.model))
    }

    fn training_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        self.steps += 1;
        if self.returns_none(ctx.batch_idx) {
            return Ok(None);
        }
        let out = self.model.lock().unwrap_or_else(|p| p.into_inner()).forward(&batch[0])?;
        Ok(Some((out - &batch[1]).square().mean(Kind::Float)))
    }

    fn predict_step(&mut self, _ctx: &mut StepContext, _batch: &[Tensor]) -> Result<Option<Tensor>> {
        Ok(None)
    }

    fn configure_optimizers(&mut self, _setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>> {
        if self.no_optimizer {
            return Ok(Vec::new());
        }
        let params = self.model.lock().unwrap_or_else(|p| p.into_inner()).parameters();
        let mut sgd = Sgd::new(params, SgdOptions { lr: 0.1, ..Default::default() })?;
        let step = StepLr::new(&mut sgd, 1, 0.5)?;
        let scheduler = SchedulerConfig {
            scheduler: Box::new(step),
            interval: Interval::Step,
            frequency: 1,
            monitor: None,
            name: None,
            strict: true,
        };
        Ok(vec![OptimizerConfig::new(Box::new(sgd), Some(scheduler))])
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match ctx.hook {
            Hook::TrainBatchStart => {
                self.batch_starts += 1;
                if self.returns_none(ctx.batch_idx) {
                    self.before_skipped = Some(self.weights());
                }
                if self.skip_at == Some((ctx.state.epoch, ctx.batch_idx)) {
                    ctx.skip_rest_of_epoch()?;
                }
            }
            Hook::TrainBatchEnd => {
                self.batch_ends += 1;
                if ctx.output.is_none() {
                    self.no_output_ends += 1;
                }
                if let Some(before) = self.before_skipped.take() {
                    let now = self.weights();
                    self.skipped_unchanged.push(same(&before, &now));
                }
            }
            Hook::AfterBackward => self.backwards += 1,
            Hook::BeforeOptimizerStep => self.before_steps += 1,
            Hook::BeforeZeroGrad => self.zero_grads += 1,
            Hook::TrainStart | Hook::TrainEpochEnd => {
                if let Err(e) = ctx.skip_rest_of_epoch() {
                    self.refused.push(e.code);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// A callback that tries to skip the rest of the epoch, as a module does.
struct Skipper {
    refused: Arc<Mutex<Vec<ErrorCode>>>,
}

impl Callback for Skipper {
    fn name(&self) -> String {
        "Skipper".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        if ctx.hook == Hook::TrainBatchStart {
            if let Err(e) = ctx.skip_rest_of_epoch() {
                self.refused.lock().unwrap_or_else(|p| p.into_inner()).push(e.code);
            }
        }
        Ok(())
    }
}

/// 80 samples in batches of 8: ten batches per epoch.
fn loader() -> DataLoader {
    let opts = (Kind::Float, TchDevice::Cpu);
    let ds = TensorDataset::new(vec![Tensor::randn([80, 4], opts), Tensor::randn([80, 2], opts)]).unwrap();
    DataLoader::new(Arc::new(ds), DataLoaderOptions { batch_size: 8, ..Default::default() }).unwrap()
}

/// A two-epoch trainer on the CPU with no logger, checkpoint, progress
/// bar or summary.
fn trainer(dir: &TempDir) -> Trainer {
    let mut o = TrainerOptions::default();
    let root = dir.to_string_lossy().to_string();
    for (k, v) in [
        ("max_epochs", "2"),
        ("accelerator", "cpu"),
        ("logger", "false"),
        ("enable_checkpointing", "false"),
        ("enable_progress_bar", "false"),
        ("enable_model_summary", "false"),
        ("handle_signals", "false"),
        ("default_root_dir", root.as_str()),
    ] {
        o.set(k, v).unwrap();
    }
    Trainer::new(o).unwrap()
}

/// The fit loop's progress the last fit left.
fn progress(t: &Trainer) -> FitProgress {
    t.last_fit.as_ref().expect("a fit ran").progress
}

fn all(n: i64) -> Tracker {
    Tracker { ready: n, started: n, processed: n, completed: n }
}

fn ready_completed(n: i64) -> Tracker {
    Tracker { ready: n, completed: n, ..Default::default() }
}

#[test]
fn a_step_without_a_loss_skips_backward_but_still_steps() {
    let dir = TempDir::new("hook-returns-none");
    let mut t = trainer(&dir);
    let mut m = Returns::new();
    m.none_every = Some(3);
    t.fit(&mut m, &loader(), None, None).unwrap();
    // Batches 2, 5 and 8 of each epoch: Lightning's closure returns None,
    // the optimizer step still runs (finding no gradients) and counts.
    assert_eq!(t.global_step(), 20);
    assert_eq!((m.steps, m.batch_ends, m.no_output_ends), (20, 20, 6));
    assert_eq!((m.backwards, m.before_steps, m.zero_grads), (14, 20, 20));
    assert_eq!(m.skipped_unchanged, vec![true; 6]);
    let p = progress(&t);
    assert_eq!((p.batch.progress.total, p.batch.progress.current), (all(20), all(10)));
    assert_eq!((p.optimizer.step.total, p.optimizer.step.current), (ready_completed(20), ready_completed(10)));
    assert_eq!(p.optimizer.zero_grad.total, Tracker { ready: 20, started: 20, completed: 20, processed: 0 });
    assert_eq!((p.scheduler.total, p.scheduler.current), (ready_completed(20), ready_completed(10)));
    assert_eq!(p.batches_that_stepped, 20);
}

#[test]
fn minus_one_from_on_train_batch_start_ends_the_epoch() {
    let dir = TempDir::new("hook-returns-skip");
    let mut t = trainer(&dir);
    let refused = Arc::new(Mutex::new(Vec::new()));
    t.add_callback(Box::new(Skipper { refused: Arc::clone(&refused) }));
    let mut m = Returns::new();
    m.skip_at = Some((1, 7));
    t.fit(&mut m, &loader(), None, None).unwrap();
    // Epoch 1 trains batches 0..7; batch 7 reaches only its start hook.
    assert_eq!(t.global_step(), 17);
    assert_eq!(t.current_epoch(), 2);
    assert_eq!((m.batch_starts, m.steps, m.batch_ends, m.backwards), (18, 17, 17, 17));
    let p = progress(&t);
    // Lightning's batch_progress.increment_by(0, is_last_batch=True),
    // then increment_processed: ready and processed count the batch.
    assert_eq!(p.batch.progress.total, Tracker { ready: 18, started: 17, processed: 18, completed: 17 });
    assert_eq!(p.batch.progress.current, Tracker { ready: 8, started: 7, processed: 8, completed: 7 });
    assert!(p.batch.is_last_batch);
    assert_eq!((p.optimizer.step.total, p.optimizer.step.current), (ready_completed(17), ready_completed(7)));
    // The step scheduler steps for the skipped batch too.
    assert_eq!((p.scheduler.total, p.scheduler.current), (ready_completed(18), ready_completed(8)));
    assert_eq!(p.batches_that_stepped, 17);
    assert_eq!((p.epoch.total, p.epoch.current), (all(2), all(2)));
    // Only the module's on_train_batch_start may ask.
    assert_eq!(m.refused, vec![ErrorCode::InvalidState; 3]);
    let by_callback = refused.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(by_callback, vec![ErrorCode::InvalidState; 18]);
}

#[test]
fn a_skip_at_the_first_batch_still_runs_the_next_epoch() {
    let dir = TempDir::new("hook-returns-first");
    let mut t = trainer(&dir);
    let mut m = Returns::new();
    m.skip_at = Some((0, 0));
    t.fit(&mut m, &loader(), None, None).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (10, 2));
    assert_eq!((m.batch_starts, m.steps), (11, 10));
}

#[test]
fn a_fit_without_an_optimizer_runs_every_step_and_changes_nothing() {
    let dir = TempDir::new("hook-returns-no-optimizer");
    let mut t = trainer(&dir);
    let mut m = Returns::new();
    m.no_optimizer = true;
    let before = m.weights();
    t.fit(&mut m, &loader(), None, None).unwrap();
    // Lightning's _MockOptimizer: every step is taken, and counted.
    assert_eq!(t.global_step(), 20);
    assert_eq!((m.steps, m.backwards, m.before_steps, m.zero_grads), (20, 20, 20, 20));
    assert!(same(&before, &m.weights()));
    let p = progress(&t);
    assert_eq!(p.optimizer.step.total, ready_completed(20));
    assert_eq!(p.scheduler.total, Tracker::default());
    assert_eq!(p.batches_that_stepped, 20);
}
