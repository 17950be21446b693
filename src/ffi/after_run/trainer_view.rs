//! What a hook reads of the trainer during a run: Lightning's
//! `self.trainer.<property>` from inside a hook, where the trainer handle
//! itself is in use by the run.
use super::count;
use crate::error::Error;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::check_out;
use crate::ffi::callbacks::hooks::{ctx_ref, fulmen_hook_context};
use crate::trainer::HookContext;

/// The trainer as a hook sees it during a run (Lightning's trainer
/// properties of the same names). Set `struct_size` to
/// `sizeof(fulmen_trainer_view)` before the call; the rest is written.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_trainer_view {
    /// `sizeof(fulmen_trainer_view)`, set by the caller.
    pub struct_size: usize,
    /// `current_epoch`.
    pub current_epoch: i64,
    /// `global_step`: the optimizer steps taken so far.
    pub global_step: i64,
    /// `max_epochs`; -1 when the run has no epoch limit.
    pub max_epochs: i64,
    /// `num_training_batches` of this rank: the batches an epoch runs
    /// (after limit_train_batches); -1 before the training data is loaded,
    /// outside fit, or when its length is unknown (Lightning's `inf`).
    pub num_training_batches: i64,
    /// `num_val_batches` summed over the validation loaders (after
    /// limit_val_batches; in the sanity check, its own limits); -1 when a
    /// loader's length is unknown, 0 when the run does not validate.
    pub num_val_batches: i64,
    /// `log_every_n_steps`.
    pub log_every_n_steps: i64,
    /// `accumulate_grad_batches` as the run uses it now.
    pub accumulate_grad_batches: i64,
    /// `global_rank` of this process.
    pub global_rank: i64,
    /// `world_size`: the processes of the job.
    pub world_size: i64,
    /// `node_rank` of this process's node.
    pub node_rank: i64,
    /// `num_devices` this process's node uses.
    pub num_devices: i64,
    /// `should_stop`: a stop was asked for (a hook, EarlyStopping, a
    /// signal) and the fit ends at the next point it may.
    pub should_stop: bool,
    /// `sanity_checking`: the sanity check's validation is running.
    pub sanity_checking: bool,
    /// `is_global_zero`: this is rank 0.
    pub is_global_zero: bool,
    /// `fast_dev_run` is on.
    pub fast_dev_run: bool,
}

/// The view of the run behind `ctx`, its `struct_size` from `size`.
fn view_of(ctx: &HookContext, size: usize) -> fulmen_trainer_view {
    let s = &*ctx.state;
    let loaders = if s.sanity_checking { &s.sanity_loader_batches } else { &s.val_loader_batches };
    let val = loaders.iter().try_fold(0usize, |sum, n| n.map(|n| sum.saturating_add(n)));
    fulmen_trainer_view {
        struct_size: size,
        current_epoch: s.epoch,
        global_step: s.global_step,
        max_epochs: s.max_epochs.unwrap_or(-1),
        num_training_batches: if ctx.stage == "fit" { count(s.num_train_batches) } else { -1 },
        num_val_batches: count(val),
        log_every_n_steps: s.log_every_n_steps,
        accumulate_grad_batches: s.accumulate_grad_batches,
        global_rank: s.global_rank as i64,
        world_size: s.world_size as i64,
        node_rank: s.node_rank as i64,
        num_devices: s.num_devices as i64,
        should_stop: s.should_stop,
        sanity_checking: s.sanity_checking,
        is_global_zero: s.global_rank == 0,
        fast_dev_run: s.fast_dev_run,
    }
}

/// Writes what the trainer knows now into `*out` (Lightning's
/// `self.trainer.current_epoch`, `num_training_batches`, `should_stop`,
/// `world_size`, ... read from a hook, where `fulmen_trainer_*` cannot run
/// because the run holds the trainer). Valid in every hook of a run.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`out` NULL);
/// FULMEN_CODE_INVALID_ARGUMENT (`out->struct_size` smaller than this
/// version's `sizeof(fulmen_trainer_view)`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_trainer(
    ctx: *const fulmen_hook_context,
    out: *mut fulmen_trainer_view,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let size = (*out).struct_size;
        let need = std::mem::size_of::<fulmen_trainer_view>();
        if size < need {
            return Err(Error::invalid(format!(
                "out->struct_size is {size}: set it to sizeof(fulmen_trainer_view), {need} in this version"
            )));
        }
        let view = view_of(&*ctx_ref(ctx)?, size);
        out.write(view);
        Ok(())
    })
}

/// Writes a per-loader count of the run, as `fulmen_trainer_num_val_batches`
/// writes the trainer's.
unsafe fn hook_counts(
    ctx: *const fulmen_hook_context,
    pick: fn(&crate::trainer::TrainerState) -> &[Option<usize>],
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
    what: &str,
) -> crate::error::Result<()> {
    let n = super::counts(pick(ctx_ref(ctx)?.state));
    super::write_counts(&n, counts, capacity, count_out, what)
}

/// From a hook, Lightning's `trainer.num_val_batches` as
/// `fulmen_trainer_num_val_batches` writes it: one count per validation
/// loader of the run's validation (a fit's, once its loaders are loaded)
/// or validate run after `limit_val_batches`, -1 for a loader of unknown
/// length; the previous run's before that.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small; `*count_out`
/// is written).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_num_val_batches(
    ctx: *const fulmen_hook_context,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| hook_counts(ctx, |s| &s.val_loader_batches, counts, capacity, count_out, "validation loaders"))
}

/// From a hook, Lightning's `trainer.num_test_batches`: one count per
/// loader of the test run, as `fulmen_hook_context_num_val_batches`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_num_test_batches(
    ctx: *const fulmen_hook_context,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| hook_counts(ctx, |s| &s.test_loader_batches, counts, capacity, count_out, "test loaders"))
}

/// From a hook, Lightning's `trainer.num_predict_batches`: one count per
/// loader of the predict run, as `fulmen_hook_context_num_val_batches`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_num_predict_batches(
    ctx: *const fulmen_hook_context,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| hook_counts(ctx, |s| &s.predict_loader_batches, counts, capacity, count_out, "predict loaders"))
}

/// From a hook, Lightning's `trainer.num_sanity_val_batches`: the batches
/// of each validation loader the fit's sanity check runs (from
/// on_sanity_check_start on), as `fulmen_hook_context_num_val_batches`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_num_sanity_val_batches(
    ctx: *const fulmen_hook_context,
    counts: *mut i64,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let what = "sanity-checked validation loaders";
        hook_counts(ctx, |s| &s.sanity_loader_batches, counts, capacity, count_out, what)
    })
}

/// From a hook, the state of the run's first EarlyStopping as
/// `fulmen_trainer_early_stopping_state` writes the trainer's, as that
/// EarlyStopping last left it (from its first hook, the run's setup, on;
/// in on_train_epoch_end it checks after the module, as Lightning's
/// does). Any out-pointer may be NULL.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the run has no EarlyStopping).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_early_stopping_state(
    ctx: *const fulmen_hook_context,
    wait_count: *mut i64,
    stopped_epoch: *mut i64,
    best_score: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let c = ctx_ref(ctx)?;
        let (_, es) = c.state.early_stopping.ok_or_else(|| Error::state("the run has no EarlyStopping callback"))?;
        super::write_early_stopping(es, wait_count, stopped_epoch, best_score);
        Ok(())
    })
}
