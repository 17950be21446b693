//! Lightning's `CometLogger` in Comet's offline mode: experiments written
//! as the archives `comet upload` sends.
pub mod archive;
pub mod logger;
pub mod messages;

#[cfg(test)]
mod tests;

pub use logger::{CometLogger, SharedCometLogger};
