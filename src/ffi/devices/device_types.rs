//! Device types beyond tch's: their names and counts, and the fake
//! PrivateUse1 device that tests and the conformance kit train on.
use crate::error::{Error, ErrorCode};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::check_out;
use crate::ffi::nn::model::copy_str;
use crate::tensor::device::{register_fake_device, Device, DeviceType};
use crate::tensor::DeviceSpec;
use std::ffi::c_char;

/// The most devices the fake device offers.
pub const FULMEN_MAX_FAKE_DEVICES: usize = 64;

/// Copies libtorch's lower-case name of a device type into `buf` as for
/// `fulmen_model_state_dict_name`: "cpu", "cuda", "xpu", ..., and for
/// FULMEN_DEVICE_TYPE_PRIVATE_USE1 the name its backend registered ("npu"),
/// or "privateuseone" while none has.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type),
/// FULMEN_CODE_OUT_OF_RANGE (`buf` too small), FULMEN_CODE_NULL_ARGUMENT.
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_device_type_name(
    device_type: i32,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| copy_str(&DeviceType::from_c(device_type)?.name(), buf, capacity, len_out))
}

/// Writes how many devices of `device_type` libtorch has in this process:
/// CUDA's and MPS's from their runtimes, 1 for the CPU and meta, and for the
/// other types what their registered backend reports (0 without one).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type),
/// FULMEN_CODE_NULL_ARGUMENT (`out`). Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_device_count(device_type: i32, out: *mut usize) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        out.write(DeviceType::from_c(device_type)?.device_count()?);
        Ok(())
    })
}

fn device_arg(device_type: i32, index: i64) -> crate::error::Result<Device> {
    let d = DeviceSpec::from_c(device_type, index)?.device()?;
    d.check_available()?;
    Ok(d)
}

/// Blocks until the work queued on device (`device_type`, `index`) is done
/// (`torch.cuda.synchronize` and its kin; nothing to wait for on the CPU;
/// on XLA the pending graph is cut and run first, torch_xla's step marker).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type, or a
/// negative index), FULMEN_CODE_UNAVAILABLE (no such device here),
/// FULMEN_CODE_TORCH (the backend cannot synchronize).
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_device_synchronize(device_type: i32, index: i64) -> *mut fulmen_error {
    guard!(|| device_arg(device_type, index)?.synchronize())
}

/// Makes every operation that has the host wait for a device of
/// `device_type` warn (`mode` 1) or fail (2), or neither (0), as
/// `torch.cuda.set_sync_debug_mode`: a way to check that training steps
/// never wait for their device (the GPU kit's `gpu_check` fails any
/// synchronization between `on_train_batch_start` and
/// `on_train_batch_end`). Only CUDA has it. Process-wide; off by default.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type, or a
/// mode other than 0, 1 and 2), FULMEN_CODE_UNSUPPORTED (a device type
/// other than CUDA, or fulmen built without CUDA).
/// Thread rules: any thread; the mode holds for every thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_device_set_sync_debug_mode(device_type: i32, mode: i32) -> *mut fulmen_error {
    guard!(|| {
        let kind = DeviceType::from_c(device_type)?;
        if !(0..=2).contains(&mode) {
            return Err(Error::invalid(format!("sync debug mode {mode} is not 0 (off), 1 (warn) or 2 (error)")));
        }
        if kind != DeviceType::Cuda {
            return Err(Error::unsupported(format!("{} has no sync debug mode: only CUDA has one", kind.name())));
        }
        crate::accelerators::cxx::cuda_set_sync_debug_mode(mode)
    })
}

/// Copies the state of libtorch's default random generator for device
/// (`device_type`, `index`) into `buf[0..capacity]` and writes its length
/// to `*len_out` (`torch.get_rng_state`, `torch.cuda.get_rng_state` and
/// their kin; the CPU generator's for the CPU). When `capacity` is too
/// small only `*len_out` is written and the call fails with
/// FULMEN_CODE_OUT_OF_RANGE.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type, or a
/// negative index), FULMEN_CODE_UNAVAILABLE (no such device here),
/// FULMEN_CODE_TORCH (the backend registered no generator),
/// FULMEN_CODE_OUT_OF_RANGE (`capacity` too small).
/// Thread rules: any thread; the generator is locked during the copy.
#[no_mangle]
pub unsafe extern "C" fn fulmen_device_rng_state(
    device_type: i32,
    index: i64,
    buf: *mut u8,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let d = device_arg(device_type, index)?;
        let state = if d == Device::Cpu { crate::tensor::runtime::cpu_rng_state()? } else { d.rng_state()? };
        let bytes = Vec::<u8>::try_from(&state.f_contiguous()?)?;
        len_out.write(bytes.len());
        if bytes.len() > capacity {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("the state has {} bytes, `buf` holds {capacity}", bytes.len()),
            ));
        }
        if !bytes.is_empty() {
            check_out(buf, "buf")?;
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len());
        }
        Ok(())
    })
}

/// Restores a state `fulmen_device_rng_state` wrote (`len` bytes at
/// `data`) into the device's default generator.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type, a
/// negative index, `len` over FULMEN_MAX_RNG_STATE), FULMEN_CODE_UNAVAILABLE
/// (no such device here), FULMEN_CODE_TORCH (the generator refused the
/// state: not one of its own).
/// Thread rules: as `fulmen_device_rng_state`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_device_set_rng_state(
    device_type: i32,
    index: i64,
    data: *const u8,
    len: usize,
) -> *mut fulmen_error {
    guard!(|| {
        if len > crate::ffi::devices::accelerator::MAX_RNG_STATE {
            return Err(Error::invalid(format!("a generator state of {len} bytes (at most FULMEN_MAX_RNG_STATE)")));
        }
        let d = device_arg(device_type, index)?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            if data.is_null() {
                return Err(Error::new(ErrorCode::NullArgument, "argument `data` is NULL"));
            }
            std::slice::from_raw_parts(data, len)
        };
        let state = tch::Tensor::from_slice(bytes);
        if d == Device::Cpu {
            crate::tensor::runtime::set_cpu_rng_state(&state)
        } else {
            d.set_rng_state(&state)
        }
    })
}

/// Registers fulmen's fake device as libtorch's PrivateUse1 backend under
/// `name` (lower-case letters, digits and '_', as
/// `torch.utils.rename_privateuse1_backend`) with `count` devices. Its
/// tensors live in host memory; a few kernels are its own and every other
/// operator runs libtorch's CPU kernel through the CPU fallback, so it
/// computes what the CPU computes, and its random numbers come from the CPU
/// generator. It is the device the conformance kit and fulmen's tests run
/// custom accelerators on: tensors, models and batches move to
/// FULMEN_DEVICE_TYPE_PRIVATE_USE1 devices, autocast casts as libtorch's CPU
/// autocast does (matrix products and convolutions down, losses in
/// float32), and a custom accelerator whose `get_parallel_devices` names
/// them trains there.
///
/// Process-wide and permanent: libtorch cannot unregister a backend or
/// rename PrivateUse1, so call it once, before the first backward pass in
/// the process (libtorch's autograd engine sizes its per-device queues
/// then: a device added later could not run backward; a real backend
/// registers when its library loads, for the same reason); a second call
/// with the same name and count does nothing. When the environment
/// variable FULMEN_FAKE_DEVICE_MEMORY_LIMIT holds a number of bytes at
/// that call, the devices of this process hold at most that many: an
/// allocation past it fails as a device's out-of-memory error
/// (FULMEN_CODE_OUT_OF_MEMORY), so a test can run a model bigger than its
/// device.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a bad or built-in name, `count`
/// outside 1..=FULMEN_MAX_FAKE_DEVICES), FULMEN_CODE_INVALID_STATE (a
/// backward pass ran through fulmen already), FULMEN_CODE_TORCH (another
/// PrivateUse1 backend is registered in this process, or the fake device is
/// registered under another name or count), FULMEN_CODE_NULL_ARGUMENT.
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fake_device_register(name: *const c_char, count: usize) -> *mut fulmen_error {
    guard!(|| {
        let name = str_arg(name, "name")?;
        if count == 0 || count > FULMEN_MAX_FAKE_DEVICES {
            return Err(crate::error::Error::invalid(format!(
                "fake device count {count} is outside 1..=FULMEN_MAX_FAKE_DEVICES ({FULMEN_MAX_FAKE_DEVICES})"
            )));
        }
        register_fake_device(name, count)
    })
}

/// Writes to `*out` how many times the host has waited for the fake
/// device's data in this process: scalar reads (`fulmen_tensor_item` and
/// the like) and copies into host memory, except non-blocking copies into
/// pinned memory. On a CUDA device each of these synchronizes the host
/// with the device; a count that does not grow from one training step to
/// the next shows steps that never wait for their device. The copies its
/// CPU fallback makes to compute an op are not counted. 0 before the fake
/// device is registered; never reset.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT (`*out` is left as it was).
/// Thread rules: any thread; the count covers every thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fake_device_host_reads(out: *mut u64) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        out.write(crate::tensor::device::fake_device_host_reads()?);
        Ok(())
    })
}
