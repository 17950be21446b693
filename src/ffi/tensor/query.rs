//! Reading tensors: dtype, shape, device, data copied out; ownership calls.
use crate::error::{Error, ErrorCode};
use crate::ffi::base::error::function_name;
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::base::handle::{self, write_out};
use crate::ffi::tensor::handle::{emit, fulmen_tensor, keep, tensor_arg, unary};
use crate::tensor::{DType, DeviceSpec};

/// Frees a tensor handle. NULL, or a handle already freed, is a no-op.
/// Other handles that share the tensor's storage stay valid.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_free(tensor: *mut fulmen_tensor) {
    handle::free(tensor);
}

/// Keeps a tensor created inside a step callback alive after the callback
/// returns: the host now owns it and frees it with `fulmen_tensor_free`.
/// Has no effect on tensors created outside a callback.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_keep(tensor: *mut fulmen_tensor) -> *mut fulmen_error {
    guard!(|| {
        handle::check(tensor, "tensor")?;
        keep(tensor);
        Ok(())
    })
}

/// Writes the tensor's `fulmen_dtype` to `*out`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (the tensor's dtype has no fulmen_dtype,
/// e.g. complex).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_dtype(tensor: *const fulmen_tensor, out: *mut i32) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        write_out(out, "out", DType::from_kind(t.f_kind()?)? as i32)
    })
}

/// Writes the number of dimensions to `*out`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_ndim(tensor: *const fulmen_tensor, out: *mut usize) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", tensor_arg(tensor, "tensor")?.dim()))
}

/// Writes the number of elements to `*out`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_numel(tensor: *const fulmen_tensor, out: *mut usize) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", tensor_arg(tensor, "tensor")?.numel()))
}

/// Writes the address of the tensor's first element to `*out`: device
/// memory for a tensor on a device (what a vendor's communication library
/// reads and writes in a collectives hook), host memory on the CPU. The
/// block holds `fulmen_tensor_numel` elements of `fulmen_tensor_dtype`,
/// row-major, and stays valid while a handle sharing the storage lives and
/// the tensor is not resized. An empty tensor may give NULL.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (the tensor is not contiguous, a
/// transposed view for instance: its elements are not one row-major
/// block; the tensors a collectives hook receives always are).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_data_ptr(
    tensor: *const fulmen_tensor,
    out: *mut *mut std::ffi::c_void,
) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        if !t.is_contiguous() {
            return Err(Error::invalid("the tensor is not contiguous: its elements are not one row-major block"));
        }
        write_out(out, "out", t.data_ptr())
    })
}

/// Copies the shape into `dims[0..capacity]` and writes the number of
/// dimensions to `*ndim_out`. Fails with `FULMEN_CODE_OUT_OF_RANGE` (and
/// writes `*ndim_out` only) when `capacity` is smaller than that number.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`capacity` too small, see above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_shape(
    tensor: *const fulmen_tensor,
    dims: *mut i64,
    capacity: usize,
    ndim_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check_out(ndim_out, "ndim_out")?;
        let s = tensor_arg(tensor, "tensor")?.size();
        ndim_out.write(s.len());
        if s.len() > capacity {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("tensor has {} dimensions, `dims` holds {capacity}", s.len()),
            ));
        }
        if !s.is_empty() {
            handle::check_out(dims, "dims")?;
            std::ptr::copy_nonoverlapping(s.as_ptr(), dims, s.len());
        }
        Ok(())
    })
}

/// Writes the tensor's device as a `fulmen_device_type` and an index (a
/// vendor's device types included).
///
/// Errors: FULMEN_CODE_UNSUPPORTED (a libtorch device type fulmen does not
/// name, such as Lazy), and the common ones.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_device(
    tensor: *const fulmen_tensor,
    type_out: *mut i32,
    index_out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check_out(type_out, "type_out")?;
        handle::check_out(index_out, "index_out")?;
        let d = DeviceSpec::from_device(crate::tensor::device::Device::of(&*tensor_arg(tensor, "tensor")?)?);
        type_out.write(d.kind as i32);
        index_out.write(d.index);
        Ok(())
    })
}

/// Copies the elements, converted to `dtype`, row-major into the host buffer
/// `dst` of `nbytes` bytes, which must equal the element count times the
/// size of `dtype`. Works for tensors on any device and of any layout.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_SHAPE_MISMATCH (`nbytes` is not the element count times the size
/// of `dtype`), FULMEN_CODE_INVALID_STATE (the tensor lives on the meta
/// device and holds no values), FULMEN_CODE_TORCH (the copy to the host or
/// the conversion failed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_copy_to(
    tensor: *const fulmen_tensor,
    dtype: i32,
    dst: *mut std::ffi::c_void,
    nbytes: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        let dt = DType::from_i32(dtype)?;
        let numel = t.numel();
        let want = numel * dt.size();
        if nbytes != want {
            return Err(Error::shape(format!(
                "tensor of shape {:?} as {} needs {want} bytes, buffer has {nbytes}",
                t.size(),
                dt.name()
            )));
        }
        if want == 0 {
            return Ok(());
        }
        handle::check_out(dst, "dst")?;
        crate::nn::meta_init::refuse_meta(&t, "copying a tensor's values out")?;
        let host = t.f_detach()?.f_to_device(tch::Device::Cpu)?.f_to_kind(dt.kind())?.f_contiguous()?;
        let buf = std::slice::from_raw_parts_mut(dst as *mut u8, want);
        host.f_copy_data_u8(buf, numel)?;
        Ok(())
    })
}

/// Writes the value of a one-element tensor, as a double, to `*out`.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the tensor does not have exactly one
/// element), FULMEN_CODE_TORCH (reading the value failed, e.g. a device error).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_item(tensor: *const fulmen_tensor, out: *mut f64) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        if t.numel() != 1 {
            return Err(Error::shape(format!("item() needs one element, tensor has shape {:?}", t.size())));
        }
        let v = t.f_double_value(&vec![0; t.dim()])?;
        write_out(out, "out", v)
    })
}

/// Writes whether the tensor records operations for autograd.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_requires_grad(
    tensor: *const fulmen_tensor,
    out: *mut bool,
) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", tensor_arg(tensor, "tensor")?.requires_grad()))
}

/// Writes whether the tensor lives in pinned (page-locked) host memory, as
/// a loader with `pin_memory` leaves its batches where CUDA is available;
/// false for a tensor on a device and wherever CUDA is not available.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_is_pinned(tensor: *const fulmen_tensor, out: *mut bool) -> *mut fulmen_error {
    guard!(|| {
        let t = tensor_arg(tensor, "tensor")?;
        let pinned = crate::tensor::pinned::is_pinned(&t)?;
        write_out(out, "out", pinned)
    })
}

/// A new handle to the same tensor (shares storage and autograd history).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_share(
    tensor: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), tensor, out, |t| Ok(t.shallow_clone()))
}

/// A copy with its own storage (autograd-tracked, like `torch.clone`).
///
/// Errors: FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_clone(
    tensor: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), tensor, out, |t| {
        let mut copy = t.f_empty_like()?;
        copy.f_copy_(t)?;
        Ok(copy)
    })
}

/// The same data cut off from autograd (`torch.detach`).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_detach(
    tensor: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), tensor, out, |t| Ok(t.f_detach()?))
}

/// Converts to another `fulmen_dtype`.
///
/// Errors: FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype),
/// FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_to_dtype(
    tensor: *const fulmen_tensor,
    dtype: i32,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    unary(function_name!(), tensor, out, |t| Ok(t.f_to_kind(DType::from_i32(dtype)?.kind())?))
}

/// Moves (copies) to a device given as `fulmen_device_type` and index: any
/// libtorch device type, through libtorch's dispatch (a vendor's XPU, HPU,
/// MTIA, IPU or PrivateUse1 device once its backend is registered).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`device_type` is not a
/// fulmen_device_type, or `device_index` is negative), FULMEN_CODE_UNAVAILABLE
/// (no such CUDA device, no MPS, XLA not started (see the README's XLA
/// section: PJRT_DEVICE, torch_xla's _XLAC), no backend of that type in
/// this process, or an index past its count), FULMEN_CODE_TORCH (the copy
/// failed) or FULMEN_CODE_OUT_OF_MEMORY.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_to_device(
    tensor: *const fulmen_tensor,
    device_type: i32,
    device_index: i64,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check_out(out, "out")?;
        let d = DeviceSpec::from_c(device_type, device_index)?.to_device()?;
        emit(out, crate::tensor::device::to_device(&*tensor_arg(tensor, "tensor")?, d, false)?)
    })
}
