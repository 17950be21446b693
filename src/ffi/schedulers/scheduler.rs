//! `fulmen_scheduler`: learning-rate schedulers (torch.optim.lr_scheduler)
//! attached to an optimizer, stepped by the trainer or by the host.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::optim::optimizers::fulmen_optimizer;
use crate::ffi::schedulers::gen_options::{
    fulmen_one_cycle_options, fulmen_plateau_options, fulmen_plateau_options_default,
};
use crate::ffi::tensor::handle::i64_list;
use crate::optim::{
    check_sequential_milestones, AnnealStrategy, ChainedLr, ConstantLr, CosineAnnealingLr, CosineAnnealingWarmRestarts,
    ExponentialLr, LinearLr, LrScheduler, MultiStepLr, OneCycleLr, OneCycleOptions, PlateauOptions, PolynomialLr,
    ReduceLrOnPlateau, SequentialLr, StepLr, SwaLr,
};
use std::ffi::c_char;

/// A learning-rate scheduler bound to the optimizer it was created for.
/// Free with `fulmen_scheduler_free` unless handed to the trainer.
pub struct fulmen_scheduler {
    pub(crate) inner: Box<dyn LrScheduler>,
    /// The `id` of the optimizer it was created for (identity checks).
    pub(crate) optimizer: u64,
}

impl Handle for fulmen_scheduler {
    const C_NAME: &'static str = "fulmen_scheduler";
}

/// Builds a scheduler on `optimizer` into `*out`.
pub(crate) unsafe fn make(
    optimizer: *mut fulmen_optimizer,
    out: *mut *mut fulmen_scheduler,
    build: impl FnOnce(&mut dyn crate::optim::Optimizer) -> Result<Box<dyn LrScheduler>>,
) -> Result<()> {
    check_out(out, "out")?;
    let mut o = handle::borrow_mut(optimizer, "optimizer")?;
    let inner = build(o.inner.as_mut())?;
    out.write(handle::into_raw(fulmen_scheduler { inner, optimizer: o.id }));
    Ok(())
}

/// `StepLR`: multiplies the lr by `gamma` every `step_size` steps.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`step_size` < 1, `gamma` not
/// finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_step_lr_new(
    optimizer: *mut fulmen_optimizer,
    step_size: i64,
    gamma: f64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| make(optimizer, out, |o| Ok(Box::new(StepLr::new(o, step_size, gamma)?))))
}

/// `MultiStepLR`: multiplies the lr by `gamma` at each of `milestones`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`gamma` not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_multi_step_lr_new(
    optimizer: *mut fulmen_optimizer,
    milestones: *const i64,
    n_milestones: usize,
    gamma: f64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let m = i64_list(milestones, n_milestones, "milestones")?;
        make(optimizer, out, |o| Ok(Box::new(MultiStepLr::new(o, m, gamma)?)))
    })
}

/// `ExponentialLR`: multiplies the lr by `gamma` every step.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`gamma` not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_exponential_lr_new(
    optimizer: *mut fulmen_optimizer,
    gamma: f64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { make(optimizer, out, |o| Ok(Box::new(ExponentialLr::new(o, gamma)?))) })
}

/// `CosineAnnealingLR(t_max, eta_min)`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`t_max` < 1, `eta_min` not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_cosine_lr_new(
    optimizer: *mut fulmen_optimizer,
    t_max: i64,
    eta_min: f64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { make(optimizer, out, |o| Ok(Box::new(CosineAnnealingLr::new(o, t_max, eta_min)?))) })
}

/// `LinearLR(start_factor, end_factor, total_iters)`: linear warm-up (or
/// decay) of the lr factor.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`start_factor` not in (0, 1],
/// `end_factor` not in [0, 1], `total_iters` < 1).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_linear_lr_new(
    optimizer: *mut fulmen_optimizer,
    start_factor: f64,
    end_factor: f64,
    total_iters: i64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { make(optimizer, out, |o| Ok(Box::new(LinearLr::new(o, start_factor, end_factor, total_iters)?))) })
}

/// `ConstantLR(factor, total_iters)`: the lr times `factor` for the first
/// `total_iters` steps, then the lr itself.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`factor` not in [0, 1],
/// `total_iters` < 0).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_constant_lr_new(
    optimizer: *mut fulmen_optimizer,
    factor: f64,
    total_iters: i64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { make(optimizer, out, |o| Ok(Box::new(ConstantLr::new(o, factor, total_iters)?))) })
}

/// `PolynomialLR(total_iters, power)`: the lr decays to 0 over
/// `total_iters` steps as `(1 - step / total_iters)^power`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`total_iters` < 1, `power` not
/// finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_polynomial_lr_new(
    optimizer: *mut fulmen_optimizer,
    total_iters: i64,
    power: f64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { make(optimizer, out, |o| Ok(Box::new(PolynomialLr::new(o, total_iters, power)?))) })
}

/// `CosineAnnealingWarmRestarts(t_0, t_mult, eta_min)` (SGDR): cosine
/// annealing from the lr to `eta_min`, restarted after `t_0` steps, each
/// period `t_mult` times longer than the one before.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`t_0` < 1, `t_mult` < 1, `eta_min`
/// not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_cosine_warm_restarts_new(
    optimizer: *mut fulmen_optimizer,
    t_0: i64,
    t_mult: i64,
    eta_min: f64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| { make(optimizer, out, |o| Ok(Box::new(CosineAnnealingWarmRestarts::new(o, t_0, t_mult, eta_min)?))) })
}

/// The most schedulers one SequentialLR takes.
pub const FULMEN_SEQUENTIAL_MAX: usize = 64;

/// Takes the schedulers a SequentialLR or ChainedScheduler (`kind`) is
/// made of, after checking them all: made for `optimizer`, live, not
/// listed twice, for its current param groups, not a ReduceLROnPlateau nor
/// a composite one, and (for a chain) not stepped yet. A failure takes none.
unsafe fn take_parts(
    optimizer: u64,
    groups: usize,
    schedulers: *const *mut fulmen_scheduler,
    n_schedulers: usize,
    max: usize,
    kind: &str,
) -> Result<Vec<Box<dyn LrScheduler>>> {
    if n_schedulers == 0 || n_schedulers > max {
        return Err(Error::invalid(format!("n_schedulers must be 1 to {max}, got {n_schedulers}")));
    }
    if schedulers.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, "schedulers is NULL"));
    }
    let list = std::slice::from_raw_parts(schedulers, n_schedulers);
    let chained = kind == "ChainedScheduler";
    let parts = handle::take_owned_all(list, "schedulers", |i, s| {
        if s.optimizer != optimizer {
            return Err(Error::invalid(format!("schedulers[{i}] was made for another optimizer")));
        }
        let name = s.inner.name();
        if s.inner.reduce_on_plateau() || name == "sequential_lr" || name == "chained_scheduler" {
            return Err(Error::invalid(format!("schedulers[{i}] is a {name}, which cannot run inside a {kind}")));
        }
        if s.inner.last_lr().len() != groups {
            return Err(Error::state(format!(
                "schedulers[{i}] was made for {} param groups; the optimizer now has {groups}",
                s.inner.last_lr().len()
            )));
        }
        if chained && !s.inner.fresh() {
            return Err(Error::state(format!("schedulers[{i}] has stepped; a {kind} takes fresh ones")));
        }
        Ok(())
    })?;
    Ok(parts.into_iter().map(|s| s.inner).collect())
}

/// `SequentialLR(schedulers, milestones)`: `schedulers[0]` runs until step
/// `milestones[0]`, then `schedulers[1]` from its own step 0, and so on (a
/// linear warm-up then a cosine decay: LinearLR, CosineAnnealingLR,
/// milestone = the warm-up's length). Every scheduler must have been made
/// for `optimizer`; they are consumed on success only (free none of them
/// afterwards). As torch, the lr starts over from the optimizer's initial
/// lr. `n_schedulers` is 1 to FULMEN_SEQUENTIAL_MAX; `n_milestones` is
/// `n_schedulers - 1`, increasing.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (counts, milestones not increasing
/// or negative, a scheduler made for another optimizer or listed twice, a
/// ReduceLROnPlateau, a SequentialLR or ChainedScheduler inside),
/// FULMEN_CODE_INVALID_STATE (a scheduler in use, or the optimizer's param
/// groups changed since a scheduler was made).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_sequential_lr_new(
    optimizer: *mut fulmen_optimizer,
    schedulers: *const *mut fulmen_scheduler,
    n_schedulers: usize,
    milestones: *const i64,
    n_milestones: usize,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let m = if n_milestones == 0 { &[][..] } else { i64_list(milestones, n_milestones, "milestones")? };
        // Checked before the schedulers are taken: a failure consumes none.
        if (1..=FULMEN_SEQUENTIAL_MAX).contains(&n_schedulers) {
            check_sequential_milestones(n_schedulers, m).map_err(Error::invalid)?;
        }
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        let groups = o.inner.param_groups().len();
        let parts = take_parts(o.id, groups, schedulers, n_schedulers, FULMEN_SEQUENTIAL_MAX, "SequentialLR")?;
        let inner = SequentialLr::new(o.inner.as_mut(), parts, m.to_vec())?;
        out.write(handle::into_raw(fulmen_scheduler { inner: Box::new(inner), optimizer: o.id }));
        Ok(())
    })
}

/// The most schedulers one ChainedScheduler takes.
pub const FULMEN_CHAINED_MAX: usize = 64;
const _: () = assert!(FULMEN_CHAINED_MAX == crate::optim::MAX_CHAINED);

/// `ChainedScheduler(schedulers)`: every scheduler steps at each step, in
/// order, each from the lr the one before wrote, so their factors compose
/// (ConstantLR's warm-up factor times ExponentialLR's decay). As torch,
/// StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR,
/// ConstantLR, PolynomialLR and MultiplicativeLR step in their chainable
/// form (from the current lr); LambdaLR, CyclicLR, OneCycleLR and
/// CosineAnnealingWarmRestarts write their own lrs over what the ones
/// before wrote. The lr starts over from the optimizer's initial lr, then
/// each scheduler takes its first step in order, as torch's constructors
/// do one after another (a LambdaLR's function is not called again: its
/// constructor's factors are used). Every scheduler must have been made
/// for `optimizer` and not stepped; they are consumed on success only
/// (free none of them afterwards). `n_schedulers` is 1 to
/// FULMEN_CHAINED_MAX.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (count, a scheduler made for
/// another optimizer or listed twice, a ReduceLROnPlateau, a SequentialLR
/// or ChainedScheduler inside), FULMEN_CODE_INVALID_STATE (a scheduler in
/// use or already stepped, or the optimizer's param groups changed since a
/// scheduler was made).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_chained_new(
    optimizer: *mut fulmen_optimizer,
    schedulers: *const *mut fulmen_scheduler,
    n_schedulers: usize,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        let groups = o.inner.param_groups().len();
        let parts = take_parts(o.id, groups, schedulers, n_schedulers, FULMEN_CHAINED_MAX, "ChainedScheduler")?;
        let inner = ChainedLr::new(o.inner.as_mut(), parts)?;
        out.write(handle::into_raw(fulmen_scheduler { inner: Box::new(inner), optimizer: o.id }));
        Ok(())
    })
}

/// torch's `SWALR`: anneals each group's lr to its SWA lr over
/// `anneal_epochs` steps (cosine, or linear when `linear_anneal`), then
/// holds it. `swa_lrs` holds one lr for all groups or one per group (read
/// during the call only). With `last_epoch` -1 a group without an
/// `initial_lr` takes its lr as one; another value needs every group's
/// `initial_lr` set already (a resumed optimizer's). The constructor leaves the lr as it
/// is unless `anneal_epochs` is 0.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (no lr,
/// as many as neither 1 nor the groups, an lr negative or not finite,
/// `anneal_epochs` < 0, `last_epoch` < -1, `last_epoch` >= 0 without
/// `initial_lr`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_swa_lr_new(
    optimizer: *mut fulmen_optimizer,
    swa_lrs: *const f64,
    n_swa_lrs: usize,
    anneal_epochs: i64,
    linear_anneal: bool,
    last_epoch: i64,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let lrs = crate::ffi::tensor::handle::slice_arg(swa_lrs, n_swa_lrs, "swa_lrs")?;
        if lrs.is_empty() {
            return Err(Error::invalid("swa_lrs is empty: give one lr, or one per param group"));
        }
        let strategy = if linear_anneal { AnnealStrategy::Linear } else { AnnealStrategy::Cos };
        make(optimizer, out, |o| Ok(Box::new(SwaLr::new(o, lrs, anneal_epochs, strategy, last_epoch)?)))
    })
}

/// `OneCycleLR` with `options` (required).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an invalid option, or `pct_start`
/// and `total_steps` that give an empty phase).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_one_cycle_lr_new(
    optimizer: *mut fulmen_optimizer,
    options: *const fulmen_one_cycle_options,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = one_cycle_options(options)?;
        make(optimizer, out, |op| Ok(Box::new(OneCycleLr::new(op, opts)?)))
    })
}

/// `OneCycleLR` with a peak learning rate per param group (torch's
/// `max_lr` given as a list, for discriminative learning rates):
/// `max_lrs` holds `n_max_lrs` values, one for each of the optimizer's
/// groups, each finite and > 0; `options.max_lr` is ignored. Each group
/// starts at its `max_lr / div_factor` and ends at that over
/// `final_div_factor`, as in torch. Otherwise as
/// `fulmen_scheduler_one_cycle_lr_new`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n_max_lrs` not the optimizer's
/// group count; a bad `max_lrs` value; the options as in
/// `fulmen_scheduler_one_cycle_lr_new`), FULMEN_CODE_NULL_ARGUMENT
/// (`options` NULL, or `max_lrs` NULL with `n_max_lrs` > 0).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_one_cycle_lr_max_lrs_new(
    optimizer: *mut fulmen_optimizer,
    options: *const fulmen_one_cycle_options,
    max_lrs: *const f64,
    n_max_lrs: usize,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let opts = one_cycle_options(options)?;
        let peaks = crate::ffi::tensor::handle::slice_arg(max_lrs, n_max_lrs, "max_lrs")?;
        if peaks.is_empty() {
            return Err(Error::invalid("max_lrs is empty: give one per param group"));
        }
        make(optimizer, out, |op| Ok(Box::new(OneCycleLr::with_max_lrs(op, opts, peaks)?)))
    })
}

/// The core's options from the C struct (required).
unsafe fn one_cycle_options(options: *const fulmen_one_cycle_options) -> Result<OneCycleOptions> {
    let o = options.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `options` is NULL"))?;
    Ok(OneCycleOptions::from(*o))
}

/// `ReduceLROnPlateau` with `options` (NULL for the defaults). Step it
/// with a metric.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`factor` not in [0, 1), or
/// `threshold`, `min_lr` or `eps` negative or not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_reduce_on_plateau_new(
    optimizer: *mut fulmen_optimizer,
    options: *const fulmen_plateau_options,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let o = options.as_ref().copied().unwrap_or_else(|| fulmen_plateau_options_default());
        let opts = PlateauOptions::from(o);
        make(optimizer, out, |op| Ok(Box::new(ReduceLrOnPlateau::new(op, opts)?)))
    })
}

/// `ReduceLROnPlateau` with one lower bound per param group (torch's
/// `min_lr` given as a list): `min_lrs` holds `n_min_lrs` values, one for
/// each of the optimizer's groups; `options.min_lr` is ignored. Otherwise
/// as `fulmen_scheduler_reduce_on_plateau_new`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n_min_lrs` not the optimizer's
/// group count; a bound negative or not finite; the options as in
/// `fulmen_scheduler_reduce_on_plateau_new`), FULMEN_CODE_NULL_ARGUMENT
/// (`min_lrs` NULL with `n_min_lrs` > 0).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_reduce_on_plateau_min_lrs_new(
    optimizer: *mut fulmen_optimizer,
    options: *const fulmen_plateau_options,
    min_lrs: *const f64,
    n_min_lrs: usize,
    out: *mut *mut fulmen_scheduler,
) -> *mut fulmen_error {
    guard!(|| {
        let o = options.as_ref().copied().unwrap_or_else(|| fulmen_plateau_options_default());
        let opts = PlateauOptions { min_lr: 0.0, ..PlateauOptions::from(o) };
        let bounds = crate::ffi::tensor::handle::slice_arg(min_lrs, n_min_lrs, "min_lrs")?;
        make(optimizer, out, |op| Ok(Box::new(ReduceLrOnPlateau::with_min_lrs(op, opts, bounds)?)))
    })
}

/// Advances the scheduler one step and sets the new lr in `optimizer`,
/// which must be the one it was created for. `metric` is used by
/// ReduceLROnPlateau (required there: pass a finite value) and ignored by
/// the others. Most kinds compute the lr from the optimizer's initial lr
/// (torch's closed forms): two of them stepped on one optimizer here would
/// overwrite each other; to compose them as torch does, step one
/// `fulmen_scheduler_chained_new` of both.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`optimizer` is not the scheduler's,
/// or a NaN `metric` for ReduceLROnPlateau), FULMEN_CODE_INVALID_STATE (the
/// optimizer gained parameter groups since the scheduler was made),
/// FULMEN_CODE_OUT_OF_RANGE (OneCycleLR stepped past `total_steps`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_step(
    scheduler: *mut fulmen_scheduler,
    optimizer: *mut fulmen_optimizer,
    metric: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut s = handle::borrow_mut(scheduler, "scheduler")?;
        let mut o = handle::borrow_mut(optimizer, "optimizer")?;
        if s.optimizer != o.id {
            return Err(Error::invalid("`optimizer` is not the optimizer this scheduler was created for"));
        }
        let m = if metric.is_nan() { None } else { Some(metric) };
        s.inner.step(o.inner.as_mut(), m)
    })
}

/// Saves the scheduler's state (`scheduler.state_dict()`: its step count,
/// base and last lrs and its kind's own numbers) at `path` without a
/// trainer: a safetensors file as fulmen's checkpoints are, written
/// atomically. A LambdaLR's function is not saved (as in torch).
///
/// Errors: FULMEN_CODE_IO (the file cannot be written).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_save_state(
    scheduler: *const fulmen_scheduler,
    path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let path = crate::ffi::base::error::str_arg(path, "path")?;
        let s = handle::borrow(scheduler, "scheduler")?;
        crate::optim::state_file::save_scheduler(s.inner.as_ref(), std::path::Path::new(path))
    })
}

/// Loads into the scheduler the state `fulmen_scheduler_save_state` wrote
/// for a scheduler of the same kind. The optimizer's lrs are left as they
/// are (as torch's `load_state_dict`): the scheduler's next step writes
/// them. On error the scheduler is unchanged.
///
/// Errors: FULMEN_CODE_IO (the file cannot be read; not a regular file),
/// FULMEN_CODE_FORMAT (not a scheduler state, another kind's, a missing
/// or invalid entry).
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_load_state(
    scheduler: *mut fulmen_scheduler,
    path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let path = crate::ffi::base::error::str_arg(path, "path")?;
        let mut s = handle::borrow_mut(scheduler, "scheduler")?;
        crate::optim::state_file::load_scheduler(s.inner.as_mut(), std::path::Path::new(path))
    })
}

/// Frees a scheduler. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_scheduler_free(scheduler: *mut fulmen_scheduler) {
    handle::free(scheduler);
}
