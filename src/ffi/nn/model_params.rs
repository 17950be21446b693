//! A model's parameters as tensor handles (`model.parameters()`, or
//! `filter(lambda p: p.requires_grad, model.parameters())`).
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::check_out;
use crate::ffi::nn::model::{fulmen_model, lock, model_arg};
use crate::ffi::tensor::handle::{emit_list, fulmen_tensor};

/// Writes new handles to the model's parameters (`trainable_only`: those
/// that require grad, as `filter(lambda p: p.requires_grad,
/// model.parameters())`), in `named_parameters` order (a tensor
/// registered under several names once, as PyTorch lists a tied
/// parameter), into
/// `out[0..capacity]`, and their count to `*len_out`. The handles share
/// storage with the model; the caller frees each with `fulmen_tensor_free`.
/// With `capacity` too small nothing is written but `*len_out` (call with
/// 0 and NULL to learn the count). Build an optimizer over the trainable
/// parameters by passing them as `params` with a NULL `model`.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`model` or `len_out` NULL, `out`
/// NULL with parameters to write), FULMEN_CODE_OUT_OF_RANGE (`capacity`
/// below the count; `*len_out` holds it).
/// Thread rules: any thread; the model is locked while it is read (the
/// call waits while another thread uses the model). From inside the
/// model's own host forward callback it fails with
/// FULMEN_CODE_INVALID_STATE.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_parameters(
    model: *const fulmen_model,
    trainable_only: bool,
    out: *mut *mut fulmen_tensor,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let params: Vec<_> = lock(&*model_arg(model, "model")?)?
            .parameters()
            .into_iter()
            .filter(|p| !trainable_only || p.requires_grad())
            .collect();
        let n = params.len();
        emit_list(out, capacity, len_out, n, || Ok(params))
    })
}
