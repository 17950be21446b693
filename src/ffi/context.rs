//! `fulmen_step_context`: what a step callback can read and log.
use super::error::{fulmen_error, guard, str_arg};
use super::handle::{self, write_out, Exclusive, Handle, Shared};
use crate::error::Error;
use crate::trainer::{LogFlags, StepContext};
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
/// Log flag: record the mean over the epoch (weighted by batch size).
pub const FULMEN_LOG_ON_EPOCH: u32 = 2;
/// Log flag: show in the progress output.
pub const FULMEN_LOG_PROG_BAR: u32 = 4;
/// Log flag: average the value over ranks first (DDP's `sync_dist`; every
/// rank must log the same names in the same steps).
pub const FULMEN_LOG_SYNC_DIST: u32 = 8;

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

/// Logs a metric, as Lightning's `self.log(name, value, ...)`. `flags`
/// combines FULMEN_LOG_ON_STEP, FULMEN_LOG_ON_EPOCH, FULMEN_LOG_PROG_BAR and
/// FULMEN_LOG_SYNC_DIST;
/// when neither ON_STEP nor ON_EPOCH is given, the stage's defaults apply
/// (training: on step; validation / test: on epoch). `batch_size` weights
/// the epoch mean; 0 uses the batch's first dimension. Logged with both,
/// `name` appears as `name_step` and `name_epoch`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (unknown flags; a name that is empty,
/// not UTF-8, or holds a comma, quote or newline; a negative `batch_size`; a
/// name logged before with other flags), FULMEN_CODE_INVALID_STATE (also from
/// predict_step, where nothing can be logged).
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_log(
    ctx: *mut fulmen_step_context,
    name: *const c_char,
    value: f64,
    flags: u32,
    batch_size: i64,
) -> *mut fulmen_error {
    guard("fulmen_step_context_log", || {
        let mut c = ctx_mut(ctx)?;
        let n = str_arg(name, "name")?;
        if flags & !(FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR | FULMEN_LOG_SYNC_DIST) != 0 {
            return Err(Error::invalid(format!("unknown log flags {flags:#x}")));
        }
        let f = if flags & (FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH) == 0 {
            let mut d = c.stage.default_flags();
            d.prog_bar = flags & FULMEN_LOG_PROG_BAR != 0;
            d.sync_dist = flags & FULMEN_LOG_SYNC_DIST != 0;
            d
        } else {
            LogFlags {
                on_step: flags & FULMEN_LOG_ON_STEP != 0,
                on_epoch: flags & FULMEN_LOG_ON_EPOCH != 0,
                prog_bar: flags & FULMEN_LOG_PROG_BAR != 0,
                sync_dist: flags & FULMEN_LOG_SYNC_DIST != 0,
            }
        };
        c.log(n, value, Some(f), batch_size)
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
    guard("fulmen_step_context_stage", || write_out(out, "out", ctx_ref(ctx)?.stage as i32))
}

/// Writes the current epoch (0-based).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_epoch(
    ctx: *const fulmen_step_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard("fulmen_step_context_epoch", || write_out(out, "out", ctx_ref(ctx)?.epoch))
}

/// Writes the number of optimizer steps taken so far.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_global_step(
    ctx: *const fulmen_step_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard("fulmen_step_context_global_step", || write_out(out, "out", ctx_ref(ctx)?.global_step))
}

/// Writes the index of the batch within the epoch (0-based).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_batch_idx(
    ctx: *const fulmen_step_context,
    out: *mut i64,
) -> *mut fulmen_error {
    guard("fulmen_step_context_batch_idx", || write_out(out, "out", ctx_ref(ctx)?.batch_idx))
}
