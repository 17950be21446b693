//! Creating tensors: from host buffers, filled, random, ranges.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::function_name;
use crate::ffi::base::error::guard_named;
use crate::ffi::base::error::{fulmen_error, guard, guard_value};
use crate::ffi::tensor::handle::{emit, fulmen_tensor, i64_list};
use crate::tensor::DType;
use tch::{Device, Kind, Tensor};

fn check_shape(shape: &[i64]) -> Result<usize> {
    let mut numel: usize = 1;
    for (i, d) in shape.iter().enumerate() {
        if *d < 0 {
            return Err(Error::shape(format!("shape {shape:?}: dimension {i} is negative")));
        }
        numel = numel
            .checked_mul(*d as usize)
            .ok_or_else(|| Error::shape(format!("shape {shape:?} has too many elements")))?;
    }
    Ok(numel)
}

unsafe fn shape_arg<'a>(shape: *const i64, ndim: usize) -> Result<&'a [i64]> {
    let s = i64_list(shape, ndim, "shape")?;
    check_shape(s)?;
    Ok(s)
}

/// Creates a CPU tensor by copying `nbytes` bytes of host data laid out
/// row-major with element type `dtype` (a `fulmen_dtype`; f16 and bf16 are
/// given as their 16-bit patterns, bool as bytes 0/1) and shape
/// `shape[0..ndim]` (ndim 0 is a scalar). `nbytes` must equal the element
/// count times the element size. The new tensor is written to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (a negative dimension, too many elements, or
/// `nbytes` does not match the shape), FULMEN_CODE_INVALID_ARGUMENT (bool data
/// holds a byte other than 0 or 1), FULMEN_CODE_TORCH (libtorch failed)
/// or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_from_data(
    data: *const std::ffi::c_void,
    nbytes: usize,
    dtype: i32,
    shape: *const i64,
    ndim: usize,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        crate::ffi::base::handle::check_out(out, "out")?;
        let s = shape_arg(shape, ndim)?;
        emit(out, host_tensor(data, nbytes, dtype, s)?)
    })
}

/// A CPU tensor of shape `s` holding a copy of `nbytes` host bytes of the
/// `fulmen_dtype` `dtype`, checked as `fulmen_tensor_from_data` documents.
pub(crate) unsafe fn host_tensor(
    data: *const std::ffi::c_void,
    nbytes: usize,
    dtype: i32,
    s: &[i64],
) -> Result<Tensor> {
    let dt = DType::from_i32(dtype)?;
    let numel = check_shape(s)?;
    let want = numel
        .checked_mul(dt.size())
        .ok_or_else(|| Error::shape(format!("shape {s:?} of {} has too many bytes", dt.name())))?;
    if nbytes != want {
        return Err(Error::shape(format!("shape {s:?} of {} needs {want} bytes, got {nbytes}", dt.name())));
    }
    if want > 0 && data.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, "argument `data` is NULL"));
    }
    let bytes: &[u8] = if want == 0 { &[] } else { std::slice::from_raw_parts(data as *const u8, want) };
    if dt == DType::Bool && bytes.iter().any(|b| *b > 1) {
        return Err(Error::invalid("bool data must hold only bytes 0 and 1"));
    }
    Ok(Tensor::f_from_data_size(bytes, s, dt.kind())?)
}

unsafe fn filled(
    func: &'static str,
    shape: *const i64,
    ndim: usize,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
    make: impl FnOnce(&[i64], Kind) -> std::result::Result<Tensor, tch::TchError>,
) -> *mut fulmen_error {
    guard_named(func, || {
        crate::ffi::base::handle::check_out(out, "out")?;
        let dt = DType::from_i32(dtype)?;
        let s = shape_arg(shape, ndim)?;
        emit(out, make(s, dt.kind())?)
    })
}

/// As [`filled`], for random fills that need a floating dtype.
unsafe fn random(
    func: &'static str,
    shape: *const i64,
    ndim: usize,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
    make: impl FnOnce(&[i64], Kind) -> std::result::Result<Tensor, tch::TchError>,
) -> *mut fulmen_error {
    match DType::from_i32(dtype) {
        Ok(d) if !d.is_float() => crate::ffi::base::error::error_into_raw(Error::dtype(format!(
            "{func}: random samples need a floating dtype, got {}",
            d.name()
        ))),
        _ => filled(func, shape, ndim, dtype, out, make),
    }
}

/// Creates a CPU tensor of zeros with the given shape and `fulmen_dtype`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (a negative dimension or too many elements),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_zeros(
    shape: *const i64,
    ndim: usize,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    filled(function_name!(), shape, ndim, dtype, out, |s, k| Tensor::f_zeros(s, (k, Device::Cpu)))
}

/// Creates a CPU tensor of ones with the given shape and `fulmen_dtype`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (a negative dimension or too many elements),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_ones(
    shape: *const i64,
    ndim: usize,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    filled(function_name!(), shape, ndim, dtype, out, |s, k| Tensor::f_ones(s, (k, Device::Cpu)))
}

/// Creates a CPU tensor filled with `value` (converted to the dtype).
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (a negative dimension or too many elements),
/// FULMEN_CODE_INVALID_ARGUMENT (`value` does not fit the dtype, e.g. NaN for
/// an integer dtype), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_full(
    shape: *const i64,
    ndim: usize,
    value: f64,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    filled(function_name!(), shape, ndim, dtype, out, |s, k| Tensor::f_full(s, value, (k, Device::Cpu)))
}

/// Creates a CPU tensor of samples from N(0, 1), drawn from libtorch's global
/// generator (seeded by `fulmen_manual_seed`). `dtype` must be floating.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a floating fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (a negative dimension or too many elements),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_randn(
    shape: *const i64,
    ndim: usize,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    random(function_name!(), shape, ndim, dtype, out, |s, k| Tensor::f_randn(s, (k, Device::Cpu)))
}

/// Creates a CPU tensor of samples from U[0, 1), from libtorch's global
/// generator. `dtype` must be floating.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a floating fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (a negative dimension or too many elements),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_rand(
    shape: *const i64,
    ndim: usize,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    random(function_name!(), shape, ndim, dtype, out, |s, k| Tensor::f_rand(s, (k, Device::Cpu)))
}

/// Creates the 1-D CPU tensor `start, start+step, ...` below `end`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_INVALID_ARGUMENT (a zero or non-finite step, non-finite bounds,
/// a step away from `end`, a range longer than 2^53, or integer bounds or step
/// of 2^61 or more in size), FULMEN_CODE_TORCH (libtorch
/// failed, e.g. a bool dtype) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_arange(
    start: f64,
    end: f64,
    step: f64,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        crate::ffi::base::handle::check_out(out, "out")?;
        let dt = DType::from_i32(dtype)?;
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid(format!("arange({start}, {end}, {step}): bad range")));
        }
        if (end - start) * step < 0.0 {
            return Err(Error::invalid(format!("arange({start}, {end}, {step}): the step goes away from the end")));
        }
        check_range_length(start, end, step, dt)?;
        emit(out, Tensor::f_arange_start_step(start, end, step, (dt.kind(), Device::Cpu))?)
    })
}

/// Most elements an arange may have: 2^53, the largest count a double holds
/// exactly, far beyond any memory.
const ARANGE_MAX_LEN: f64 = 9_007_199_254_740_992.0;

/// Refuses a range whose length is beyond [`ARANGE_MAX_LEN`] and, for an
/// integer dtype, bounds or a step of 2^61 or more in size: libtorch computes
/// an integer range's length as `(end - start + step - sign) / step` in
/// int64, where larger values overflow and a division by -1 traps.
fn check_range_length(start: f64, end: f64, step: f64, dt: DType) -> Result<()> {
    let len = ((end - start) / step).ceil();
    if len.is_nan() || len > ARANGE_MAX_LEN {
        return Err(Error::invalid(format!("arange({start}, {end}, {step}): the range is too long")));
    }
    const INTEGER_LIMIT: f64 = 2_305_843_009_213_693_952.0; // 2^61
    let floating = dt.is_float() || dt == DType::Bool;
    if !floating && [start, end, step].iter().any(|x| x.abs() >= INTEGER_LIMIT) {
        return Err(Error::invalid(format!(
            "arange({start}, {end}, {step}) as {}: an integer range's bounds and step must be below 2^61 in size",
            dt.name()
        )));
    }
    Ok(())
}

/// Creates a 0-dimensional CPU tensor holding `value` as `dtype`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_INVALID_ARGUMENT (`value` does not fit the dtype, e.g. NaN for
/// an integer dtype).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_scalar(
    value: f64,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    filled(function_name!(), std::ptr::null(), 0, dtype, out, |_, k| {
        Tensor::f_full([0i64; 0].as_slice(), value, (k, Device::Cpu))
    })
}

/// Converts a float to the IEEE half bit pattern (round to nearest even).
#[no_mangle]
pub extern "C" fn fulmen_f16_from_f32(value: f32) -> u16 {
    guard_value(0, || half::f16::from_f32(value).to_bits())
}

/// Converts an IEEE half bit pattern to a float.
#[no_mangle]
pub extern "C" fn fulmen_f32_from_f16(bits: u16) -> f32 {
    guard_value(0.0, || half::f16::from_bits(bits).to_f32())
}

/// Converts a float to the bfloat16 bit pattern (round to nearest even).
#[no_mangle]
pub extern "C" fn fulmen_bf16_from_f32(value: f32) -> u16 {
    guard_value(0, || half::bf16::from_f32(value).to_bits())
}

/// Converts a bfloat16 bit pattern to a float.
#[no_mangle]
pub extern "C" fn fulmen_f32_from_bf16(bits: u16) -> f32 {
    guard_value(0.0, || half::bf16::from_bits(bits).to_f32())
}
