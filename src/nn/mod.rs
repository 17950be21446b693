//! Neural-network modules: a tree of layers named as in `torch.nn`, state
//! dicts, safetensors I/O and TorchScript loading.
pub mod init;
pub mod layers;
mod module;
mod safetensors_io;
mod state_dict;
mod torchscript;

#[cfg(test)]
mod tests;

pub use layers::conv::ConvConfig;
pub use layers::conv_transpose::ConvTransposeConfig;
pub use layers::rnn::{RnnConfig, RnnKind};
pub use layers::transformer::TransformerConfig;
pub use layers::Activation;
pub use module::Module;
pub use safetensors_io::{read_safetensors, write_safetensors, MAX_HEADER_BYTES};
pub use state_dict::LoadReport;
