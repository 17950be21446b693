//! Built-in callbacks: Lightning's `ModelPruning`, configured on a
//! `fulmen_model_pruning` handle and added to a trainer.
use crate::callbacks::pruning::MAX_PRUNING_NAMES;
use crate::callbacks::{ModelPruning, ModelPruningOptions, PruningAmount, PruningMethod};
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::trainer::runs::fulmen_trainer;
use std::ffi::c_char;

/// The arguments of a ModelPruning callback (Lightning's), from
/// `fulmen_model_pruning_new` and its setters; `fulmen_trainer_add_model_pruning`
/// copies them into a trainer. Free with `fulmen_model_pruning_free`. Any
/// thread may use it; a setter pins it as the other setters of fulmen do.
pub struct fulmen_model_pruning {
    pub(crate) opts: ModelPruningOptions,
}

impl Handle for fulmen_model_pruning {
    const C_NAME: &'static str = "fulmen_model_pruning";
}

/// Changes the options of `pruning` (exclusive pin), checking them after.
unsafe fn with_options(
    pruning: *mut fulmen_model_pruning,
    change: impl FnOnce(&mut ModelPruningOptions) -> Result<()>,
) -> Result<()> {
    let mut p = handle::borrow_mut(pruning, "pruning")?;
    let mut opts = p.opts.clone();
    change(&mut opts)?;
    opts.validate()?;
    p.opts = opts;
    Ok(())
}

/// Reads `n` names (NUL-terminated UTF-8, copied).
unsafe fn names(list: *const *const c_char, n: usize, arg: &str) -> Result<Vec<String>> {
    if n > MAX_PRUNING_NAMES {
        return Err(Error::invalid(format!("{arg}: {n} names; at most {MAX_PRUNING_NAMES}")));
    }
    let ptrs = crate::ffi::tensor::handle::slice_arg(list, n, arg)?;
    ptrs.iter()
        .enumerate()
        .map(|(i, p)| -> Result<String> { Ok(str_arg(*p, &format!("{arg}[{i}]"))?.to_string()) })
        .collect()
}

/// New ModelPruning arguments with Lightning's defaults:
/// `pruning_fn` "l1_unstructured" or "random_unstructured" (torch.nn.utils.prune's,
/// any case) and `amount` the fraction in [0, 1] of the entries not pruned
/// yet that each pruning removes (Lightning's float `amount`; for a count,
/// `fulmen_model_pruning_set_amount_count`). The defaults: every module's
/// "weight" and "bias" pruned, globally (`use_global_unstructured`), at
/// the end of each training epoch, the lottery ticket reset on, pruning
/// made permanent at the end of training. `*out` is a new handle the
/// caller frees.
///
/// Errors: FULMEN_CODE_UNSUPPORTED ("ln_structured" or "random_structured"),
/// FULMEN_CODE_INVALID_ARGUMENT (another `pruning_fn`, not UTF-8, an
/// `amount` outside [0, 1] or NaN).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_new(
    pruning_fn: *const c_char,
    amount: f64,
    out: *mut *mut fulmen_model_pruning,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let method = PruningMethod::parse(str_arg(pruning_fn, "pruning_fn")?)?;
        let opts = ModelPruningOptions::new(method, PruningAmount::Fraction(amount));
        opts.validate()?;
        out.write(handle::into_raw(fulmen_model_pruning { opts }));
        Ok(())
    })
}

/// Frees ModelPruning arguments (callbacks added from them keep their
/// copy). NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_free(pruning: *mut fulmen_model_pruning) {
    handle::free(pruning);
}

/// Each pruning removes `count` entries (Lightning's integer `amount`):
/// of each parameter, or of all of them with global pruning; a pruning
/// with fewer entries left fails the fit with FULMEN_CODE_OUT_OF_RANGE, as
/// torch refuses it. 0 prunes nothing.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`count` < 0).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_amount_count(
    pruning: *mut fulmen_model_pruning,
    count: i64,
) -> *mut fulmen_error {
    guard!(|| with_options(pruning, |o| {
        o.amount = PruningAmount::Count(count);
        Ok(())
    }))
}

/// Which parameters of every module are pruned, by their own name (after
/// the last dot): "weight" and / or "bias" (Lightning's
/// `parameter_names`); `n` 0 restores the default, both. All the first
/// name's parameters come before the second's, each in the model's order
/// (this order ranks ties in global pruning). Names are copied.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a name other than "weight" or
/// "bias", one listed twice, not UTF-8, more than 65536).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_parameter_names(
    pruning: *mut fulmen_model_pruning,
    names_list: *const *const c_char,
    n: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let list = names(names_list, n, "names_list")?;
        with_options(pruning, |o| {
            o.parameter_names = list;
            Ok(())
        })
    })
}

/// Prunes exactly these parameters, named as the model's state_dict names
/// them ("0.weight", "encoder.fc.bias"), in this order (Lightning's
/// `parameters_to_prune`; `parameter_names` is then not used); `n` 0
/// restores the default, every module's `parameter_names`. A name the
/// model lacks fails the fit at its setup with FULMEN_CODE_INVALID_ARGUMENT.
/// Names are copied.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a name empty, listed twice, not
/// UTF-8, more than 65536).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_parameters_to_prune(
    pruning: *mut fulmen_model_pruning,
    names_list: *const *const c_char,
    n: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let list = names(names_list, n, "names_list")?;
        with_options(pruning, |o| {
            o.parameters_to_prune = list;
            Ok(())
        })
    })
}

/// Prunes over all the parameters at once, torch's `global_unstructured`
/// (true, the default), or each parameter by itself.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_use_global_unstructured(
    pruning: *mut fulmen_model_pruning,
    on: bool,
) -> *mut fulmen_error {
    guard!(|| with_options(pruning, |o| {
        o.use_global_unstructured = on;
        Ok(())
    }))
}

/// Whether pruning happens at all (Lightning's `apply_pruning` as a bool;
/// default true).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_apply_pruning(
    pruning: *mut fulmen_model_pruning,
    on: bool,
) -> *mut fulmen_error {
    guard!(|| with_options(pruning, |o| {
        o.apply_pruning = on;
        Ok(())
    }))
}

/// With true (the default) the masks stop applying at the end of
/// training; with false they go on applying in later fits of the same
/// trainer (Lightning's reparametrisation left on the model). The model's
/// weights hold the pruned values either way, so its state_dict and
/// checkpoints are Lightning's permanent ones.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_make_pruning_permanent(
    pruning: *mut fulmen_model_pruning,
    on: bool,
) -> *mut fulmen_error {
    guard!(|| with_options(pruning, |o| {
        o.make_pruning_permanent = on;
        Ok(())
    }))
}

/// After each pruning, the entries kept go back to their values at fit's
/// setup (Lightning's `use_lottery_ticket_hypothesis` as a bool; default
/// true; not `resample_parameters`).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_use_lottery_ticket_hypothesis(
    pruning: *mut fulmen_model_pruning,
    on: bool,
) -> *mut fulmen_error {
    guard!(|| with_options(pruning, |o| {
        o.use_lottery_ticket_hypothesis = on;
        Ok(())
    }))
}

/// Prunes at the end of each training epoch (true, the default) or at the
/// end of each validation run of fit (false; not in the sanity check).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_prune_on_train_epoch_end(
    pruning: *mut fulmen_model_pruning,
    on: bool,
) -> *mut fulmen_error {
    guard!(|| with_options(pruning, |o| {
        o.prune_on_train_epoch_end = on;
        Ok(())
    }))
}

/// 0 silent (the default); 1 prints the overall sparsity on stderr after
/// each pruning (rank 0), as Lightning logs it; 2 also each parameter's.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`verbose` not 0, 1 or 2).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_pruning_set_verbose(
    pruning: *mut fulmen_model_pruning,
    verbose: i32,
) -> *mut fulmen_error {
    guard!(|| with_options(pruning, |o| {
        o.verbose = verbose;
        Ok(())
    }))
}

/// Adds Lightning's `ModelPruning` with a copy of `pruning`'s arguments
/// (the handle stays the caller's). At fit's setup the parameters to
/// prune are found (their values kept for the lottery ticket reset); at
/// each pruning, `amount` more of the entries not pruned yet get mask 0:
/// those of smallest magnitude ("l1_unstructured") or drawn from torch's
/// generator ("random_unstructured"; the same seed gives torch's masks).
/// torch reparametrises a pruned weight as `weight_orig * weight_mask`;
/// fulmen's weights are plain, so the callback multiplies them by their
/// masks in place (when it prunes and after every training batch) and
/// masks their gradients before every optimizer step (as torch's gradient
/// of `weight_orig`, so clipping sees the same norm): training sees
/// torch's effective weights at every step, and the model's state_dict,
/// checkpoints and weights after fit are the pruned ones. The masks are
/// not kept in checkpoints (a resumed fit starts without them, as
/// Lightning's from its permanent checkpoints). The lottery ticket reset
/// happens at every pruning (Lightning 2.6 on the CPU resets only at the
/// first: its copy of the first weights then shares the trained weights'
/// memory). With manual optimization the weights are masked after each
/// batch, not after each of its optimizer steps. Validate, test and
/// predict runs are not pruned. Callbacks run on the thread that runs the
/// fit.
///
/// Errors: the common ones only. At fit: FULMEN_CODE_INVALID_ARGUMENT (no
/// parameter of the model matches, a listed name the model lacks),
/// FULMEN_CODE_OUT_OF_RANGE (a count larger than the entries left),
/// FULMEN_CODE_INVALID_STATE (a module without a model).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_add_model_pruning(
    trainer: *mut fulmen_trainer,
    pruning: *const fulmen_model_pruning,
) -> *mut fulmen_error {
    guard!(|| {
        let callback = model_pruning(pruning)?;
        handle::borrow_mut(trainer, "trainer")?.inner.add_callback(Box::new(callback));
        Ok(())
    })
}

/// The ModelPruning `pruning` describes (its options copied).
pub(crate) unsafe fn model_pruning(pruning: *const fulmen_model_pruning) -> Result<ModelPruning> {
    ModelPruning::new(handle::borrow(pruning, "pruning")?.opts.clone())
}
