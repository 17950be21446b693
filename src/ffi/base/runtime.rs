//! Process-wide settings: version, seeding, thread count, libtorch's
//! deterministic / cuDNN benchmark switches.
use crate::error::Error;
use crate::ffi::base::error::{fulmen_error, guard, guard_value};
use std::ffi::c_char;

/// The library version as "MAJOR.MINOR.PATCH", a static string.
#[no_mangle]
pub extern "C" fn fulmen_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// The library's version as one number, `MAJOR * 1000000 + MINOR * 1000 +
/// PATCH`: the value a program compiled with this library's header has in
/// FULMEN_ABI_VERSION.
///
/// Threads: any.
#[no_mangle]
pub extern "C" fn fulmen_abi_version() -> u32 {
    crate::abi::library_version()
}

/// Checks that this library serves a program compiled with the header
/// whose FULMEN_ABI_VERSION is `header_version`; call it first as
/// `fulmen_abi_check(FULMEN_ABI_VERSION)`. A library serves the headers of
/// its series (FULMEN_SONAME: the same major version, or the same 0.MINOR
/// before 1.0) up to its own version: within a series releases only add
/// functions, enum values and vtable fields, and keep option structs as
/// they are.
/// The C++ and Go bindings make this check when the program starts.
///
/// Errors: FULMEN_CODE_UNSUPPORTED (another series, or a library older than
/// the header), with both versions in the message.
///
/// Threads: any.
#[no_mangle]
pub extern "C" fn fulmen_abi_check(header_version: u32) -> *mut fulmen_error {
    guard!(|| crate::abi::check_compatible(crate::abi::library_version(), header_version))
}

/// The libtorch version fulmen was built against ("2.13.0"), a static
/// string.
#[no_mangle]
pub extern "C" fn fulmen_libtorch_version() -> *const c_char {
    crate::tensor::runtime::libtorch_version().as_ptr()
}

/// Seeds every random generator fulmen and libtorch use (CPU and CUDA), as
/// Lightning's `seed_everything`.
///
/// Errors: the common ones only.
#[no_mangle]
pub extern "C" fn fulmen_manual_seed(seed: u64) -> *mut fulmen_error {
    guard!(|| {
        crate::seed_everything(seed);
        Ok(())
    })
}

/// Sets the number of threads libtorch uses for intra-op parallelism.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n` < 1).
#[no_mangle]
pub extern "C" fn fulmen_set_num_threads(n: i32) -> *mut fulmen_error {
    guard!(|| {
        if n < 1 {
            return Err(Error::invalid(format!("thread count must be at least 1, got {n}")));
        }
        tch::set_num_threads(n);
        Ok(())
    })
}

/// The number of threads libtorch uses for intra-op parallelism.
#[no_mangle]
pub extern "C" fn fulmen_get_num_threads() -> i32 {
    guard_value(0, tch::get_num_threads)
}

/// libtorch's process-wide switches a trainer sets during its runs
/// (`deterministic`, `benchmark`): whether deterministic algorithms are
/// on, whether they only warn, and `torch.backends.cudnn.benchmark`. Each
/// NULL pointer is skipped.
///
/// Threads: any.
#[no_mangle]
pub extern "C" fn fulmen_torch_flags(deterministic: *mut bool, warn_only: *mut bool, cudnn_benchmark: *mut bool) {
    let (on, warn, bench) = guard_value((false, false, false), || {
        let (on, warn) = crate::tensor::runtime::deterministic_mode();
        (on, warn, crate::tensor::runtime::cudnn_benchmark())
    });
    for (out, value) in [(deterministic, on), (warn_only, warn), (cudnn_benchmark, bench)] {
        if !out.is_null() {
            // SAFETY: the caller passes NULL or a writable bool.
            unsafe { *out = value };
        }
    }
}

/// Number of live fulmen handles of every type in this process (tensors,
/// models, errors, ...): a leak check for tests and long-running hosts.
#[no_mangle]
pub extern "C" fn fulmen_live_handles() -> usize {
    guard_value(0, crate::ffi::base::handle::live_count)
}
