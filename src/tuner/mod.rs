//! Lightning's Tuner: the learning-rate range test (`lr_find`) and the
//! batch size finder (`scale_batch_size`).
mod batch_size;
mod lr_finder;

pub use batch_size::{is_out_of_memory, BatchSizeMode, BatchSizeOptions};
pub use lr_finder::{LrFindMode, LrFindOptions, LrFindResult};
