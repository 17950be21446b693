use super::*;

/// A progress as an epoch of `batches` batches leaves it, after `epochs`
/// whole epochs, each batch stepping once and each epoch stepping one
/// scheduler.
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
            p.optimizer.step.increment_ready();
            p.optimizer.step.increment_completed();
            p.batch.progress.increment_processed();
            p.batch.progress.increment_completed();
            p.batches_that_stepped += 1;
        }
        p.epoch.increment_processed();
        p.scheduler.increment_by(1);
        p.epoch.increment_completed();
    }
    p
}

#[test]
fn counts_an_event_lacks_stay_zero() {
    let mut p = Progress::new(Counts::ReadyCompleted);
    p.increment_ready();
    p.increment_started();
    p.increment_processed();
    p.increment_completed();
    p.increment_by(2);
    let want = Tracker { ready: 3, started: 0, processed: 0, completed: 3 };
    assert_eq!((p.total, p.current), (want, want));
    let mut z = Progress::new(Counts::Started);
    z.increment_by(2);
    assert_eq!(z.total, Tracker { ready: 2, started: 2, processed: 0, completed: 2 });
}

#[test]
fn a_new_epoch_resets_current_counts_and_keeps_totals() {
    let p = after_epochs(2, 3);
    assert_eq!(p.batch.progress.total.completed, 6);
    assert_eq!(p.batch.progress.current.completed, 3);
    assert_eq!(p.epoch.total, Tracker { ready: 2, started: 2, processed: 2, completed: 2 });
    assert_eq!(p.scheduler.total.completed, 2);
    let mut next = p;
    next.start_epoch(false);
    assert_eq!(next.batch.progress.current, Tracker::default());
    assert!(!next.batch.is_last_batch);
    assert_eq!(next.optimizer.step.current, Tracker::default());
    assert_eq!(next.optimizer.step.total.completed, 6);
    let mut resumed = p;
    resumed.start_epoch(true);
    assert_eq!(resumed, p, "a resumed epoch keeps what it restored");
}

#[test]
fn where_a_progress_was_saved_is_read_from_its_epoch_counts() {
    let mut p = after_epochs(1, 3);
    assert_eq!(p.saved_at(), SavedAt::EpochStart);
    p.start_epoch(false);
    p.epoch.increment_ready();
    p.epoch.increment_started();
    p.batch.progress.increment_ready();
    p.batch.progress.increment_started();
    p.batch.progress.increment_processed();
    assert_eq!(p.saved_at(), SavedAt::BatchEnd);
    assert_eq!(p.batches_in_epoch(), 1);
    assert!(!p.epoch_batches_done());
    let done = after_epochs(2, 3);
    let mut end = done;
    end.epoch.current.completed -= 1;
    end.epoch.total.completed -= 1;
    assert_eq!(end.saved_at(), SavedAt::EpochEnd);
    assert!(end.epoch_batches_done());
}

#[test]
fn an_epoch_end_restart_completes_the_epoch() {
    let mut saved = after_epochs(2, 3);
    saved.epoch.current.completed -= 1;
    saved.epoch.total.completed -= 1;
    assert_eq!(saved.restarted(Some(3), true), after_epochs(2, 3));
}

#[test]
fn a_batch_end_restart_completes_the_batch_and_counts_its_step() {
    let mut p = after_epochs(1, 4);
    p.start_epoch(false);
    p.epoch.increment_ready();
    p.epoch.increment_started();
    for _ in 0..2 {
        p.batch.progress.increment_ready();
        p.batch.progress.increment_started();
        p.batch.progress.increment_processed();
        p.batch.progress.increment_completed();
        p.batches_that_stepped += 1;
    }
    // Saved in the third batch's on_train_batch_end.
    p.batch.progress.increment_ready();
    p.batch.progress.increment_started();
    p.batch.progress.increment_processed();
    let r = p.restarted(Some(4), true);
    assert_eq!(r.batch.progress.current, Tracker { ready: 3, started: 3, processed: 3, completed: 3 });
    assert_eq!(r.batch.progress.total.completed, 7);
    assert_eq!(r.batches_that_stepped, p.batches_that_stepped + 1);
    assert_eq!(r.epoch, p.epoch, "the epoch is still running");
    let accumulating = p.restarted(Some(4), false);
    assert_eq!(accumulating.batches_that_stepped, p.batches_that_stepped);
}

#[test]
fn a_restart_after_the_last_batch_completes_the_epoch() {
    let mut p = after_epochs(1, 2);
    p.start_epoch(false);
    p.epoch.increment_ready();
    p.epoch.increment_started();
    for b in 0..2 {
        p.batch.is_last_batch = b == 1;
        p.batch.progress.increment_ready();
        p.batch.progress.increment_started();
        p.batch.progress.increment_processed();
        if b == 0 {
            p.batch.progress.increment_completed();
        }
    }
    let r = p.restarted(Some(2), true);
    assert_eq!(r.epoch.current, Tracker { ready: 2, started: 2, processed: 2, completed: 2 });
    assert_eq!(r.batch.progress.current, Tracker::default(), "the next epoch counts from zero");
    assert_eq!(r.batch.progress.total.completed, 4);
}

#[test]
fn counts_out_of_range_are_found() {
    let mut p = after_epochs(1, 2);
    assert!(p.counts_within(100));
    assert!(!p.counts_within(1));
    p.val_batch.progress.current.started = -1;
    assert!(!p.counts_within(100));
}

#[test]
fn extra_zero_grads_are_the_calls_beyond_the_steps() {
    let mut p = FitProgress::default();
    p.optimizer.step.increment_by(2);
    p.optimizer.zero_grad.increment_by(5);
    p.optimizer.step.reset_on_run();
    p.optimizer.zero_grad.reset_on_run();
    p.optimizer.step.increment_by(1);
    p.optimizer.zero_grad.increment_by(2);
    assert_eq!(p.extra_zero_grads(), (4, 1));
}
