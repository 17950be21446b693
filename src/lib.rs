//! fulmen: Lightning-style training on libtorch, with a C ABI.
//!
//! The Rust core ([`trainer`], [`nn`], [`optim`], [`data`]) is usable on its
//! own; [`ffi`] is the C API over it (see `include/fulmen.h`).
#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod accelerators;
pub mod callbacks;
pub mod checkpoint;
pub mod data;
pub mod distributed;
pub mod error;
pub mod ffi;
pub mod fs_safe;
pub mod loggers;
pub mod metrics;
pub mod nn;
pub mod optim;
pub mod parse;
pub mod precision;
/// cbindgen:ignore
mod shim;
pub mod strategies;
pub mod tensor;
#[cfg(test)]
pub(crate) mod test_dirs;
mod thread_token;
pub mod trainer;
pub mod tuner;

pub use error::{Error, ErrorCode, Result};

/// Seeds libtorch's generators (CPU and, when present, CUDA), as
/// Lightning's `seed_everything`. fulmen's own data shuffling is seeded per
/// loader and does not depend on this.
pub fn seed_everything(seed: u64) {
    tch::manual_seed(seed as i64);
    if tch::Cuda::is_available() {
        tch::Cuda::manual_seed_all(seed);
    }
}
