//! Loss functions on tensors (`fulmen/losses.h`), generated from
//! `src/tensor/ops/table.rs`.
#[rustfmt::skip]
pub mod gen_loss;
