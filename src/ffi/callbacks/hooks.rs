//! `fulmen_hook_context` and host callbacks (`fulmen_callback_vtable`):
//! Lightning's hooks delivered to C.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{check_struct_size, host_result, HostCallTimer, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Exclusive, Handle, Shared};
use crate::ffi::nn::model::copy_str;
use crate::ffi::tensor::handle::{emit, fulmen_tensor, tensor_arg};
use crate::ffi::tensor::TensorScope;
use crate::trainer::{Callback, Hook, HookContext};
use std::ffi::{c_char, c_void};

/// What a hook call sees: the hook's trainer state and data. Borrowed:
/// valid only during the hook callback.
pub struct fulmen_hook_context {
    pub(crate) ctx: *mut HookContext<'static>,
}

impl Handle for fulmen_hook_context {
    const C_NAME: &'static str = "fulmen_hook_context";
}

/// Reads the hook context (shared pin).
pub(crate) unsafe fn ctx_ref<'a>(p: *const fulmen_hook_context) -> Result<Shared<'a, HookContext<'static>>> {
    Ok(handle::borrow(p, "ctx")?.map(|h| unsafe { &*h.ctx }))
}

/// Changes the hook context (exclusive pin).
pub(crate) unsafe fn ctx_mut<'a>(p: *mut fulmen_hook_context) -> Result<Exclusive<'a, HookContext<'static>>> {
    Ok(handle::borrow_mut(p, "ctx")?.map(|h| unsafe { &mut *h.ctx }))
}

/// A host hook function: `hook` is a `fulmen_hook`.
pub type fulmen_hook_fn =
    unsafe extern "C" fn(userdata: *mut c_void, hook: i32, ctx: *mut fulmen_hook_context) -> *mut fulmen_error;

/// Calls a host hook function with a temporary context handle inside a
/// tensor scope, and takes its error back with the hook's name.
pub(crate) fn call_host_hook(f: fulmen_hook_fn, userdata: *mut c_void, who: &str, ctx: &mut HookContext) -> Result<()> {
    let _scope = TensorScope::enter();
    let ptr = std::ptr::from_mut(ctx).cast::<HookContext<'static>>();
    let hook = ctx.hook;
    let h = handle::into_raw(fulmen_hook_context { ctx: ptr });
    let timer = HostCallTimer::start();
    let err = unsafe { f(userdata, hook as i32, h) };
    // SAFETY: `h` was created above; the host cannot free it. Calls on it
    // from other threads finish before `ctx` goes away.
    let _ = unsafe { handle::revoke(h) };
    host_result(err, || format!("{who}.{}", hook.name()))?;
    timer.check(|| format!("{who}.{}", hook.name()))
}

/// The name Lightning gives hook `hook` ("on_train_epoch_end"), a static
/// string; "" for a value that is not a `fulmen_hook`.
#[no_mangle]
pub extern "C" fn fulmen_hook_name(hook: i32) -> *const c_char {
    static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..crate::trainer::hooks::ALL_HOOKS.len() as i32)
            .map(|i| std::ffi::CString::new(hook_from_i32(i).map_or("", |h| h.name())).unwrap_or_default())
            .collect()
    });
    usize::try_from(hook).ok().and_then(|i| names.get(i)).map_or(c"".as_ptr(), |s| s.as_ptr())
}

fn hook_from_i32(v: i32) -> Option<Hook> {
    Hook::from_i32(v)
}

/// Writes the running entry point ("fit", "validate", "test", "predict")
/// as a static string.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_stage(
    ctx: *const fulmen_hook_context,
    out: *mut *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let s = match ctx_ref(ctx)?.stage {
            "fit" => c"fit",
            "validate" => c"validate",
            "test" => c"test",
            _ => c"predict",
        };
        write_out(out, "out", s.as_ptr())
    })
}

/// Writes the current epoch (0-based).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_epoch(
    ctx: *const fulmen_hook_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.state.epoch))
}

/// Writes the number of optimizer steps taken so far.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_global_step(
    ctx: *const fulmen_hook_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.state.global_step))
}

/// Writes the batch index for batch hooks, -1 for the others.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_batch_idx(
    ctx: *const fulmen_hook_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.batch_idx))
}

/// Writes the latest value of a logged metric;
/// FULMEN_CODE_INVALID_STATE names the logged ones when it is missing. A
/// device tensor logged with `fulmen_step_context_log_tensor` and not read
/// yet is read here: the host waits for its device.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the metric was not logged, see above),
/// FULMEN_CODE_INVALID_ARGUMENT (`name` is not UTF-8), the device's error
/// when reading the value fails.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_metric(
    ctx: *const fulmen_hook_context,
    name: *const c_char,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let c = ctx_ref(ctx)?;
        let v = c.metric(str_arg(name, "name")?)?;
        write_out(out, "out", v)
    })
}

/// Asks the trainer to stop after the current step (Lightning's
/// `trainer.should_stop = True`; min_epochs / min_steps still apply).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_request_stop(ctx: *mut fulmen_hook_context) -> *mut fulmen_error {
    guard!(|| {
        ctx_mut(ctx)?.state.should_stop = true;
        Ok(())
    })
}

/// Lightning's `on_train_batch_start` returning -1, from the module's own
/// `on_hook` (`fulmen_module_vtable`) in FULMEN_HOOK_TRAIN_BATCH_START:
/// this batch is not trained on (no training_step, optimizer step or
/// on_train_batch_end) and the epoch ends there. As in Lightning, under
/// automatic optimization the schedulers that step per step and per epoch
/// still step for it, no validation runs for the rest of the epoch, the
/// epoch-end hooks and checkpoints follow, and the next epoch starts as
/// usual; `global_step` does not count the batch. Under DDP every rank
/// must ask alike.
///
/// Errors: FULMEN_CODE_INVALID_STATE (another hook, or a callback's hook:
/// only the module's return value counts in Lightning).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_skip_rest_of_epoch(ctx: *mut fulmen_hook_context) -> *mut fulmen_error {
    guard!(|| ctx_mut(ctx)?.skip_rest_of_epoch())
}

/// Logs a metric from a hook, as Lightning's `self.log(name, value, ...)`
/// there (from the LightningModule's hooks and the callbacks' alike).
/// `flags` are those of `fulmen_step_context_log`; the levels follow
/// Lightning's table for the hook, and without FULMEN_LOG_ON_STEP /
/// FULMEN_LOG_ON_EPOCH (or with the DEFAULT flags) take its defaults:
///
/// - on_train_batch_start / end, on_before_backward, on_after_backward,
///   on_before_optimizer_step, on_before_zero_grad: on_step and / or
///   on_epoch, default on_step. The value joins the step's logs (written
///   with the step, after on_train_batch_end) and the epoch's reduction,
///   weighted by the batch's size.
/// - on_validation_batch_start / end, on_test_batch_start / end: either,
///   default on_epoch; with several loaders the name gets
///   `/dataloader_idx_N` unless FULMEN_LOG_NO_DATALOADER_IDX.
/// - on_train_start, on_train_epoch_start / end, on_validation_start,
///   on_validation_epoch_start / end, on_test_start, on_test_epoch_start /
///   end: on_epoch only. The value reaches the callback metrics when the
///   module's hook returns, before ModelCheckpoint and EarlyStopping look
///   (they can monitor it), and the loggers with the epoch's metrics;
///   validate and test return it.
/// - every other hook (setup, teardown, on_fit_start / end, the sanity
///   check's, on_train_end, on_validation_end, on_test_end, predict's,
///   checkpoint, exception and batch-transfer hooks, the model eval /
///   train / zero_grad hooks): refused, as in Lightning.
///
/// FULMEN_LOG_SYNC_DIST reduces the value over ranks (every rank must log
/// the same synced names in the same order); FULMEN_LOG_RANK_ZERO_ONLY
/// never syncs.
///
/// Errors: FULMEN_CODE_INVALID_STATE (a hook where Lightning refuses
/// `self.log`, with Lightning's message naming it),
/// FULMEN_CODE_INVALID_ARGUMENT (a level the hook does not allow, with
/// Lightning's message, or both levels off; unknown flags, two reductions,
/// ON and DEFAULT for one level; a name empty, not UTF-8 or holding a
/// comma, quote or newline). A name logged again with other flags, or
/// from two loaders with FULMEN_LOG_NO_DATALOADER_IDX, fails the run with
/// FULMEN_CODE_INVALID_ARGUMENT after the hook.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_log(
    ctx: *mut fulmen_hook_context,
    name: *const c_char,
    value: f64,
    flags: u32,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let n = str_arg(name, "name")?;
        let (on_step, on_epoch, rest) = crate::ffi::module::context::parse_log_flags(flags)?;
        c.log(n, value, on_step, on_epoch, rest)
    })
}

/// Makes a group of the job's ranks for FULMEN_LOG_SYNC_DIST logs, as
/// torch's `new_group(ranks)` for Lightning's `sync_dist_group`, and writes
/// its id to `*out` (1 for the run's first group, 2 for the next ...; pass
/// `(uint32_t)id << FULMEN_LOG_GROUP_SHIFT` in the log flags). Every rank of
/// the job calls it in the same hook with the same `ranks` (`n` distinct
/// global ranks), in the same order as its other groups, as torch requires
/// of `new_group`; the members meet through the job's store (a rank not in
/// `ranks` gets the id too, and its synced values in that group stay its
/// own). The group lasts until the run ends. In a run of one process the
/// only rank is 0 and the group reduces nothing.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`ranks` NULL with `n` > 0, `out`
/// NULL), FULMEN_CODE_INVALID_ARGUMENT (no rank, a rank repeated or outside
/// the job, more than 65535 groups in a run), FULMEN_CODE_INVALID_STATE
/// (where the call cannot meet the other ranks: prepare_data and
/// on_exception, which not every rank runs, the checkpoint hooks, a
/// monitoring callback's on_train_epoch_end and the optimizer hooks under
/// manual optimization; make groups in setup),
/// FULMEN_CODE_UNSUPPORTED (collectives from an accelerator's hook, which
/// has no subgroups), FULMEN_CODE_DISTRIBUTED (a member did not come within
/// the job's timeout). Thread: the hook's.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_new_group(
    ctx: *const fulmen_hook_context,
    ranks: *const usize,
    n: usize,
    out: *mut u32,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let c = ctx_ref(ctx)?;
        let ranks = crate::ffi::tensor::handle::slice_arg(ranks, n, "ranks")?;
        let id = c.new_group(ranks)?;
        write_out(out, "out", id)
    })
}

/// Saves a checkpoint of the running fit to `path`, as Lightning's
/// `trainer.save_checkpoint(path, weights_only)` from a hook: the same
/// file a ModelCheckpoint writes (weights, and unless `weights_only` the
/// optimizer, scheduler, loop and callback states), written when the hook
/// returns, before the run goes on, to a temporary file renamed onto
/// `path` (a file there is replaced). Under DDP every rank calls it and
/// rank 0 writes. Runs on the hook's thread.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not during fit, in the sanity check,
/// or in on_save_checkpoint / on_load_checkpoint), FULMEN_CODE_INVALID_ARGUMENT (`path` empty or not UTF-8); the
/// write's own errors (FULMEN_CODE_IO) end the fit after the hook.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_save_checkpoint(
    ctx: *mut fulmen_hook_context,
    path: *const c_char,
    weights_only: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let p = str_arg(path, "path")?;
        if p.is_empty() {
            return Err(Error::invalid("path is empty"));
        }
        if c.stage != "fit" || c.state.sanity_checking || c.checkpoint.is_some() {
            return Err(Error::state(format!(
                "a checkpoint can be saved only while fit trains, not in {} of {}{}",
                c.hook.name(),
                c.stage,
                if c.state.sanity_checking { " (sanity check)" } else { "" }
            )));
        }
        c.state.save_requests.push((std::path::PathBuf::from(p), weights_only));
        Ok(())
    })
}

/// Writes the number of tensors of the hook's batch (0 when the hook has
/// none).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_batch_len(
    ctx: *const fulmen_hook_context,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.batch.map_or(0, |b| b.len())))
}

/// Writes a handle to tensor `index` of the hook's batch (released when the
/// hook returns unless kept).
///
/// Errors: FULMEN_CODE_INVALID_STATE (the hook has no batch),
/// FULMEN_CODE_OUT_OF_RANGE (`index` past the batch).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_batch_get(
    ctx: *const fulmen_hook_context,
    index: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let c = ctx_ref(ctx)?;
        let b = c.batch.ok_or_else(|| Error::state(format!("{} has no batch", c.hook.name())))?;
        let t = b.get(index).ok_or_else(|| {
            Error::new(ErrorCode::OutOfRange, format!("the batch has {} tensors, index {index} asked", b.len()))
        })?;
        emit(out, t.shallow_clone())
    })
}

/// In `on_predict_batch_end`: writes the batch's whole prediction as a
/// value, as Lightning's hook gets `outputs`: None (the step predicted
/// nothing), its tensor, the tuple of tensors it made
/// (`fulmen_step_context_add_prediction`) or the dict of named tensors
/// (`fulmen_step_context_add_named_prediction`). The tensors are shared;
/// the value is released when the hook returns unless kept
/// (`fulmen_value_keep`).
///
/// Errors: FULMEN_CODE_INVALID_STATE (not `on_predict_batch_end`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_prediction(
    ctx: *const fulmen_hook_context,
    out: *mut *mut crate::ffi::value::fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        out.write(std::ptr::null_mut());
        let c = ctx_ref(ctx)?;
        let p = c.prediction.ok_or_else(|| {
            Error::state(format!("{} carries no prediction (only on_predict_batch_end does)", c.hook.name()))
        })?;
        crate::ffi::value::emit_value(out, p.to_value())
    })
}

/// Writes a handle to the hook's output: the loss (training batch end,
/// before / after backward), the prediction (predict batch end) or the
/// tensor a validation / test step wrote (their batch end, with the
/// `validation_step_output` / `test_step_output` slots of
/// `fulmen_module_vtable`); NULL when the hook has none.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_output(
    ctx: *const fulmen_hook_context,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        match ctx_ref(ctx)?.output {
            Some(t) => emit(out, t.shallow_clone()),
            None => {
                out.write(std::ptr::null_mut());
                Ok(())
            }
        }
    })
}

/// In on_before_batch_transfer, transfer_batch_to_device or
/// on_after_batch_transfer (the LightningModule's, see
/// `fulmen_lightning_module_override_hook`): replaces the batch with the
/// `n` tensors of `tensors` (shared: the host keeps its handles), as the
/// hook's return value in Lightning; the run goes on with them (the step
/// and the later hooks see them). Not calling it keeps the batch, except
/// in an overridden transfer_batch_to_device, which must set the moved
/// batch.
///
/// Errors: FULMEN_CODE_INVALID_STATE (another hook),
/// FULMEN_CODE_INVALID_ARGUMENT (`n` is 0), FULMEN_CODE_NULL_ARGUMENT
/// (`tensors` or one of its handles NULL).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_set_batch(
    ctx: *mut fulmen_hook_context,
    tensors: *const *const fulmen_tensor,
    n: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        if !c.hook.sets_batch() {
            return Err(Error::state(format!(
                "only on_before_batch_transfer, transfer_batch_to_device and on_after_batch_transfer can replace \
                 the batch, not {}",
                c.hook.name()
            )));
        }
        if n == 0 {
            return Err(Error::invalid("a batch needs at least one tensor (n is 0)"));
        }
        if tensors.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "argument `tensors` is NULL"));
        }
        let mut batch = Vec::new();
        for i in 0..n {
            let t = tensor_arg(*tensors.add(i), "tensors[i]").map_err(|e| e.context(format!("tensors[{i}]")))?;
            batch.push(t.shallow_clone());
        }
        c.set_batch(batch)
    })
}

/// Writes the run's root device as a `fulmen_device_type` and an index
/// (Lightning's `device` argument of transfer_batch_to_device).
///
/// Errors: FULMEN_CODE_INVALID_STATE (the hook has no run device: outside
/// a run's hooks).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_device(
    ctx: *const fulmen_hook_context,
    type_out: *mut i32,
    index_out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(type_out, "type_out")?;
        check_out(index_out, "index_out")?;
        let c = ctx_ref(ctx)?;
        let d = c.device.ok_or_else(|| Error::state(format!("{} has no run device", c.hook.name())))?;
        let spec = crate::tensor::device::DeviceSpec::from_device(d);
        type_out.write(spec.kind as i32);
        index_out.write(spec.index);
        Ok(())
    })
}

/// Writes the index (in configure_optimizers' order) of the optimizer of
/// on_before_optimizer_step or on_before_zero_grad (Lightning's
/// `optimizer` argument): 0 under automatic optimization, which steps its
/// optimizers together; the stepping one's under manual optimization. -1
/// for the other hooks, and in a fit with no optimizer.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_optimizer_index(
    ctx: *const fulmen_hook_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", ctx_ref(ctx)?.optimizer_idx.map_or(-1, |i| i as i64)))
}

fn checkpoint_missing(hook: Hook) -> Error {
    Error::state(format!(
        "checkpoint entries exist only in on_save_checkpoint and on_load_checkpoint, not {}",
        hook.name()
    ))
}

/// In `on_save_checkpoint`: stores `value` under `key` in the checkpoint.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not in on_save_checkpoint; in
/// on_load_checkpoint the entries are read-only),
/// FULMEN_CODE_INVALID_ARGUMENT (`key` or `value` not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_checkpoint_set(
    ctx: *mut fulmen_hook_context,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut c = ctx_mut(ctx)?;
        let (k, v) = (str_arg(key, "key")?, str_arg(value, "value")?);
        let hook = c.hook;
        if hook == Hook::LoadCheckpoint {
            return Err(Error::state("on_load_checkpoint: the checkpoint's entries are read-only here"));
        }
        c.checkpoint.as_deref_mut().ok_or_else(|| checkpoint_missing(hook))?.insert(k.to_string(), v.to_string());
        Ok(())
    })
}

/// In `on_load_checkpoint`: copies the value stored under `key` into `buf`
/// as for `fulmen_model_state_dict_name`; FULMEN_CODE_INVALID_ARGUMENT when
/// the checkpoint has no such key.
///
/// Errors: FULMEN_CODE_INVALID_STATE (not in on_save_checkpoint or
/// on_load_checkpoint), FULMEN_CODE_INVALID_ARGUMENT (no such key, or `key` not
/// UTF-8), FULMEN_CODE_OUT_OF_RANGE (`buf` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_checkpoint_get(
    ctx: *mut fulmen_hook_context,
    key: *const c_char,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let c = ctx_ref(ctx)?;
        let k = str_arg(key, "key")?;
        let v = c
            .checkpoint
            .as_deref()
            .ok_or_else(|| checkpoint_missing(c.hook))?
            .get(k)
            .cloned()
            .ok_or_else(|| Error::invalid(format!("the checkpoint has no entry {k:?}")))?;
        copy_str(&v, buf, capacity, len_out)
    })
}

/// In `on_exception`: copies the failure's message into `buf` as for
/// `fulmen_model_state_dict_name`.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the hook carries no exception: not
/// on_exception), FULMEN_CODE_OUT_OF_RANGE (`buf` too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_exception(
    ctx: *const fulmen_hook_context,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let c = ctx_ref(ctx)?;
        let e = c.exception.ok_or_else(|| Error::state(format!("{} carries no exception", c.hook.name())))?;
        copy_str(&e.message, buf, capacity, len_out)
    })
}

/// A host callback: receives every hook (`fulmen_hook`) through `on_hook`
/// on the thread running the trainer. Set `struct_size` to
/// `sizeof(fulmen_callback_vtable)`.
#[repr(C)]
pub struct fulmen_callback_vtable {
    /// `sizeof(fulmen_callback_vtable)`.
    pub struct_size: usize,
    /// Passed to `on_hook`.
    pub userdata: *mut c_void,
    /// Called once when the trainer that holds the callback is freed; may
    /// be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Called for every hook; return NULL, or an error to stop the run.
    /// Required.
    pub on_hook: Option<
        unsafe extern "C" fn(userdata: *mut c_void, hook: i32, ctx: *mut fulmen_hook_context) -> *mut fulmen_error,
    >,
}

/// A host callback as a core callback.
pub(crate) struct HostCallback {
    name: String,
    userdata: Userdata,
    on_hook: fulmen_hook_fn,
}

impl Callback for HostCallback {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        call_host_hook(self.on_hook, self.userdata.ptr(), &self.name, ctx)
    }
}

/// Reads a host callback vtable.
pub(crate) unsafe fn host_callback(name: &str, vtable: *const fulmen_callback_vtable) -> Result<HostCallback> {
    let v = vtable.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `vtable` is NULL"))?;
    check_struct_size(v.struct_size, std::mem::size_of::<fulmen_callback_vtable>(), "fulmen_callback_vtable")?;
    let on_hook = v.on_hook.ok_or_else(|| Error::invalid("fulmen_callback_vtable.on_hook is NULL"))?;
    if name.is_empty() {
        return Err(Error::invalid("a callback needs a non-empty name (it keys the callback's state in checkpoints)"));
    }
    Ok(HostCallback { name: name.to_string(), userdata: Userdata::new(v.userdata, v.userdata_free), on_hook })
}
