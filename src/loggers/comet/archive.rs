//! The offline experiment's metadata (`experiment.json`) and its archive:
//! a zip of `experiment.json` and `messages.json` at the archive's top, as
//! comet_ml's `OfflineExperiment` leaves it for `comet upload`.
use super::logger::{Mode, EXPERIMENT_FILE, MESSAGES_FILE};
use crate::checkpoint::torch_zip::ZipWriter;
use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::path::Path;

/// What `experiment.json` holds.
#[derive(Clone, Debug)]
pub struct ExperimentMeta {
    /// The experiment key (`offline_id`).
    pub key: String,
    pub project: Option<String>,
    pub workspace: Option<String>,
    /// Start time, milliseconds since the epoch.
    pub start_ms: i64,
    /// Stop time once the experiment ended (the start time before).
    pub stop_ms: Option<i64>,
    pub tags: Vec<String>,
    pub mode: Mode,
    /// Whether the key was given rather than made.
    pub key_given: bool,
}

impl ExperimentMeta {
    /// The metadata as comet_ml 3.58's `write_experiment_meta_file` writes
    /// it for an experiment from `comet_ml.start(online=False)`.
    pub fn to_json(&self) -> String {
        let opt = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        json!({
            "offline_id": self.key,
            "project_name": opt(&self.project),
            "workspace": opt(&self.workspace),
            "start_time": self.start_ms,
            "stop_time": self.stop_ms.unwrap_or(self.start_ms),
            "tags": self.tags,
            "resume_strategy": self.mode.text(),
            "customer_error_reported": false,
            "customer_error_message": Value::Null,
            "user_provided_experiment_key": self.key_given,
            "comet_start_sourced": true,
        })
        .to_string()
    }
}

/// Writes the archive at `archive` (atomically: a reader never sees half
/// of it) from `meta` and the messages file `messages`, whose `size` bytes
/// have CRC-32 `crc`, copied as it is read (a file of another length is an
/// error).
pub fn write_archive(archive: &Path, meta: &ExperimentMeta, messages: &Path, size: u64, crc: u32) -> Result<()> {
    let mut data = crate::fs_safe::open_regular(messages)
        .map_err(|e| Error::io(format!("reading {}: {e}", messages.display())))?;
    crate::fs_safe::write_atomic_with(archive, |f| {
        let mut zip = ZipWriter::new(std::io::BufWriter::new(f), "");
        zip.add(EXPERIMENT_FILE, meta.to_json().as_bytes())?;
        zip.add_from(MESSAGES_FILE, size, crc, &mut data)?;
        use std::io::Write;
        zip.finish()?.flush().map_err(|e| Error::io(format!("writing {}: {e}", archive.display())))
    })
}
