//! Tensor helpers of the core: dtypes and devices as fulmen names them.
pub mod deferred;
pub mod device;
pub mod dtype;
pub mod functional;
pub mod grad;
pub mod graph;
pub mod inplace;
pub mod ops;
pub mod pinned;
pub mod runtime;
pub mod scaled;
pub mod tch_panic;
pub use device::DeviceSpec;
pub use dtype::DType;
pub use runtime::set_deterministic;
