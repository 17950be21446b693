//! Experiment loggers.
pub mod csv;
pub use csv::CsvLogger;
