//! Generated from src/tensor/ops/table.rs by tools/codegen/ops.rs (`make header`): do not edit.
//! The C functions of the `shape` tensor ops; each converts its arguments
//! and calls the core function of the same name in `crate::tensor::ops`.
use crate::ffi::tensor::handle::{emit, emit_list, fulmen_tensor, i64_list, tensor_arg, tensor_list};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::check_out;
use crate::tensor::ops;
use std::ffi::c_char;
use tch::Tensor;

/// Same elements in a new shape (`-1` infers one size); copies if needed. The
/// result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the element count does not fit `shape`,
/// or more than one -1 or another negative size), FULMEN_CODE_TORCH (libtorch
/// failed) or FULMEN_CODE_OUT_OF_MEMORY (copying).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_reshape(
    x: *const fulmen_tensor,
    shape: *const i64,
    ndim: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let shape = i64_list(shape, ndim, "shape")?;
        emit(out, ops::reshape(&x, shape)?)
    })
}

/// Same storage in a new shape; fails when the layout does not allow a view.
/// The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the element count does not fit `shape`,
/// or more than one -1 or another negative size), FULMEN_CODE_TORCH (the layout
/// does not allow a view).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_view(
    x: *const fulmen_tensor,
    shape: *const i64,
    ndim: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let shape = i64_list(shape, ndim, "shape")?;
        emit(out, ops::view(&x, shape)?)
    })
}

/// Flattens dimensions `start_dim..=end_dim` into one. The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`start_dim` or `end_dim` out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (`start_dim` comes after `end_dim`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_flatten(
    x: *const fulmen_tensor,
    start_dim: i64,
    end_dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::flatten(&x, start_dim, end_dim)?)
    })
}

/// Reorders dimensions: `dims` is a permutation of `0..ndim`. The result is a
/// new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`ndims` is not the tensor's number of
/// dimensions), FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_permute(
    x: *const fulmen_tensor,
    dims: *const i64,
    ndims: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, ndims, "dims")?;
        emit(out, ops::permute(&x, dims)?)
    })
}

/// Swaps dimensions `dim0` and `dim1`. The result is a new tensor written to
/// `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim0` or `dim1` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_transpose(
    x: *const fulmen_tensor,
    dim0: i64,
    dim1: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::transpose(&x, dim0, dim1)?)
    })
}

/// Removes dimension `dim` if its size is 1 (otherwise returns the same shape).
/// The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_squeeze(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::squeeze(&x, dim)?)
    })
}

/// Inserts a dimension of size 1 at `dim` (`-1` appends). The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_unsqueeze(
    x: *const fulmen_tensor,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::unsqueeze(&x, dim)?)
    })
}

/// The slice `start..start+length` of dimension `dim` (a view). The result is a
/// new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or the slice does not
/// lie inside the dimension), FULMEN_CODE_SHAPE_MISMATCH (a 0-dimensional
/// tensor).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_narrow(
    x: *const fulmen_tensor,
    dim: i64,
    start: i64,
    length: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        emit(out, ops::narrow(&x, dim, start, length)?)
    })
}

/// Concatenates `tensors[0..n]` along the existing dimension `dim`; all other
/// dimensions must match. The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n` is 0), FULMEN_CODE_SHAPE_MISMATCH
/// (ranks, or sizes outside `dim`, differ), FULMEN_CODE_OUT_OF_RANGE (`dim` out
/// of range), FULMEN_CODE_TORCH (libtorch failed, e.g. 0-dimensional tensors or
/// tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_cat(
    tensors: *const *const fulmen_tensor,
    n: usize,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let tensors = tensor_list(tensors, n, "tensors")?;
        let tensors: Vec<&Tensor> = tensors.iter().map(|t| &**t).collect();
        emit(out, ops::cat(&tensors, dim)?)
    })
}

/// Stacks `tensors[0..n]` (all of one shape) along a new dimension `dim`. The
/// result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n` is 0), FULMEN_CODE_SHAPE_MISMATCH
/// (shapes differ), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range),
/// FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_stack(
    tensors: *const *const fulmen_tensor,
    n: usize,
    dim: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let tensors = tensor_list(tensors, n, "tensors")?;
        let tensors: Vec<&Tensor> = tensors.iter().map(|t| &**t).collect();
        emit(out, ops::stack(&tensors, dim)?)
    })
}

/// A view of `x` broadcast to `size` without copying (`Tensor.expand`): size-1
/// dimensions stretch, -1 keeps a size, new dimensions go in front. The result
/// is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`size` has fewer dimensions than `x`, or
/// a size that does not match), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_expand(
    x: *const fulmen_tensor,
    size: *const i64,
    size_len: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let size = i64_list(size, size_len, "size")?;
        emit(out, ops::expand(&x, size)?)
    })
}

/// `x` (N, C, spatial...) with 1 to 3 spatial dimensions resized to `size` (one
/// size per spatial dimension, or one for all) or by `scale_factor` (give
/// exactly one: `size_len` 0 or `scale_factor` 0 leaves it out), with `mode`
/// "nearest", "linear" (1-D), "bilinear" or "bicubic" (2-D) or "trilinear"
/// (3-D) (`F.interpolate`; `align_corners` for the linear and cubic modes). The
/// result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown mode, both or neither of
/// size and scale_factor, a size not positive, a scale not positive and finite,
/// align_corners with nearest), FULMEN_CODE_SHAPE_MISMATCH (an input that is
/// not 3-D to 5-D, a mode for another number of spatial dimensions, an empty or
/// too large result), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_interpolate(
    x: *const fulmen_tensor,
    size: *const i64,
    size_len: usize,
    scale_factor: f64,
    mode: *const c_char,
    align_corners: bool,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let size = i64_list(size, size_len, "size")?;
        let mode = str_arg(mode, "mode")?;
        emit(out, ops::interpolate(&x, size, scale_factor, mode, align_corners)?)
    })
}

/// `x` tiled `repeats[i]` times along each dimension, copying
/// (`Tensor.repeat`); extra leading entries add dimensions. The result is a new
/// tensor written to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (fewer entries than `x` has dimensions,
/// or too many elements), FULMEN_CODE_INVALID_ARGUMENT (a negative count),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_repeat(
    x: *const fulmen_tensor,
    repeats: *const i64,
    repeats_len: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let repeats = i64_list(repeats, repeats_len, "repeats")?;
        emit(out, ops::repeat(&x, repeats)?)
    })
}

/// `x` reversed along each dimension in `dims` (`torch.flip`). The result is a
/// new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH
/// (libtorch failed, e.g. an unsupported dtype).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_flip(
    x: *const fulmen_tensor,
    dims: *const i64,
    dims_len: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let dims = i64_list(dims, dims_len, "dims")?;
        emit(out, ops::flip(&x, dims)?)
    })
}

/// `x` shifted cyclically by `shifts[i]` along `dims[i]`; with no dims, the
/// flattened tensor by its one shift (`torch.roll`). The result is a new tensor
/// written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (a dimension out of range),
/// FULMEN_CODE_INVALID_ARGUMENT (shift and dimension counts differ),
/// FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_roll(
    x: *const fulmen_tensor,
    shifts: *const i64,
    shifts_len: usize,
    dims: *const i64,
    dims_len: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let shifts = i64_list(shifts, shifts_len, "shifts")?;
        let dims = i64_list(dims, dims_len, "dims")?;
        emit(out, ops::roll(&x, shifts, dims)?)
    })
}

/// Dimension `dim` of `x` split into the dimensions `sizes`, one of which may
/// be -1 (`Tensor.unflatten`). The result is a new tensor written to `*out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`dim` out of range),
/// FULMEN_CODE_SHAPE_MISMATCH (`sizes` empty, with more than one -1, or not
/// multiplying to the size of `dim`), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_unflatten(
    x: *const fulmen_tensor,
    dim: i64,
    sizes: *const i64,
    sizes_len: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let x = tensor_arg(x, "x")?;
        let sizes = i64_list(sizes, sizes_len, "sizes")?;
        emit(out, ops::unflatten(&x, dim, sizes)?)
    })
}

/// `x` cut along `dim` into at most `chunks` views of equal size, the last
/// possibly smaller (`torch.chunk`). The pieces are new tensors written to
/// `outs[0..*count_out]`: `*count_out` gets their count, and when it exceeds
/// `capacity` nothing else is written (call again with `*count_out` slots).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`chunks` not positive),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `capacity` below the count:
/// then only `*count_out` is written), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_chunk(
    x: *const fulmen_tensor,
    chunks: i64,
    dim: i64,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let x = tensor_arg(x, "x")?;
        emit_list(outs, capacity, count_out, ops::chunk_count(&x, chunks, dim)?, || ops::chunk(&x, chunks, dim))
    })
}

/// `x` cut along `dim` into views of `split_size`, the last possibly smaller
/// (`torch.split`). The pieces are new tensors written to
/// `outs[0..*count_out]`: `*count_out` gets their count, and when it exceeds
/// `capacity` nothing else is written (call again with `*count_out` slots).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`split_size` not positive),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `capacity` below the count:
/// then only `*count_out` is written), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_split(
    x: *const fulmen_tensor,
    split_size: i64,
    dim: i64,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let x = tensor_arg(x, "x")?;
        emit_list(outs, capacity, count_out, ops::split_count(&x, split_size, dim)?, || ops::split(&x, split_size, dim))
    })
}

/// `x` cut along `dim` into views of the given sizes, which sum to the size of
/// `dim` (`torch.split` with a list). The pieces are new tensors written to
/// `outs[0..*count_out]`: `*count_out` gets their count, and when it exceeds
/// `capacity` nothing else is written (call again with `*count_out` slots).
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (a negative size, or sizes not summing to
/// the size of `dim`), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or
/// `capacity` below the count: then only `*count_out` is written),
/// FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_split_sizes(
    x: *const fulmen_tensor,
    sizes: *const i64,
    sizes_len: usize,
    dim: i64,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let x = tensor_arg(x, "x")?;
        let sizes = i64_list(sizes, sizes_len, "sizes")?;
        emit_list(outs, capacity, count_out, ops::split_sizes_count(&x, sizes, dim)?, || ops::split_sizes(&x, sizes, dim))
    })
}

/// The slices of `x` along `dim`, that dimension removed (`torch.unbind`). The
/// pieces are new tensors written to `outs[0..*count_out]`: `*count_out` gets
/// their count, and when it exceeds `capacity` nothing else is written (call
/// again with `*count_out` slots).
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (`x` is 0-dimensional),
/// FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `capacity` below the count:
/// then only `*count_out` is written), FULMEN_CODE_TORCH (libtorch failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_unbind(
    x: *const fulmen_tensor,
    dim: i64,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let x = tensor_arg(x, "x")?;
        emit_list(outs, capacity, count_out, ops::unbind_count(&x, dim)?, || ops::unbind(&x, dim))
    })
}
