//! The MLflow logger (Lightning's `MLFlowLogger`) on a tracking server's
//! REST API, over a small HTTP client of its own.
pub mod http;
mod logger;
mod rest;
pub use logger::{LogModel, MlflowLogger, SharedMlflowLogger};
