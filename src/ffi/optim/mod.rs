//! Optimizers (`torch.optim`) and their parameter groups (`fulmen/optim.h`).
pub mod adaptive;
pub mod closure;
pub mod fused;
pub mod groups;
pub mod optimizers;
