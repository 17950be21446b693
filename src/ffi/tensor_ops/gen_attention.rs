//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `attention` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{emit, fulmen_tensor, opt_tensor_arg, tensor_arg};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::check_out;
use crate::tensor::ops;

/// `softmax(query keyᵀ · scale + mask) value` over `query` (…, L, E),
/// `key` (…, S, E), `value` (…, S, Ev) (`F.scaled_dot_product_attention`).
/// `attn_mask` (NULL for none) broadcasts to (…, L, S): bool (true attends)
/// or additive of `query`'s dtype. `is_causal` lets each query attend to keys
/// up to its own position. `dropout_p` drops weights (pass 0 in eval). `scale`
/// 0 means `1 / sqrt(E)`. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (fewer than 2 dimensions, sizes that do
/// not match, or a mask that does not broadcast), FULMEN_CODE_DTYPE_MISMATCH (a
/// mask neither bool nor of `query`'s dtype), FULMEN_CODE_INVALID_ARGUMENT
/// (`dropout_p` outside [0, 1), a non-finite `scale`, or both a mask and
/// `is_causal`), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different
/// devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_scaled_dot_product_attention(
    query: *const fulmen_tensor,
    key: *const fulmen_tensor,
    value: *const fulmen_tensor,
    attn_mask: *const fulmen_tensor,
    dropout_p: f64,
    is_causal: bool,
    scale: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let query = tensor_arg(query, "query")?;
        let key = tensor_arg(key, "key")?;
        let value = tensor_arg(value, "value")?;
        let attn_mask = opt_tensor_arg(attn_mask, "attn_mask")?;
        emit(out, ops::scaled_dot_product_attention(&query, &key, &value, attn_mask.as_deref(), dropout_p, is_causal, scale)?)
    })
}
