//! Experiment loggers: CSV and TensorBoard files in Lightning's layout
//! (created by the trainer, or as handles a host loop logs to), MLflow
//! runs on a tracking server, W&B offline runs, Comet offline experiments,
//! and host loggers (through the C API).
pub mod comet;
pub mod csv;
pub mod file_logger;
pub mod layout;
pub mod logger;
pub mod mlflow;
pub mod shared;
pub mod tensorboard;
pub mod wandb;
pub mod yaml;
pub use comet::{CometLogger, SharedCometLogger};
pub use csv::CsvLogger;
pub use file_logger::{FileLogger, FileLoggerKind, SharedFileLogger};
pub use layout::{Layout, Version};
pub use logger::{next_version_dir, Logger, RunStatus};
pub use mlflow::{LogModel, MlflowLogger, SharedMlflowLogger};
pub use shared::{NamedLogger, SharedLogger};
pub use tensorboard::{Media, TensorBoardLogger};
pub use wandb::{SharedWandbLogger, WandbLogger};

/// `n` characters of `alphabet`, from the process's random hash keys and
/// the clock (torch's generator untouched): the ids of W&B runs and Comet
/// experiments.
pub(crate) fn random_text(n: usize, alphabet: &[u8]) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::time::{SystemTime, UNIX_EPOCH};
    let mut out = String::with_capacity(n);
    while out.len() < n {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos());
        h.write_u32(std::process::id());
        h.write_usize(out.len());
        let mut bits = h.finish();
        for _ in 0..8 {
            if out.len() == n {
                break;
            }
            out.push(alphabet[(bits % alphabet.len() as u64) as usize] as char);
            bits /= alphabet.len() as u64;
        }
    }
    out
}
