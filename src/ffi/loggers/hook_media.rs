//! Images, histograms and texts logged from a hook to the run's
//! TensorBoard logger (Lightning's `self.logger.experiment.add_image(...)`
//! in a hook).
use crate::error::Result;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::callbacks::hooks::{ctx_mut, fulmen_hook_context};
use crate::ffi::loggers::media_args::{histogram_args, image_args, text_args};
use crate::ffi::tensor::handle::fulmen_tensor;
use crate::loggers::Media;
use std::ffi::c_char;

/// Hands `media` to the hook context's run under `tag` at `step`.
unsafe fn add(ctx: *mut fulmen_hook_context, tag: &str, media: Media, step: i64) -> Result<()> {
    ctx_mut(ctx)?.add_media(tag, media, step)
}

/// Logs `image` under `tag` at `step` to the run's TensorBoard loggers
/// (the `logger` option's and those added with
/// `fulmen_trainer_add_file_logger`), as Lightning's
/// `self.logger.experiment.add_image(tag, img, step, dataformats)` in a
/// hook; the image is converted as `fulmen_logger_add_image` converts it,
/// now, and written when the hook returns (rank 0 writes; other ranks'
/// calls succeed and write nothing, as Lightning's loggers). The tensor is
/// read during the call only. Use `fulmen_hook_context_global_step` for
/// Lightning's usual step.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the run has no TensorBoard logger,
/// or the context is not the running hook's), FULMEN_CODE_INVALID_ARGUMENT
/// (`tag` empty, `dataformats` not an order of "CHW" or "HW", or 4-D),
/// FULMEN_CODE_SHAPE_MISMATCH (dimensions not those of `dataformats`,
/// channels not 1, 3 or 4, no pixel); writing errors stop the run after
/// the hook.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_add_image(
    ctx: *mut fulmen_hook_context,
    tag: *const c_char,
    image: *const fulmen_tensor,
    step: i64,
    dataformats: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let (t, m) = image_args(tag, image, dataformats)?;
        add(ctx, t, m, step)
    })
}

/// Logs a histogram of every value of `values` under `tag` at `step` to
/// the run's TensorBoard loggers, as `fulmen_logger_add_histogram` does
/// and with the rules of `fulmen_hook_context_add_image`.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the run has no TensorBoard logger),
/// FULMEN_CODE_INVALID_ARGUMENT (`tag` empty, no value, or no value within
/// the buckets); writing errors stop the run after the hook.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_add_histogram(
    ctx: *mut fulmen_hook_context,
    tag: *const c_char,
    values: *const fulmen_tensor,
    step: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let (t, m) = histogram_args(tag, values)?;
        add(ctx, t, m, step)
    })
}

/// Logs `text` (markdown) under `tag` at `step` to the run's TensorBoard
/// loggers, as `fulmen_logger_add_text` does and with the rules of
/// `fulmen_hook_context_add_image`.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the run has no TensorBoard logger),
/// FULMEN_CODE_INVALID_ARGUMENT (`tag` empty, a string not UTF-8); writing
/// errors stop the run after the hook.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_add_text(
    ctx: *mut fulmen_hook_context,
    tag: *const c_char,
    text: *const c_char,
    step: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let (t, m) = text_args(tag, text)?;
        add(ctx, t, m, step)
    })
}
