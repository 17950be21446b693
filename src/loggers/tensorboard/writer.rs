//! An event file: `events.out.tfevents.<unix secs>.<hostname>.<pid>.<n>`,
//! a TFRecord stream of `tensorflow.Event`s opening with the file-version
//! event, as TensorBoard's `EventFileWriter` writes it.
use super::proto::{Event, EventWhat, Message, Summary};
use super::record::write_record;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The version string of the first event of every event file.
pub const FILE_VERSION: &str = "brain.Event:2";

/// How long buffered events may wait before reaching the OS, as torch's
/// `SummaryWriter(flush_secs=120)`.
const FLUSH_INTERVAL: Duration = Duration::from_secs(120);

/// Per-process file counter, the last part of the file name.
static FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Seconds since the Unix epoch, as a float (an event's `wall_time`).
pub fn wall_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The machine's host name, or `"localhost"` when it cannot be read.
pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..len]).replace('/', "_");
    if rc != 0 || name.is_empty() {
        "localhost".to_string()
    } else {
        name
    }
}

/// Writes events to one event file, buffered.
pub struct EventWriter {
    path: PathBuf,
    file: Option<BufWriter<File>>,
    last_flush: Instant,
}

impl EventWriter {
    /// Creates a new event file in `dir` and writes the file-version event.
    pub fn create(dir: &Path) -> Result<Self> {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let counter = FILE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("events.out.tfevents.{secs:010}.{}.{}.{counter}", hostname(), std::process::id());
        let path = dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(format!("creating {}: {e}", path.display())))?;
        let mut writer = EventWriter { path, file: Some(BufWriter::new(file)), last_flush: Instant::now() };
        writer.write_event(&Event {
            wall_time: wall_time(),
            step: 0,
            what: EventWhat::FileVersion(FILE_VERSION.to_string()),
        })?;
        writer.flush()?;
        Ok(writer)
    }

    /// The event file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event; hands buffered events to the OS when the last
    /// flush is more than two minutes old.
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        let path = &self.path;
        let file =
            self.file.as_mut().ok_or_else(|| Error::state(format!("event file {} is closed", path.display())))?;
        write_record(file, &event.encode()).map_err(|e| Error::io(format!("writing {}: {e}", path.display())))?;
        if self.last_flush.elapsed() >= FLUSH_INTERVAL {
            file.flush().map_err(|e| Error::io(format!("flushing {}: {e}", path.display())))?;
            self.last_flush = Instant::now();
        }
        Ok(())
    }

    /// Appends an event holding `summary` at `step`, stamped with the time now.
    pub fn write_summary(&mut self, summary: Summary, step: i64) -> Result<()> {
        self.write_event(&Event { wall_time: wall_time(), step, what: EventWhat::Summary(summary) })
    }

    /// Writes out buffered events and syncs the file to disk; a no-op once closed.
    pub fn flush(&mut self) -> Result<()> {
        let Some(file) = self.file.as_mut() else { return Ok(()) };
        let path = &self.path;
        file.flush().map_err(|e| Error::io(format!("flushing {}: {e}", path.display())))?;
        file.get_ref().sync_all().map_err(|e| Error::io(format!("syncing {}: {e}", path.display())))?;
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Flushes, syncs and closes the file; later writes are `InvalidState`
    /// errors, a second close is a no-op.
    pub fn close(&mut self) -> Result<()> {
        self.flush()?;
        self.file = None;
        Ok(())
    }

    /// Whether the file is still open.
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }
}
