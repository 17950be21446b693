//! Models built on the meta device and given their values later (PyTorch's
//! `with torch.device("meta")`, Lightning's `init_module(empty_init=True)`).
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::write_out;
use crate::ffi::nn::model::{fulmen_model, lock, model_arg};
use crate::nn::meta_init;

/// Opens a meta-init scope on the calling thread, as PyTorch's `with
/// torch.device("meta"):` and Lightning's `trainer.init_module(
/// empty_init=True)`: until the matching `fulmen_meta_init_end`, the
/// layers fulmen makes (`fulmen_model_*_new`) put their parameters and
/// buffers on the meta device, which holds no memory. What gives them
/// values (each layer's own initialisation, `fulmen_init_*`, and
/// `fulmen_tensor_fill_`, `_zero_`, `_copy_`, `_uniform_`, `_normal_`,
/// `_add_`, `_mul_`, `_clamp_` on them, in any scope; weights loaded into
/// the model with `fulmen_model_load`) is recorded, with the random
/// generator's state it starts from, and the generator advances as if the
/// values were drawn. The model gets those values when it is
/// materialized: by the trainer when a run places it (under strategy
/// "fsdp" each unit's just before it is sharded, so no rank ever holds the
/// whole model), by `fulmen_fsdp_new` and `fulmen_ddp_new`, or by
/// `fulmen_model_materialize`; they equal an eager build's under the same
/// seed bit for bit. TorchScript models, exported programs and the
/// tensors a host makes itself hold data as usual. Scopes nest.
///
/// Errors: FULMEN_CODE_INVALID_STATE (1024 scopes open on this thread).
/// Thread rules: the scope belongs to the calling thread (a Go program
/// locks its goroutine to its thread meanwhile); other threads build as
/// usual.
#[no_mangle]
pub unsafe extern "C" fn fulmen_meta_init_begin() -> *mut fulmen_error {
    guard!(meta_init::begin)
}

/// Closes the calling thread's innermost meta-init scope
/// (`fulmen_meta_init_begin`). The models built in it stay on the meta
/// device until materialized.
///
/// Errors: FULMEN_CODE_INVALID_STATE (no scope open on this thread).
/// Thread rules: the thread that opened the scope.
#[no_mangle]
pub unsafe extern "C" fn fulmen_meta_init_end() -> *mut fulmen_error {
    guard!(meta_init::end)
}

/// Gives every meta parameter and buffer of `model` its recorded values,
/// as CPU tensors (PyTorch's `model.to_empty(device="cpu")` followed by
/// each module's `reset_parameters()`): tied names stay one tensor, a
/// tensor cast meanwhile keeps its new dtype, and the random generator is
/// left as it was. Handles the host read from the model before keep the
/// meta tensors: read them again. Nothing happens to a model without meta
/// tensors.
///
/// Errors: FULMEN_CODE_INVALID_STATE (a meta tensor without recorded
/// values, one moved to the meta device or made there outside a scope; the
/// tensors materialized before it keep their values), FULMEN_CODE_TORCH
/// (out of memory).
/// Thread rules: any thread; the model is locked meanwhile (the call waits
/// while another thread uses it); from inside the model's own host forward
/// callback it fails with FULMEN_CODE_INVALID_STATE.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_materialize(model: *mut fulmen_model) -> *mut fulmen_error {
    guard!(|| lock(&*model_arg(model, "model")?)?.materialize())
}

/// Writes whether any parameter or buffer of `model` is on the meta device.
///
/// Errors: the common ones only.
/// Thread rules: as `fulmen_model_materialize`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_holds_meta(model: *const fulmen_model, out: *mut bool) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", lock(&*model_arg(model, "model")?)?.holds_meta()))
}
