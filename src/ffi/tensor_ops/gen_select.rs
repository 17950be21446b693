//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `select` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{check_out_pair, emit, emit_pair, fulmen_tensor, tensor_arg};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::check_out;
use crate::tensor::ops;

/// `out = condition ? x : y` elementwise (`torch.where`), broadcasting the
/// three; `condition` is a bool tensor. The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`condition` is not bool),
/// FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. `x` and `y` of different dtypes or devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_where(
    condition: *const fulmen_tensor,
    x: *const fulmen_tensor,
    y: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let condition = tensor_arg(condition, "condition")?;
        let x = tensor_arg(x, "x")?;
        let y = tensor_arg(y, "y")?;
        emit(out, ops::where_(&condition, &x, &y)?)
    })
}

/// `x` with `value` wherever the bool tensor `mask` is true, `x` and `mask`
/// broadcast together (`torch.masked_fill`): the attention mask op. The result
/// is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`mask` is not bool),
/// FULMEN_CODE_SHAPE_MISMATCH (`x` and `mask` do not broadcast, or the result
/// has too many elements), FULMEN_CODE_TORCH (libtorch failed, e.g. `value`
/// does not fit an integer dtype).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_masked_fill(
    x: *const fulmen_tensor,
    mask: *const fulmen_tensor,
    value: f64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let mask = tensor_arg(mask, "mask")?;
        emit(out, ops::masked_fill(&x, &mask, value)?)
    })
}

/// Lower triangle of the last two dimensions: entries above diagonal `diagonal`
/// (0 the main one, positive above it) set to 0. The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`x` has fewer than 2 dimensions),
/// FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_tril(
    x: *const fulmen_tensor,
    diagonal: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::tril(&x, diagonal)?)
    })
}

/// Upper triangle of the last two dimensions: entries below diagonal `diagonal`
/// set to 0. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`x` has fewer than 2 dimensions),
/// FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_triu(
    x: *const fulmen_tensor,
    diagonal: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::triu(&x, diagonal)?)
    })
}

/// The `k` largest (or, with `largest` false, smallest) entries along `dim` and
/// their i64 positions (`torch.topk`). The results are new tensors written to
/// `*values` and `*indices`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `k` outside [0,
/// size of `dim`]), FULMEN_CODE_INVALID_ARGUMENT (`values` and `indices` are
/// the same pointer), FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_topk(
    x: *const fulmen_tensor,
    k: i64,
    dim: i64,
    largest: bool,
    sorted: bool,
    values: *mut *mut fulmen_tensor,
    indices: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out_pair(values, "values", indices, "indices")?;
        let x = tensor_arg(x, "x")?;
        let (first, second) = ops::topk(&x, k, dim, largest, sorted)?;
        emit_pair(values, first, indices, second)
    })
}

/// Entries sorted along `dim` and their original i64 positions (`torch.sort`);
/// `stable` keeps the order of equal entries. The results are new tensors
/// written to `*values` and `*indices`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (`values` and `indices` are the same pointer),
/// FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_sort(
    x: *const fulmen_tensor,
    dim: i64,
    descending: bool,
    stable: bool,
    values: *mut *mut fulmen_tensor,
    indices: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out_pair(values, "values", indices, "indices")?;
        let x = tensor_arg(x, "x")?;
        let (first, second) = ops::sort(&x, dim, descending, stable)?;
        emit_pair(values, first, indices, second)
    })
}

/// The i64 positions that sort `x` along `dim` (`torch.argsort`). The result is
/// a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. an unsupported dtype).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_argsort(
    x: *const fulmen_tensor,
    dim: i64,
    descending: bool,
    stable: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::argsort(&x, dim, descending, stable)?)
    })
}

/// Largest entries along `dim` and their i64 positions (`torch.max(x, dim)`).
/// The results are new tensors written to `*values` and `*indices`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range),
/// FULMEN_CODE_SHAPE_MISMATCH (`dim` is empty), FULMEN_CODE_INVALID_ARGUMENT
/// (`values` and `indices` are the same pointer), FULMEN_CODE_TORCH (libtorch
/// failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_max_dim(
    x: *const fulmen_tensor,
    dim: i64,
    keepdim: bool,
    values: *mut *mut fulmen_tensor,
    indices: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out_pair(values, "values", indices, "indices")?;
        let x = tensor_arg(x, "x")?;
        let (first, second) = ops::max_dim(&x, dim, keepdim)?;
        emit_pair(values, first, indices, second)
    })
}

/// Smallest entries along `dim` and their i64 positions (`torch.min(x, dim)`).
/// The results are new tensors written to `*values` and `*indices`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range),
/// FULMEN_CODE_SHAPE_MISMATCH (`dim` is empty), FULMEN_CODE_INVALID_ARGUMENT
/// (`values` and `indices` are the same pointer), FULMEN_CODE_TORCH (libtorch
/// failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_min_dim(
    x: *const fulmen_tensor,
    dim: i64,
    keepdim: bool,
    values: *mut *mut fulmen_tensor,
    indices: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out_pair(values, "values", indices, "indices")?;
        let x = tensor_arg(x, "x")?;
        let (first, second) = ops::min_dim(&x, dim, keepdim)?;
        emit_pair(values, first, indices, second)
    })
}

/// Elementwise larger of `x` and `other`, broadcasting (`torch.maximum`; NaN
/// wins). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on
/// different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_maximum(
    x: *const fulmen_tensor,
    other: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let other = tensor_arg(other, "other")?;
        emit(out, ops::maximum(&x, &other)?)
    })
}

/// Elementwise smaller of `x` and `other`, broadcasting (`torch.minimum`; NaN
/// wins). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on
/// different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_minimum(
    x: *const fulmen_tensor,
    other: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let other = tensor_arg(other, "other")?;
        emit(out, ops::minimum(&x, &other)?)
    })
}

/// A copy of `x` with `src`'s values written along `dim` at the positions in
/// `index` (`Tensor.scatter`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or an index value
/// outside [0, size of `dim`)), FULMEN_CODE_SHAPE_MISMATCH (ranks differ, or
/// `index` is larger than `src`, or than `x` outside `dim`),
/// FULMEN_CODE_DTYPE_MISMATCH (`index` is not i64 or i32), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. `src` of another dtype than `x`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_scatter(
    x: *const fulmen_tensor,
    dim: i64,
    index: *const fulmen_tensor,
    src: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let index = tensor_arg(index, "index")?;
        let src = tensor_arg(src, "src")?;
        emit(out, ops::scatter(&x, dim, &index, &src)?)
    })
}

/// A copy of `x` with `src`'s values added along `dim` at the positions in
/// `index` (`Tensor.scatter_add`). The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or an index value
/// outside [0, size of `dim`)), FULMEN_CODE_SHAPE_MISMATCH (ranks differ, or
/// `index` is larger than `src`, or than `x` outside `dim`),
/// FULMEN_CODE_DTYPE_MISMATCH (`index` is not i64 or i32), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. `src` of another dtype than `x`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_scatter_add(
    x: *const fulmen_tensor,
    dim: i64,
    index: *const fulmen_tensor,
    src: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let index = tensor_arg(index, "index")?;
        let src = tensor_arg(src, "src")?;
        emit(out, ops::scatter_add(&x, dim, &index, &src)?)
    })
}

/// One-hot i64 encoding of the i64 class indices `x`, a new last dimension of
/// `num_classes` (-1: the largest index plus one) (`F.one_hot`). The result is
/// a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`x` is not i64),
/// FULMEN_CODE_OUT_OF_RANGE (an index outside [0, num_classes)),
/// FULMEN_CODE_INVALID_ARGUMENT (`num_classes` below -1, or -1 with no index),
/// FULMEN_CODE_SHAPE_MISMATCH (the result has too many elements),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_one_hot(
    x: *const fulmen_tensor,
    num_classes: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::one_hot(&x, num_classes)?)
    })
}
