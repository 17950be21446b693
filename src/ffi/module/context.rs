//! `fulmen_step_context`: what a step callback can read and log.
use crate::error::Error;
use crate::error::ErrorCode;
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, write_out, Exclusive, Handle, Shared};
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use crate::trainer::context::check_metric_name;
use crate::trainer::metrics::ReduceFx;
use crate::trainer::{LogFlags, Stage, StepContext};
use std::ffi::c_char;

/// The context of one step call: stage, epoch, step and batch index, and
/// metric logging. Borrowed: valid only during the step callback.
pub struct fulmen_step_context {
    pub(crate) ctx: *mut StepContext<'static>,
}

impl Handle for fulmen_step_context {
    const C_NAME: &'static str = "fulmen_step_context";
}

/// Log flag: record the value of every step.
pub const FULMEN_LOG_ON_STEP: u32 = 1;
/// Log flag: record the epoch's reduction (by default the mean weighted by
/// batch size).
pub const FULMEN_LOG_ON_EPOCH: u32 = 2;
/// Log flag: show in the progress output.
pub const FULMEN_LOG_PROG_BAR: u32 = 4;
/// Log flag: reduce the value over ranks first (DDP's `sync_dist`, with the
/// metric's reduction: mean, sum, max or min; every rank must log the same
/// names in the same steps).
pub const FULMEN_LOG_SYNC_DIST: u32 = 8;
/// Log flag: keep the metric out of the loggers (Lightning's
/// `logger=False`); callback metrics and progress still see it.
pub const FULMEN_LOG_NO_LOGGER: u32 = 16;
/// Log flag: logged on rank 0 only (Lightning's `rank_zero_only=True`):
/// never synchronized, so no rank waits for the others.
pub const FULMEN_LOG_RANK_ZERO_ONLY: u32 = 32;
/// Log flag: the epoch value is the sum of the values (`reduce_fx="sum"`).
pub const FULMEN_LOG_REDUCE_SUM: u32 = 64;
/// Log flag: the epoch value is the largest value (`reduce_fx="max"`).
pub const FULMEN_LOG_REDUCE_MAX: u32 = 128;
/// Log flag: the epoch value is the smallest value (`reduce_fx="min"`).
pub const FULMEN_LOG_REDUCE_MIN: u32 = 256;

/// Log flag: on_step is the default of the step function or hook
/// (Lightning's `on_step=None`; training_step and the training batch hooks:
/// on; validation / test and their batch hooks, the epoch hooks: off).
/// Not with FULMEN_LOG_ON_STEP.
pub const FULMEN_LOG_DEFAULT_STEP: u32 = 512;
/// Log flag: on_epoch is the default of the step function or hook
/// (Lightning's `on_epoch=None`). Not with FULMEN_LOG_ON_EPOCH.
pub const FULMEN_LOG_DEFAULT_EPOCH: u32 = 1024;
/// Log flags: both levels the defaults, as flags without FULMEN_LOG_ON_STEP
/// and FULMEN_LOG_ON_EPOCH (Lightning's `self.log(name, value)`).
pub const FULMEN_LOG_DEFAULT: u32 = 1536;
/// Log flag: with several evaluation loaders, keep the name as given rather
/// than add `/dataloader_idx_N` (Lightning's `add_dataloader_idx=False`);
/// two loaders then cannot log the same name.
pub const FULMEN_LOG_NO_DATALOADER_IDX: u32 = 2048;

/// Log flags: where the group a FULMEN_LOG_SYNC_DIST value is reduced over
/// starts (Lightning's `sync_dist_group`): flags carry
/// `(uint32_t)group << FULMEN_LOG_GROUP_SHIFT`, `group` an id from
/// `fulmen_hook_context_new_group`. No group bits: the whole job. A rank
/// outside the group keeps its own value; without FULMEN_LOG_SYNC_DIST the
/// group is ignored, as Lightning ignores `sync_dist_group` then.
pub const FULMEN_LOG_GROUP_SHIFT: u32 = 16;
/// Log flags: the bits holding the group (FULMEN_LOG_GROUP_SHIFT).
pub const FULMEN_LOG_GROUP_MASK: u32 = 0xFFFF_0000;

/// Every log flag.
const ALL_LOG_FLAGS: u32 = FULMEN_LOG_ON_STEP
    | FULMEN_LOG_ON_EPOCH
    | FULMEN_LOG_PROG_BAR
    | FULMEN_LOG_SYNC_DIST
    | FULMEN_LOG_NO_LOGGER
    | FULMEN_LOG_RANK_ZERO_ONLY
    | FULMEN_LOG_REDUCE_SUM
    | FULMEN_LOG_REDUCE_MAX
    | FULMEN_LOG_REDUCE_MIN
    | FULMEN_LOG_DEFAULT
    | FULMEN_LOG_NO_DATALOADER_IDX
    | FULMEN_LOG_GROUP_MASK;

/// Reads the step context (shared pin).
pub(crate) unsafe fn ctx_ref<'a>(
    p: *const fulmen_step_context,
) -> crate::error::Result<Shared<'a, StepContext<'static>>> {
    Ok(handle::borrow(p, "ctx")?.map(|h| unsafe { &*h.ctx }))
}

/// Changes the step context (exclusive pin: one log at a time).
pub(crate) unsafe fn ctx_mut<'a>(
    p: *mut fulmen_step_context,
) -> crate::error::Result<Exclusive<'a, StepContext<'static>>> {
    Ok(handle::borrow_mut(p, "ctx")?.map(|h| unsafe { &mut *h.ctx }))
}

/// One level of a log call: `Some` when the flags set it, `None` for the
/// function's default (its DEFAULT flag, or flags naming no level at all).
fn log_level(flags: u32, on: u32, default: u32, legacy_default: bool) -> crate::error::Result<Option<bool>> {
    if flags & on != 0 && flags & default != 0 {
        return Err(Error::invalid(format!(
            "log flags {flags:#x} set a level both on and to its default (FULMEN_LOG_ON_STEP with \
             FULMEN_LOG_DEFAULT_STEP, or FULMEN_LOG_ON_EPOCH with FULMEN_LOG_DEFAULT_EPOCH)"
        )));
    }
    Ok((!legacy_default && flags & default == 0).then_some(flags & on != 0))
}

/// Reads log flags: on_step and on_epoch as Lightning's tri-states
/// (`None`: the default), and the other arguments. Flags naming none of
/// ON_STEP, ON_EPOCH, DEFAULT_STEP, DEFAULT_EPOCH leave both to the
/// defaults; otherwise a level neither ON nor DEFAULT is off.
pub(crate) fn parse_log_flags(flags: u32) -> crate::error::Result<(Option<bool>, Option<bool>, LogFlags)> {
    if flags & !ALL_LOG_FLAGS != 0 {
        return Err(Error::invalid(format!("unknown log flags {flags:#x}")));
    }
    let reduce = flags & (FULMEN_LOG_REDUCE_SUM | FULMEN_LOG_REDUCE_MAX | FULMEN_LOG_REDUCE_MIN);
    let reduce_fx = match reduce {
        0 => ReduceFx::Mean,
        FULMEN_LOG_REDUCE_SUM => ReduceFx::Sum,
        FULMEN_LOG_REDUCE_MAX => ReduceFx::Max,
        FULMEN_LOG_REDUCE_MIN => ReduceFx::Min,
        _ => return Err(Error::invalid(format!("log flags {flags:#x} name more than one reduction"))),
    };
    let legacy_default = flags & (FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH | FULMEN_LOG_DEFAULT) == 0;
    let on_step = log_level(flags, FULMEN_LOG_ON_STEP, FULMEN_LOG_DEFAULT_STEP, legacy_default)?;
    let on_epoch = log_level(flags, FULMEN_LOG_ON_EPOCH, FULMEN_LOG_DEFAULT_EPOCH, legacy_default)?;
    let rest = LogFlags {
        on_step: false,
        on_epoch: false,
        prog_bar: flags & FULMEN_LOG_PROG_BAR != 0,
        sync_dist: flags & FULMEN_LOG_SYNC_DIST != 0,
        logger: flags & FULMEN_LOG_NO_LOGGER == 0,
        rank_zero_only: flags & FULMEN_LOG_RANK_ZERO_ONLY != 0,
        reduce_fx,
        add_dataloader_idx: flags & FULMEN_LOG_NO_DATALOADER_IDX == 0,
        sync_dist_group: (flags & FULMEN_LOG_GROUP_MASK) >> FULMEN_LOG_GROUP_SHIFT,
    };
    Ok((on_step, on_epoch, rest))
}

/// The flags of a step function's log call, the levels resolved with the
/// stage's defaults and allowed values (Lightning's `_FxValidator`:
/// training on step, validation / test on epoch). In predict_step the
/// levels stay off and the log call refuses.
pub(crate) fn log_flags(stage: Stage, flags: u32) -> crate::error::Result<LogFlags> {
    let (on_step, on_epoch, rest) = parse_log_flags(flags)?;
    let Some(options) = stage.log_options() else { return Ok(rest) };
    let (on_step, on_epoch) = options.resolve(stage.fx_name(), on_step, on_epoch)?;
    Ok(LogFlags { on_step, on_epoch, ..rest })
}

/// Logs a metric, as Lightning's `self.log(name, value, ...)`. `flags`
/// combines the FULMEN_LOG_* flags: ON_STEP / ON_EPOCH (neither, nor a
/// DEFAULT flag: the stage's defaults, training on step, validation / test
/// on epoch), DEFAULT_STEP / DEFAULT_EPOCH (that level's default, as
/// Lightning's `None`; a level neither ON nor DEFAULT is off), PROG_BAR,
/// SYNC_DIST (over the whole job, or over a group of
/// `fulmen_hook_context_new_group` in the bits of FULMEN_LOG_GROUP_SHIFT;
/// an id the run did not make fails the run with
/// FULMEN_CODE_INVALID_ARGUMENT where the value is reduced), NO_LOGGER (`logger=False`), RANK_ZERO_ONLY,
/// NO_DATALOADER_IDX (`add_dataloader_idx=False`), and at most one of
/// REDUCE_SUM / REDUCE_MAX / REDUCE_MIN (`reduce_fx`; default the mean
/// weighted by batch size). `batch_size` weights the epoch mean; 0 uses
/// the batch's first dimension. Logged with both ON_STEP and ON_EPOCH,
/// `name` appears as `name_step` and `name_epoch`. With several evaluation
/// loaders the name gets `/dataloader_idx_N` unless NO_DATALOADER_IDX.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (unknown flags, two reductions, ON
/// and DEFAULT for one level, both levels off; a name that is empty, not
/// UTF-8, or holds a comma, quote or newline, or holds
/// `/dataloader_idx_` without NO_DATALOADER_IDX; a negative `batch_size`;
/// a name logged before with other flags, or with NO_DATALOADER_IDX from
/// another loader),
/// FULMEN_CODE_INVALID_STATE (also from predict_step, where nothing can be
/// logged).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_log(
    ctx: *mut fulmen_step_context,
    name: *const c_char,
    value: f64,
    flags: u32,
    batch_size: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let n = str_arg(name, "name")?;
        let f = log_flags(c.stage, flags)?;
        c.log(n, value, Some(f), batch_size)
    })
}

/// Logs a one-element tensor as a metric, as `fulmen_step_context_log`
/// (the same flags and `batch_size`) with the value `value` holds; the
/// handle stays the caller's, and the value is copied. A device tensor is
/// not read in the step, so the step does not wait for its device: its
/// epoch value is reduced on the device and read at the epoch's end, and
/// its step value when the trainer reads values anyway (the loggers every
/// `log_every_n_steps` steps, and after each validation or test batch
/// that logs one, as Lightning's; a progress-bar refresh, a callback or
/// host reading the metric, the epoch's end), all pending values in one
/// copy per device. A step value logged with SYNC_DIST is read at once (the
/// ranks reduce it in its step). A CPU tensor is read at once. Integer
/// tensors are taken as numbers.
///
/// Errors: those of `fulmen_step_context_log`; FULMEN_CODE_NULL_ARGUMENT
/// and the handle errors for `value`; FULMEN_CODE_SHAPE_MISMATCH (not one
/// element), FULMEN_CODE_DTYPE_MISMATCH (a boolean or complex tensor);
/// reading a per-step value from its device may fail with that device's
/// error.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_log_tensor(
    ctx: *mut fulmen_step_context,
    name: *const c_char,
    value: *const fulmen_tensor,
    flags: u32,
    batch_size: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let n = str_arg(name, "name")?;
        let t = tensor_arg(value, "value")?;
        let f = log_flags(c.stage, flags)?;
        c.log_tensor(n, &t, Some(f), batch_size)
    })
}

/// Logs `n` metrics with the same `flags` and `batch_size`, as Lightning's
/// `self.log_dict`: `names[i]` gets `values[i]`. Every name is checked
/// before any is logged.
///
/// Errors: those of `fulmen_step_context_log`; FULMEN_CODE_NULL_ARGUMENT
/// also for a NULL `names` / `values` with `n` > 0 or a NULL name.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_log_dict(
    ctx: *mut fulmen_step_context,
    names: *const *const c_char,
    values: *const f64,
    n: usize,
    flags: u32,
    batch_size: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let f = log_flags(c.stage, flags)?;
        if n == 0 {
            return Ok(());
        }
        if names.is_null() || values.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "argument `names` or `values` is NULL"));
        }
        let names = std::slice::from_raw_parts(names, n);
        let values = std::slice::from_raw_parts(values, n);
        for (i, p) in names.iter().enumerate() {
            check_metric_name(str_arg(*p, &format!("names[{i}]"))?)?;
        }
        for (p, v) in names.iter().zip(values) {
            c.log(str_arg(*p, "name")?, *v, Some(f), batch_size)?;
        }
        Ok(())
    })
}

/// Writes the running stage (a `fulmen_stage`).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_stage(
    ctx: *const fulmen_step_context,
    out: *mut i32,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.stage as i32))
}

/// Writes the current epoch (0-based).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_epoch(
    ctx: *const fulmen_step_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.epoch))
}

/// Writes the number of optimizer steps taken so far.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_global_step(
    ctx: *const fulmen_step_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.global_step))
}

/// Writes the index of the batch within the epoch (0-based).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_batch_idx(
    ctx: *const fulmen_step_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.batch_idx))
}

/// Adds `tensor` to the prediction of the running predict_step, which is
/// then a tuple (Lightning's `predict_step` returning one): the tensor the
/// step writes to `*out`, if any, then the added ones in order. The
/// prediction shares the tensor's storage (with the trainer option
/// `cuda_graphs`, a replayed batch's is a copy of the graph's); the handle
/// stays the caller's.
/// `fulmen_trainer_predict_batches`, `fulmen_hook_context_prediction` (in
/// `on_predict_batch_end`) and `fulmen_trainer_add_prediction_value_writer`'s
/// writers get such tuples; the predict calls that concatenate use only
/// the tensors written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_STATE (outside predict_step, or after
/// `fulmen_step_context_add_named_prediction` or
/// `fulmen_step_context_set_prediction` in the same step).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_add_prediction(
    ctx: *mut fulmen_step_context,
    tensor: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?.shallow_clone();
        ctx_mut(ctx)?.add_prediction(t)
    })
}

/// Adds `tensor` under `name` to the prediction of the running
/// predict_step, which is then a dict of the named tensors in the order
/// added (Lightning's `predict_step` returning a dict):
/// `fulmen_trainer_predict_batches` returns it as a `FULMEN_VALUE_KIND_DICT`
/// with string keys. A step that names its predictions names them all and
/// writes no tensor to `*out`. The prediction shares the tensor's
/// storage; the handle and `name` stay the caller's.
/// `fulmen_hook_context_prediction` (in `on_predict_batch_end`) and
/// `fulmen_trainer_add_prediction_value_writer`'s writers get the dict
/// too; the predict calls that concatenate refuse dicts, and the tensor
/// readers (`fulmen_hook_context_output`, `fulmen_trainer_add_prediction_writer`)
/// see no tensor for such a batch.
///
/// Errors: FULMEN_CODE_INVALID_STATE (outside predict_step, or after
/// `fulmen_step_context_add_prediction` or
/// `fulmen_step_context_set_prediction` in the same step; the step then
/// writing `*out` fails the run), FULMEN_CODE_INVALID_ARGUMENT (`name`
/// empty, not UTF-8, or added already in this step).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_add_named_prediction(
    ctx: *mut fulmen_step_context,
    name: *const c_char,
    tensor: *const fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(name, "name")?;
        let t = tensor_arg(tensor, "tensor")?.shallow_clone();
        ctx_mut(ctx)?.add_named_prediction(name, t)
    })
}

/// Sets the whole prediction of the running predict_step to `value`, of
/// any shape: Lightning's `predict_step` returning nested tuples, lists
/// and dicts of tensors, numbers and strings (`{"logits": t, "meta": (ids,
/// 3)}`). The step then adds no tensors and writes none to `*out`. The
/// prediction shares `value`'s tensors; the handle stays the caller's.
/// `fulmen_trainer_predict_batches`, `fulmen_hook_context_prediction` and
/// `fulmen_trainer_add_prediction_value_writer`'s writers get the value
/// as it was set; the predict calls that concatenate refuse it, the tensor
/// readers see no tensor, and strategy `dp` (whose devices' chunks would
/// need gathering) and the trainer option `cuda_graphs` (whose replays
/// could not make it again) fail the run with FULMEN_CODE_UNSUPPORTED
/// (`cuda_graphs_fallback`: the step runs eagerly instead).
///
/// Errors: FULMEN_CODE_INVALID_STATE (outside predict_step; after a tensor
/// was added or a value set in the same step; the step then writing
/// `*out` fails the run).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_set_prediction(
    ctx: *mut fulmen_step_context,
    value: *const crate::ffi::value::fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        let v = crate::ffi::value::value_arg(value, "value")?.shallow_clone();
        ctx_mut(ctx)?.set_prediction(v)
    })
}
