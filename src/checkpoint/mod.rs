//! Checkpoint files: one safetensors file holding the model's state_dict,
//! optimizer and scheduler states, loop progress, callback states and
//! hyperparameters (tensors as tensors, the rest as JSON metadata), written
//! atomically so a crash never leaves a corrupt file where a good one was.
mod file;
pub use file::{Checkpoint, FORMAT_VERSION};
