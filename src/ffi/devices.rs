//! Device types beyond tch's: their names and counts, and the fake
//! PrivateUse1 device that tests and the conformance kit train on.
use super::error::{fulmen_error, guard, str_arg};
use super::handle::check_out;
use super::model::copy_str;
use crate::tensor::device::{register_fake_device, DeviceType};
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
    guard("fulmen_device_type_name", || copy_str(&DeviceType::from_c(device_type)?.name(), buf, capacity, len_out))
}

/// Writes how many devices of `device_type` libtorch has in this process:
/// CUDA's and MPS's from their runtimes, 1 for the CPU and meta, and for the
/// other types what their registered backend reports (0 without one).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (not a fulmen_device_type),
/// FULMEN_CODE_NULL_ARGUMENT (`out`). Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_device_count(device_type: i32, out: *mut usize) -> *mut fulmen_error {
    guard("fulmen_device_count", || {
        check_out(out, "out")?;
        out.write(DeviceType::from_c(device_type)?.device_count()?);
        Ok(())
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
/// with the same name and count does nothing.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a bad or built-in name, `count`
/// outside 1..=FULMEN_MAX_FAKE_DEVICES), FULMEN_CODE_INVALID_STATE (a
/// backward pass ran through fulmen already), FULMEN_CODE_TORCH (another
/// PrivateUse1 backend is registered in this process, or the fake device is
/// registered under another name or count), FULMEN_CODE_NULL_ARGUMENT.
/// Thread rules: any thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_fake_device_register(name: *const c_char, count: usize) -> *mut fulmen_error {
    guard("fulmen_fake_device_register", || {
        let name = str_arg(name, "name")?;
        if count == 0 || count > FULMEN_MAX_FAKE_DEVICES {
            return Err(crate::error::Error::invalid(format!(
                "fake device count {count} is outside 1..=FULMEN_MAX_FAKE_DEVICES ({FULMEN_MAX_FAKE_DEVICES})"
            )));
        }
        register_fake_device(name, count)
    })
}
