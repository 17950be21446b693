//! The tensor part of the C API.
pub mod autograd;
pub mod create;
pub mod handle;
pub mod index;
pub mod loss;
pub mod math;
pub mod query;
pub mod reduce;
pub mod shape;
pub use handle::{fulmen_tensor, TensorScope};
