//! The error type of the Rust core: a stable numeric code and a message with
//! context. The C layer hands it out as `fulmen_error`.
use std::fmt;

/// Stable numeric error codes, shared by the Rust core and the C ABI.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// An argument had a value outside what the call accepts.
    InvalidArgument = 2,
    /// A handle was freed, of the wrong type, or never created by fulmen.
    InvalidHandle = 3,
    /// Tensor shapes do not fit together.
    ShapeMismatch = 4,
    /// A tensor has a dtype the call does not accept.
    DtypeMismatch = 5,
    /// libtorch reported an error.
    Torch = 6,
    /// Reading or writing a file failed.
    Io = 7,
    /// A host callback returned an error.
    Callback = 8,
    /// A panic was caught at the C boundary.
    Panic = 9,
    /// The feature is not supported by this build or device.
    Unsupported = 10,
    /// The requested device or backend is not available on this machine.
    Unavailable = 11,
    /// A loss or metric was NaN or infinite.
    NonFinite = 12,
    /// A file was truncated, corrupted, or does not match what it should hold.
    Format = 13,
    /// An index or count was out of range.
    OutOfRange = 14,
    /// The call is not valid in the object's current state.
    InvalidState = 15,
    /// Another rank failed, hung past the timeout, or disagreed (process
    /// group rendezvous, collectives, launched child processes).
    Distributed = 16,
    /// SIGINT or SIGTERM stopped a run (`on_exception` ran, the loggers
    /// were finalized).
    Interrupted = 17,
    /// An allocation failed: libtorch ran out of device or host memory
    /// (the batch size finder's signal to try a smaller batch; a host
    /// callback may return it too).
    OutOfMemory = 18,
}

impl ErrorCode {
    /// Every code, in numeric order.
    const ALL: [ErrorCode; 18] = {
        use ErrorCode::*;
        [
            NullArgument,
            InvalidArgument,
            InvalidHandle,
            ShapeMismatch,
            DtypeMismatch,
            Torch,
            Io,
            Callback,
            Panic,
            Unsupported,
            Unavailable,
            NonFinite,
            Format,
            OutOfRange,
            InvalidState,
            Distributed,
            Interrupted,
            OutOfMemory,
        ]
    };

    /// The code numbered `code`; `None` for values no code has.
    pub fn from_i32(code: i32) -> Option<ErrorCode> {
        Self::ALL.into_iter().find(|c| *c as i32 == code)
    }
}

/// An error from the fulmen core: a code plus a message that says which call,
/// which callback, which step or which shapes were involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The stable code.
    pub code: ErrorCode,
    /// Human-readable message with context.
    pub message: String,
}

/// Result type of the Rust core.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Makes an error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error { code, message: message.into() }
    }

    /// `InvalidArgument` error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// `ShapeMismatch` error.
    pub fn shape(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ShapeMismatch, message)
    }

    /// `DtypeMismatch` error.
    pub fn dtype(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::DtypeMismatch, message)
    }

    /// `Io` error.
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Io, message)
    }

    /// An `Unsupported` error.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Unsupported, message)
    }

    /// `Format` error (truncated or corrupted files).
    pub fn format(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Format, message)
    }

    /// `InvalidState` error.
    pub fn state(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidState, message)
    }

    /// `Distributed` error.
    pub fn distributed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Distributed, message)
    }

    /// Prefixes the message with context, keeping the code: `"ctx: message"`.
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.message = format!("{ctx}: {}", self.message);
        self
    }

    /// Attaches a failure that followed this one (a clean-up after it),
    /// keeping this error's code and message first:
    /// `"message; then <what> failed too: later"`.
    pub fn then_failed(mut self, what: &str, later: &Error) -> Self {
        self.message = format!("{}; then {what} failed too: {}", self.message, later.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message, self.code as i32)
    }
}

impl std::error::Error for Error {}

impl From<tch::TchError> for Error {
    fn from(e: tch::TchError) -> Self {
        // libtorch messages carry a C++ backtrace after the first lines; keep
        // the part a user needs.
        let text = e.to_string();
        let short: String = text
            .lines()
            .take_while(|l| !l.starts_with("Exception raised from") && !l.starts_with("frame #"))
            .collect::<Vec<_>>()
            .join("\n");
        let short = short.trim().to_string();
        Error::new(classify_torch_message(&short), short)
    }
}

/// Whether a libtorch message reports an allocation failure (as
/// Lightning's `is_oom_error`: a device "out of memory", or the CPU
/// allocator's "can't allocate memory"), a vendor's PrivateUse1 backend
/// naming itself ("NPU out of memory") included.
pub(crate) fn is_out_of_memory_message(msg: &str) -> bool {
    if msg.contains("DefaultCPUAllocator: can't allocate memory") {
        return true;
    }
    if !msg.contains("out of memory") {
        return false;
    }
    if ["CUDA", "HIP", "MPS", "XPU"].iter().any(|d| msg.contains(d)) {
        return true;
    }
    thread_local! {
        // Asking the backend's name goes through the shim, whose failure
        // is classified here again: asked once at a time.
        static ASKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if ASKING.with(|a| a.replace(true)) {
        return false;
    }
    let vendor = crate::tensor::device::DeviceType::PrivateUse1.name().to_lowercase();
    ASKING.with(|a| a.set(false));
    vendor != "privateuseone" && msg.to_lowercase().contains(&format!("{vendor} out of memory"))
}

/// What a kernel's dtype dispatch says of a dtype it lacks: "\"addmm_impl_cpu_\"
/// not implemented for 'Half'" (c10's NotImplementedError).
pub(crate) const DTYPE_KERNEL_MISSING: &str = "\" not implemented for '";

/// Whether a libtorch message is about a tensor's dtype, rather than about
/// another kind of type (c10's TypeError says both: "points must have a
/// floating point type", "expected Tensor as element 0 in argument 0, but
/// got int").
pub(crate) fn mentions_a_dtype(msg: &str) -> bool {
    const WORDS: [&str; 15] = [
        "dtype",
        "scalar type",
        "floating",
        "integer",
        "integral",
        "complex",
        "float",
        "half",
        "bfloat16",
        "'bool'",
        "'long'",
        "'int'",
        "int64",
        "int32",
        "uint8",
    ];
    let lower = msg.to_lowercase();
    classify_torch_message(msg) == ErrorCode::DtypeMismatch || WORDS.iter().any(|w| lower.contains(w))
}

/// The fulmen code of a libtorch error message: dtype, shape and range
/// problems keep their meaning, an operator without a kernel for the
/// tensors' backend is `Unsupported`; anything else is `Torch`.
pub(crate) fn classify_torch_message(msg: &str) -> ErrorCode {
    const DTYPE: [&str; 8] = [
        "expected scalar type",
        "can't be cast to the desired output type",
        "Expected object of scalar type",
        "must have the same dtype",
        "expected both inputs to have same dtype",
        DTYPE_KERNEL_MISSING,
        "not implemented for 'Long'",
        "not implemented for 'Int'",
    ];
    const SHAPE: [&str; 5] = [
        "shapes cannot be multiplied",
        "size mismatch",
        "must match the size",
        "Expected input batch_size",
        "expected input",
    ];
    const ARGUMENT: [&str; 3] = ["without overflow", "invalid size, possible overflow", "must be finite"];
    if is_out_of_memory_message(msg) {
        ErrorCode::OutOfMemory
    } else if msg.contains("Could not run '") && msg.contains("' backend") {
        // The dispatcher's NotImplementedError: "Could not run 'aten::…'
        // with arguments from the 'SparseCPU' backend."
        ErrorCode::Unsupported
    } else if ARGUMENT.iter().any(|p| msg.contains(p)) {
        ErrorCode::InvalidArgument
    } else if DTYPE.iter().any(|p| msg.contains(p)) || (msg.contains("dtype") && msg.contains("expected")) {
        ErrorCode::DtypeMismatch
    } else if msg.contains("Dimension out of range") || msg.contains("out of range") || msg.contains("out of bounds") {
        ErrorCode::OutOfRange
    } else if SHAPE.iter().any(|p| msg.contains(p)) {
        ErrorCode::ShapeMismatch
    } else {
        ErrorCode::Torch
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::io(e.to_string())
    }
}

/// Adds context to the error of a `Result`.
pub trait ResultExt<T> {
    /// Prefixes the error message with `ctx`.
    fn ctx(self, ctx: impl fmt::Display) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn ctx(self, ctx: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into().context(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind, Tensor};

    #[test]
    fn libtorch_not_implemented_errors_are_dtype_or_unsupported() {
        // "\"addmm_impl_cpu_\" not implemented for 'Bool'": a dtype problem.
        let b = Tensor::zeros([2, 2], (Kind::Bool, Device::Cpu));
        let e = Error::from(b.f_matmul(&b).unwrap_err());
        assert_eq!(e.code, ErrorCode::DtypeMismatch, "{}", e.message);
        // "Could not run 'aten::flip' with arguments from the 'SparseCPU'
        // backend": no kernel there.
        let sparse = Tensor::zeros([2, 2], (Kind::Float, Device::Cpu)).to_sparse_sparse_dim(2);
        let e = Error::from(sparse.f_flip([0]).unwrap_err());
        assert_eq!(e.code, ErrorCode::Unsupported, "{}", e.message);
        assert_eq!(classify_torch_message("something else broke"), ErrorCode::Torch);
        let cast = "result type Float can't be cast to the desired output type Long";
        assert_eq!(classify_torch_message(cast), ErrorCode::DtypeMismatch);
        assert!(mentions_a_dtype("points must have a floating point type"));
        assert!(mentions_a_dtype("unexpected dtype"));
        assert!(!mentions_a_dtype("expected Tensor as element 0 in argument 0, but got int"));
        assert!(!mentions_a_dtype("args must be a tuple"));
    }
}
