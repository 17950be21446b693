//! Checkpoint files: one safetensors file holding the model's state_dict,
//! optimizer and scheduler states, loop progress, callback states and
//! hyperparameters (tensors as tensors, the rest as JSON metadata), written
//! atomically so a crash never leaves a corrupt file where a good one was;
//! `torch.save` archives (`torch_save`), read and written without Python;
//! and Lightning's checkpoints (`lightning`), read and written as fulmen's;
//! where they are stored: local files or a checkpoint IO plugin (`io`);
//! and sharded checkpoint directories in `torch.distributed.checkpoint`'s
//! format (`dcp`).
pub(crate) mod dcp;
mod file;
pub mod file_kind;
pub mod io;
pub mod lightning;
pub(crate) mod numbers;
mod pickle_read;
mod pickle_write;
pub mod torch_save;
pub(crate) mod torch_zip;
pub(crate) use file::MAX_COUNTER;
pub use file::{
    checkpoint_weights, Checkpoint, CheckpointFormat, LoopInfo, FORMAT_VERSION, MAX_DATAMODULE_STATE,
    MAX_DATAMODULE_STATES,
};
