//! The C++ shim of `csrc/` (built by build.rs) in one place: every
//! `extern "C"` declaration of it, by source file, and [`call`], the status
//! protocol its functions share. None of these symbols is part of the C API
//! (`tests/header_drift.rs` checks that `fulmen.h` names none).
use crate::error::{Error, ErrorCode, Result};
use libc::{c_char, c_int, size_t};

mod accelerators;
mod autocast;
mod checkpoint;
mod compiled_step;
mod devices;
mod distributed;
mod exported;
mod flops;
mod foreach;
mod fsdp;
mod fused;
mod graphs;
mod ops;
mod pinned;
mod profiler;
mod rank_function;
mod runtime;
mod script;
mod streams;
mod xla;

pub(crate) use accelerators::*;
pub(crate) use autocast::*;
pub(crate) use checkpoint::*;
pub(crate) use compiled_step::*;
pub(crate) use devices::*;
pub(crate) use distributed::*;
pub(crate) use exported::*;
pub(crate) use flops::*;
pub(crate) use foreach::*;
pub(crate) use fsdp::*;
pub(crate) use fused::*;
pub(crate) use graphs::*;
pub(crate) use ops::*;
pub(crate) use pinned::*;
pub(crate) use profiler::*;
pub(crate) use rank_function::*;
pub(crate) use runtime::*;
pub(crate) use script::*;
pub(crate) use streams::*;
pub(crate) use xla::*;

/// Success status of a shim call.
const OK: c_int = 0;
/// Status of a shim call that needs a part of libtorch this build lacks
/// (or whose operation libtorch has not implemented there).
pub(crate) const UNSUPPORTED: c_int = 2;
/// Status of a shim call that failed with c10's TypeError.
const TYPE_ERROR: c_int = 6;
/// The statuses that name their code (`csrc/fulmen_cxx.h`): a part
/// libtorch lacks (or c10's NotImplementedError), then c10's typed errors:
/// out of memory, an index error, a value error, a type error, a c10d
/// error; and a shim's own refusal of a call in the caller's state.
const TYPED: [(c_int, ErrorCode); 7] = [
    (UNSUPPORTED, ErrorCode::Unsupported),
    (3, ErrorCode::OutOfMemory),
    (4, ErrorCode::OutOfRange),
    (5, ErrorCode::InvalidArgument),
    (TYPE_ERROR, ErrorCode::DtypeMismatch),
    (7, ErrorCode::Distributed),
    (8, ErrorCode::InvalidState),
];
/// Size of the error-message buffer handed to the shims.
const ERR_LEN: usize = 1024;

/// Copies `message` into a shim's error buffer: at most `err_len - 1`
/// bytes, then a NUL.
///
/// # Safety
/// `err` is NULL or points to `err_len` writable bytes.
pub(crate) unsafe fn write_error(err: *mut c_char, err_len: size_t, message: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let bytes = message.as_bytes();
    let n = bytes.len().min(err_len - 1);
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), err.cast::<u8>(), n);
    *err.add(n) = 0;
}

/// Runs a shim call that takes an error buffer `(err, err_len)` and turns a
/// non-zero status into an [`Error`] prefixed with `what`.
pub(crate) fn call(what: &str, f: impl FnOnce(*mut c_char, size_t) -> c_int) -> Result<()> {
    let mut err = [0 as c_char; ERR_LEN];
    let status = f(err.as_mut_ptr(), ERR_LEN);
    if status == OK {
        return Ok(());
    }
    // SAFETY: the shims always NUL-terminate what they write, and the buffer
    // starts zeroed, so it holds a NUL within ERR_LEN bytes.
    let text = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
    // Any other status is classified as tch's errors are: a device's
    // allocation failure, dtype, shape and range problems keep their meaning.
    let code = match TYPED.iter().find(|(s, _)| *s == status) {
        // c10's NotImplementedError also reports a kernel missing for a
        // dtype ("\"add\" not implemented for 'Bool'"): a dtype problem, as
        // the same message is through tch.
        Some((UNSUPPORTED, _)) if text.contains(crate::error::DTYPE_KERNEL_MISSING) => ErrorCode::DtypeMismatch,
        // c10's TypeError is about other types too (a list where a tensor
        // was expected): those are the caller's arguments.
        Some((TYPE_ERROR, _)) if !crate::error::mentions_a_dtype(&text) => ErrorCode::InvalidArgument,
        Some((_, code)) => *code,
        None => crate::error::classify_torch_message(&text),
    };
    Err(Error::new(code, format!("{what}: {text}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_statuses_keep_their_codes_and_messages_are_classified() {
        let status = |status: c_int, message: &'static str| {
            call("probe", |err, len| {
                // SAFETY: `call` hands a buffer of `len` bytes.
                unsafe { write_error(err, len, message) };
                status
            })
            .unwrap_err()
        };
        assert_eq!(status(4, "index 7 is out of bounds").code, ErrorCode::OutOfRange);
        assert_eq!(status(3, "NPU ran dry").code, ErrorCode::OutOfMemory);
        assert_eq!(status(5, "bad value").code, ErrorCode::InvalidArgument);
        assert_eq!(status(TYPE_ERROR, "expected scalar type Float but found Long").code, ErrorCode::DtypeMismatch);
        assert_eq!(status(TYPE_ERROR, "ijk must have an integer type").code, ErrorCode::DtypeMismatch);
        let not_a_dtype = "expected Tensor as element 0 in argument 0, but got int";
        assert_eq!(status(TYPE_ERROR, not_a_dtype).code, ErrorCode::InvalidArgument);
        assert_eq!(status(7, "the store is gone").code, ErrorCode::Distributed);
        assert_eq!(status(UNSUPPORTED, "no kernel").code, ErrorCode::Unsupported);
        let dtype_kernel = "\"addmm_impl_cpu_\" not implemented for 'Half'";
        assert_eq!(status(UNSUPPORTED, dtype_kernel).code, ErrorCode::DtypeMismatch);
        let backend = "Could not run 'aten::add.out' with arguments from the 'SparseCPU' backend.";
        assert_eq!(status(1, backend).code, ErrorCode::Unsupported);
        let e = status(1, "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
        assert_eq!(e.code, ErrorCode::ShapeMismatch);
        assert_eq!(e.message, "probe: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
        assert_eq!(status(1, "CUDA out of memory. Tried to allocate 2 GiB").code, ErrorCode::OutOfMemory);
        assert_eq!(status(1, "something else broke").code, ErrorCode::Torch);
        assert!(call("probe", |_, _| OK).is_ok());
    }
}
