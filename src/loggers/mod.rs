//! Experiment loggers: CSV and TensorBoard files in Lightning's layout
//! (created by the trainer, or as handles a host loop logs to), MLflow
//! runs on a tracking server, W&B offline runs, and host loggers (through
//! the C API).
pub mod csv;
pub mod file_logger;
pub mod layout;
pub mod logger;
pub mod mlflow;
pub mod shared;
pub mod tensorboard;
pub mod wandb;
pub mod yaml;
pub use csv::CsvLogger;
pub use file_logger::{FileLogger, FileLoggerKind, SharedFileLogger};
pub use layout::{Layout, Version};
pub use logger::{next_version_dir, Logger};
pub use mlflow::{LogModel, MlflowLogger, SharedMlflowLogger};
pub use shared::{NamedLogger, SharedLogger};
pub use tensorboard::{Media, TensorBoardLogger};
pub use wandb::{SharedWandbLogger, WandbLogger};
