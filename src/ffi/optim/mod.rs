//! Optimizers (`torch.optim`) and their parameter groups (`fulmen/optim.h`).
//! `gen_options` is generated from `src/ffi/options_table.rs`.
pub mod adaptive;
pub mod closure;
pub mod fused;
#[rustfmt::skip]
pub mod gen_options;
pub mod groups;
pub mod host;
pub mod optimizers;
