//! TorchScript and torch.export models, compiled steps (`fulmen/script.h`).
pub mod exported;
pub mod torchscript;
