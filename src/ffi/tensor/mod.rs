//! Tensors from C (`fulmen/tensor.h`): handles and their scopes, creation,
//! queries, indexing, autograd, and the in-place updates generated from
//! `src/tensor/ops/table.rs`.
pub mod autograd;
pub mod create;
#[rustfmt::skip]
pub mod gen_inplace;
pub mod handle;
pub mod index;
pub mod query;
pub use handle::{fulmen_tensor, new_handle, TensorScope};
