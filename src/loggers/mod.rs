//! Experiment loggers: CSV and TensorBoard files in Lightning's layout, and
//! host loggers (through the C API).
pub mod csv;
pub mod logger;
pub mod tensorboard;
pub mod yaml;
pub use csv::CsvLogger;
pub use logger::{next_version_dir, Logger};
pub use tensorboard::TensorBoardLogger;
