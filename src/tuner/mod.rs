//! Lightning's Tuner: the learning-rate range test (`lr_find`).
mod lr_finder;

pub use lr_finder::{LrFindMode, LrFindOptions, LrFindResult};
