//! Tensor operations: arithmetic, reductions, shapes, selection, activations
//! (`fulmen/tensor_ops.h`), all generated from `src/tensor/ops/table.rs`.
#[rustfmt::skip]
pub mod gen_activation;
#[rustfmt::skip]
pub mod gen_attention;
#[rustfmt::skip]
pub mod gen_math;
#[rustfmt::skip]
pub mod gen_reduce;
#[rustfmt::skip]
pub mod gen_select;
#[rustfmt::skip]
pub mod gen_shape;
