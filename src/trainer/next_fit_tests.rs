use super::*;

#[test]
fn a_fit_done_before_its_first_epoch_says_which_limit() {
    assert_eq!(limit_reached(Some(2), -1, 2, 22), Some("`max_epochs=2` reached".into()));
    assert_eq!(limit_reached(Some(4), 22, 2, 22), Some("`max_steps=22` reached".into()));
    assert_eq!(limit_reached(Some(4), -1, 2, 22), None);
    assert_eq!(limit_reached(None, 30, 2, 22), None);
    assert_eq!(limit_reached(Some(0), -1, 0, 0), Some("`max_epochs=0` reached".into()));
}

#[test]
fn an_epoch_processed_before_a_failure_counts_as_completed_unless_steps_bound_the_run() {
    let mut progress = FitProgress::default();
    // Two epochs done, the third processed: its end hooks failed.
    for _ in 0..3 {
        progress.epoch.increment_ready();
        progress.epoch.increment_started();
        progress.epoch.increment_processed();
    }
    progress.epoch.increment_completed();
    progress.epoch.increment_completed();
    let state = FitLoopState { progress, global_step: 33, batches_stepped: 33 };
    assert_eq!(FitLoopState::next_epoch(&state.for_next_fit(false)), 3);
    assert_eq!(FitLoopState::next_epoch(&state.for_next_fit(true)), 2);
}

use crate::error::ErrorCode;
use crate::test_dirs::TempDir;
use crate::trainer::save::tests::{loader, trainer, Regression};
use crate::trainer::{Callback, Hook, HookContext};
use std::sync::{Arc, Mutex};

/// Records the fit hooks it sees, with the epoch and step of each epoch
/// start.
struct Recorder {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Callback for Recorder {
    fn name(&self) -> String {
        "Recorder".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        let entry = match ctx.hook {
            Hook::FitStart => "fit_start".to_string(),
            Hook::TrainStart => "train_start".to_string(),
            Hook::TrainEpochStart => format!("epoch {} at step {}", ctx.state.epoch, ctx.state.global_step),
            Hook::TrainEnd => "train_end".to_string(),
            Hook::FitEnd => "fit_end".to_string(),
            _ => return Ok(()),
        };
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
        Ok(())
    }
}

fn weights(m: &Regression) -> Vec<f64> {
    let model = m.model.lock().unwrap_or_else(|p| p.into_inner());
    model.parameters().iter().flat_map(|p| Vec::<f64>::try_from(p.flatten(0, -1)).unwrap()).collect()
}

#[test]
fn a_second_fit_goes_on_from_the_first_ones_progress() {
    let dir = TempDir::new("next-fit");
    let mut t = trainer(&dir, 2);
    let seen = Arc::new(Mutex::new(Vec::new()));
    t.add_callback(Box::new(Recorder { seen: Arc::clone(&seen) }));
    let mut m = Regression::new();
    let data = loader();
    t.fit(&mut m, &data, None, None).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (4, 2));
    let take = || std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()));
    assert_eq!(take(), ["fit_start", "train_start", "epoch 0 at step 0", "epoch 1 at step 2", "train_end", "fit_end"]);

    // At its limit: nothing trained, the loop and its train hooks skipped.
    let before = weights(&m);
    t.fit(&mut m, &data, None, None).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (4, 2));
    assert_eq!(weights(&m), before);
    assert_eq!(take(), ["fit_start", "fit_end"]);

    // A predict run between fits keeps the loop's progress.
    t.predict(&mut m, &data, None).unwrap();
    t.set_max_epochs(3).unwrap();
    t.fit(&mut m, &data, None, None).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (6, 3));
    assert_ne!(weights(&m), before);
    assert_eq!(take(), ["fit_start", "train_start", "epoch 2 at step 4", "train_end", "fit_end"]);

    // A step limit stops the next fit inside its epoch; the one after
    // starts the following epoch.
    t.set_max_epochs(-1).unwrap();
    t.set_max_steps(7).unwrap();
    t.fit(&mut m, &data, None, None).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (7, 4));
    t.set_max_steps(9).unwrap();
    t.fit(&mut m, &data, None, None).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (9, 5));
    take();

    // A checkpoint's progress replaces the trainer's.
    let path = dir.join("after.ckpt");
    t.save_checkpoint(&mut m, &path, false).unwrap();
    let mut fresh = trainer(&dir, 6);
    fresh.fit(&mut m, &data, None, path.to_str()).unwrap();
    assert_eq!((fresh.global_step(), fresh.current_epoch()), (11, 6));
    t.set_max_steps(-1).unwrap();
    t.set_max_epochs(1).unwrap();
    t.fit(&mut m, &data, None, path.to_str()).unwrap();
    assert_eq!((t.global_step(), t.current_epoch()), (9, 5));
}

#[test]
fn limits_are_checked_as_the_options_are() {
    let dir = TempDir::new("next-fit-limits");
    let mut t = trainer(&dir, 2);
    assert_eq!(t.set_max_epochs(-2).unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(t.set_max_steps(-5).unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(t.options().max_epochs, Some(2));
    assert_eq!(t.options().max_steps, -1);
}
