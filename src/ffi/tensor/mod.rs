//! Tensors from C (`fulmen/tensor.h`): handles and their scopes, creation,
//! queries, indexing, in-place updates, autograd.
pub mod autograd;
pub mod create;
pub mod handle;
pub mod index;
pub mod inplace;
pub mod query;
pub use handle::{fulmen_tensor, new_handle, TensorScope};
