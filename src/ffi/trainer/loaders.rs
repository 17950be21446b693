//! Fit, validate, test and predict over several evaluation loaders (in
//! turn, as Lightning's sequential mode), and the `dataloader_idx` a step
//! or a batch hook sees.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, check_out, write_out, Shared};
use crate::ffi::callbacks::hooks::fulmen_hook_context;
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::context::fulmen_step_context;
use crate::ffi::module::lightning_module::fulmen_lightning_module;
use crate::ffi::tensor::handle::{emit, fulmen_tensor};
use crate::ffi::trainer::runs::{ckpt, fulmen_trainer, loader};
use crate::ffi::value::{emit_value, fulmen_value};
use crate::nn::{NodeBudget, Value};
use crate::trainer::{BatchSource, Prediction};
use std::ffi::c_char;

/// The most loaders one fit / validate / test / predict call takes.
pub const FULMEN_LOADERS_MAX: usize = 64;

/// Borrows the `n` loaders at `list` (n may be 0 only when `allow_none`).
unsafe fn loaders<'a>(
    list: *const *const fulmen_loader,
    n: usize,
    allow_none: bool,
) -> Result<Vec<Shared<'a, dyn BatchSource + Send>>> {
    if n > FULMEN_LOADERS_MAX || (n == 0 && !allow_none) {
        return Err(Error::invalid(format!("{n} loaders: give 1 to {FULMEN_LOADERS_MAX}")));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if list.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, "argument `loaders` is NULL"));
    }
    (0..n).map(|i| loader(*list.add(i), &format!("loaders[{i}]"))).collect()
}

/// The borrowed loaders as sources.
fn sources<'a>(held: &'a [Shared<'_, dyn BatchSource + Send>]) -> Vec<&'a dyn BatchSource> {
    held.iter().map(|l| &**l as &dyn BatchSource).collect()
}

/// Validate or test (`run`) over the `n` loaders at `loaders`.
type EvalRun = fn(
    &mut crate::trainer::Trainer,
    &mut dyn crate::trainer::LightningModule,
    &[&dyn BatchSource],
    Option<&str>,
) -> Result<crate::trainer::EvalResults>;

unsafe fn run_eval(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loaders: *const *const fulmen_loader,
    n: usize,
    ckpt_path: *const c_char,
    run: EvalRun,
) -> Result<()> {
    let mut t = handle::borrow_mut(trainer, "trainer")?;
    let mut m = handle::borrow_mut(module, "module")?;
    let held = self::loaders(loaders, n, false)?;
    run(&mut t.inner, &mut m.inner, &sources(&held), ckpt(ckpt_path)?).map(|_| ())
}

/// `fulmen_trainer_fit` validating on each of the `n_val` loaders at
/// `val` in turn (0 to FULMEN_LOADERS_MAX; 0: the module's
/// `val_dataloader`, or no validation when it has none; the same loader
/// may appear twice). `train` NULL takes the module's `train_dataloader`. With several, the validation steps and batch
/// hooks get their `dataloader_idx` and logged names end in
/// `/dataloader_idx_N` (Lightning's names), so a ModelCheckpoint monitors
/// e.g. "val_loss/dataloader_idx_0". The sanity check and
/// `limit_val_batches` apply to each loader.
///
/// Errors: as `fulmen_trainer_fit`, and FULMEN_CODE_INVALID_ARGUMENT
/// (`n_val` above FULMEN_LOADERS_MAX), FULMEN_CODE_NULL_ARGUMENT (`val`
/// NULL with `n_val` > 0, or a NULL loader in it).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_fit_loaders(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    train: *const fulmen_loader,
    val: *const *const fulmen_loader,
    n_val: usize,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let tr = crate::ffi::trainer::runs::train_arg(train, &m.inner)?;
        let held = loaders(val, n_val, true)?;
        let vals = sources(&held);
        let vals = if vals.is_empty() { None } else { Some(&vals[..]) };
        t.inner.fit_data(&mut m.inner, tr.as_deref().map(|t| t as &dyn BatchSource), vals, ckpt(ckpt_path)?)
    })
}

/// `fulmen_trainer_validate` over each of the `n` loaders (1 to
/// FULMEN_LOADERS_MAX) in turn; with several, logged names end in
/// `/dataloader_idx_N`.
///
/// Errors: as `fulmen_trainer_validate`, and FULMEN_CODE_INVALID_ARGUMENT
/// (`n` 0 or above FULMEN_LOADERS_MAX), FULMEN_CODE_NULL_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_validate_loaders(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loaders: *const *const fulmen_loader,
    n: usize,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| { run_eval(trainer, module, loaders, n, ckpt_path, crate::trainer::Trainer::validate_loaders) })
}

/// `fulmen_trainer_test` over each of the `n` loaders (1 to
/// FULMEN_LOADERS_MAX) in turn; with several, logged names end in
/// `/dataloader_idx_N`.
///
/// Errors: as `fulmen_trainer_test`, and FULMEN_CODE_INVALID_ARGUMENT (`n`
/// 0 or above FULMEN_LOADERS_MAX), FULMEN_CODE_NULL_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_test_loaders(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loaders: *const *const fulmen_loader,
    n: usize,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| { run_eval(trainer, module, loaders, n, ckpt_path, crate::trainer::Trainer::test_loaders) })
}

/// `fulmen_trainer_predict` over each of the `n` loaders (1 to
/// FULMEN_LOADERS_MAX) in turn: `outs[i]` receives loader i's outputs
/// concatenated along dimension 0 (NULL when its steps returned none).
/// The caller owns the tensors; on failure every `outs[i]` is NULL.
///
/// Errors: as `fulmen_trainer_predict`, and FULMEN_CODE_INVALID_ARGUMENT
/// (`n` 0 or above FULMEN_LOADERS_MAX), FULMEN_CODE_NULL_ARGUMENT
/// (`outs` NULL).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_predict_loaders(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loaders: *const *const fulmen_loader,
    n: usize,
    ckpt_path: *const c_char,
    outs: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(outs, "outs")?;
        if n == 0 || n > FULMEN_LOADERS_MAX {
            return Err(Error::invalid(format!("{n} loaders: give 1 to {FULMEN_LOADERS_MAX}")));
        }
        for i in 0..n {
            outs.add(i).write(std::ptr::null_mut());
        }
        let held = self::loaders(loaders, n, false)?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let results = t.inner.predict_loaders(&mut m.inner, &sources(&held), ckpt(ckpt_path)?)?;
        for (i, r) in results.into_iter().enumerate() {
            if let Some(p) = r {
                if let Err(e) = emit(outs.add(i), p) {
                    for j in 0..i {
                        crate::ffi::tensor::query::fulmen_tensor_free(*outs.add(j));
                        outs.add(j).write(std::ptr::null_mut());
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    })
}

/// Lightning's `trainer.predict`: runs predict_step over each of the `n`
/// loaders (1 to FULMEN_LOADERS_MAX) in turn and writes to `*out` the
/// batches' predictions, one value per batch in order: the tensor the step
/// wrote to `*out`, None when it wrote none, a tuple when it added
/// tensors with `fulmen_step_context_add_prediction` (the written tensor,
/// if any, first), or a dict of string keys when it named them with
/// `fulmen_step_context_add_named_prediction`. With one loader `*out` is a list of these; with several,
/// a list of one such list per loader. With `return_predictions` false
/// nothing is kept and `*out` is NULL (Lightning's `return_predictions`).
/// The caller owns the value (`fulmen_value_free`); on failure `*out` is
/// NULL. `ckpt_path` as for validate.
///
/// Errors: as `fulmen_trainer_predict` (less the concatenation's), and
/// FULMEN_CODE_INVALID_ARGUMENT (`n` 0 or above FULMEN_LOADERS_MAX),
/// FULMEN_CODE_SHAPE_MISMATCH (under a strategy that splits batches, the
/// steps of one batch added different numbers of tensors or other names),
/// FULMEN_CODE_INVALID_STATE (a step named its predictions and wrote
/// `*out` too),
/// FULMEN_CODE_OUT_OF_RANGE (the predictions hold more than
/// FULMEN_MAX_VALUE_NODES values; nothing is returned).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_predict_batches(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loaders: *const *const fulmen_loader,
    n: usize,
    ckpt_path: *const c_char,
    return_predictions: bool,
    out: *mut *mut fulmen_value,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        out.write(std::ptr::null_mut());
        let held = self::loaders(loaders, n, false)?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let kept = t.inner.predict_batches(&mut m.inner, &sources(&held), ckpt(ckpt_path)?, return_predictions)?;
        match kept {
            Some(per_loader) => emit_value(out, predictions_value(per_loader)?),
            None => Ok(()),
        }
    })
}

/// The value `fulmen_trainer_predict_batches` returns: a list of each
/// batch's prediction, or of such lists with several loaders.
fn predictions_value(per_loader: Vec<Vec<Prediction>>) -> Result<Value> {
    let one = |p: Prediction| p.to_value();
    let mut lists: Vec<Value> =
        per_loader.into_iter().map(|batches| Value::List(batches.into_iter().map(one).collect())).collect();
    let value = if lists.len() == 1 { lists.pop().unwrap_or(Value::None) } else { Value::List(lists) };
    value
        .count_into(&mut NodeBudget::for_result())
        .map_err(|e| Error::new(ErrorCode::OutOfRange, format!("predict's batch predictions: {}", e.message)))?;
    Ok(value)
}

/// Writes the evaluation loader of the running step (Lightning's
/// `dataloader_idx`): 0 with one loader and in training.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_step_context_dataloader_idx(
    ctx: *const fulmen_step_context,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", crate::ffi::module::context::ctx_ref(ctx)?.dataloader_idx.unwrap_or(0)) })
}

/// Writes the evaluation loader of the batch in a validation / test /
/// predict batch hook (Lightning's `dataloader_idx`); 0 elsewhere.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_hook_context_dataloader_idx(
    ctx: *const fulmen_hook_context,
    out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", crate::ffi::callbacks::hooks::ctx_ref(ctx)?.dataloader_idx) })
}
