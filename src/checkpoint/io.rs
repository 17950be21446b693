//! Where checkpoints go: local files by default, or a checkpoint IO plugin
//! (Lightning's `CheckpointIO`: the host saves, loads and removes the bytes
//! of each checkpoint), optionally saving on a background thread
//! (Lightning's `AsyncCheckpointIO`).
//!
//! With a plugin or the asynchronous mode, a checkpoint is serialized to
//! bytes on the loop's thread (so it holds the state of the moment it was
//! requested); only the plugin's save (or the local write) runs in the
//! background. The next save, a removal of the same path and the end of
//! the run wait for it, and its error is reported there.
use super::{Checkpoint, CheckpointFormat};
use crate::error::{Error, ErrorCode, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The largest checkpoint a checkpoint IO plugin may hand back (2^40
/// bytes, 1 TiB): a size above it is refused before anything is allocated.
// A plain literal: the C header copies it, where `1 << 40` would overflow.
pub const MAX_CHECKPOINT_IO_BYTES: u64 = 1099511627776;

/// A checkpoint store: Lightning's `CheckpointIO` (`save_checkpoint`,
/// `load_checkpoint`, `remove_checkpoint`) on a checkpoint's bytes.
pub trait CheckpointIo: Send + Sync {
    /// Stores `bytes` as the checkpoint `path`, replacing any there.
    fn save(&self, bytes: &[u8], path: &Path) -> Result<()>;
    /// The bytes of the checkpoint `path`.
    fn load(&self, path: &Path) -> Result<Vec<u8>>;
    /// Removes the checkpoint `path` (one that is not there is no error).
    fn remove(&self, path: &Path) -> Result<()>;
}

/// The default store: local files through the safe file layer (atomic
/// writes, regular files only).
pub struct LocalFiles;

impl CheckpointIo for LocalFiles {
    fn save(&self, bytes: &[u8], path: &Path) -> Result<()> {
        create_parent(path)?;
        crate::fs_safe::write_atomic(path, bytes)
    }

    fn load(&self, path: &Path) -> Result<Vec<u8>> {
        crate::fs_safe::read_regular(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        if super::dcp::is_sharded_dir(path) && !path.is_symlink() {
            return super::dcp::remove(path);
        }
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing old checkpoint {}: {e}", path.display()))),
        }
    }
}

/// Creates the folder of `path` when it has one.
fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// A save running in the background, and the path it writes.
struct Pending {
    path: PathBuf,
    thread: JoinHandle<Result<()>>,
}

/// How one run (or one `save_checkpoint` after a run) writes, reads and
/// removes checkpoints; it waits for its background save when dropped.
pub struct CheckpointWriter {
    /// The host's plugin; `None`: local files.
    io: Option<Arc<dyn CheckpointIo>>,
    /// Whether saves run on a background thread.
    asynchronous: bool,
    pending: Option<Pending>,
}

impl CheckpointWriter {
    /// A writer saving through `io` (local files when `None`), in the
    /// background when `asynchronous`.
    pub fn new(io: Option<Arc<dyn CheckpointIo>>, asynchronous: bool) -> Self {
        CheckpointWriter { io, asynchronous, pending: None }
    }

    /// Whether a checkpoint IO plugin stores the checkpoints.
    pub fn has_plugin(&self) -> bool {
        self.io.is_some()
    }

    /// The store saves go to.
    fn store(&self) -> Arc<dyn CheckpointIo> {
        match &self.io {
            Some(io) => Arc::clone(io),
            None => {
                let local: Arc<dyn CheckpointIo> = Arc::new(LocalFiles);
                local
            }
        }
    }

    /// Writes `ck` at `path` in `format`: first waits for the previous
    /// background save (its error is returned, and this save not made);
    /// then local files are written in place as before, and anything else
    /// is serialized here and saved by the store, in the background when
    /// asynchronous.
    pub fn save(&mut self, ck: &Checkpoint, path: &Path, format: CheckpointFormat, prefix: &str) -> Result<()> {
        self.wait()?;
        if self.io.is_none() && !self.asynchronous {
            create_parent(path)?;
            return ck.save_as(path, format, prefix);
        }
        let bytes = ck.to_bytes(format, prefix, path)?;
        let store = self.store();
        if !self.asynchronous {
            return store
                .save(&bytes, path)
                .map_err(|e| e.context(format!("checkpoint_io save of {}", path.display())));
        }
        let owned = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("fulmen-ckpt-save".into())
            .spawn(move || {
                store.save(&bytes, &owned).map_err(|e| e.context(format!("checkpoint_io save of {}", owned.display())))
            })
            .map_err(|e| Error::io(format!("starting the background checkpoint save of {}: {e}", path.display())))?;
        self.pending = Some(Pending { path: path.to_path_buf(), thread });
        Ok(())
    }

    /// Waits for the background save, if any: its error, saying it ran in
    /// the background.
    pub fn wait(&mut self) -> Result<()> {
        let Some(p) = self.pending.take() else { return Ok(()) };
        match p.thread.join() {
            Ok(result) => result.map_err(|e| e.context("the background checkpoint save failed")),
            Err(_) => Err(Error::new(
                ErrorCode::Panic,
                format!("the background checkpoint save of {} panicked", p.path.display()),
            )),
        }
    }

    /// Waits for the background save at the end of a run whose result is
    /// `result`: the run's own error stays first, a failed save attached.
    pub fn finish(&mut self, result: Result<()>) -> Result<()> {
        match (result, self.wait()) {
            (Ok(()), waited) => waited,
            (Err(e), Ok(())) => Err(e),
            (Err(e), Err(later)) => Err(e.then_failed("the background checkpoint save", &later)),
        }
    }

    /// Reads the checkpoint `path` (whole training state) through the store.
    pub fn load(&mut self, path: &Path) -> Result<Checkpoint> {
        self.load_local(path, None)
    }

    /// [`CheckpointWriter::load`]; a sharded checkpoint directory is read
    /// rank-locally with `local` ([`Checkpoint::load_local`]). A plugin's
    /// bytes are read whole.
    pub(crate) fn load_local(&mut self, path: &Path, local: Option<&super::dcp::LocalRows>) -> Result<Checkpoint> {
        self.wait()?;
        match &self.io {
            None => Checkpoint::load_local(path, local),
            Some(io) => {
                let bytes =
                    io.load(path).map_err(|e| e.context(format!("checkpoint_io load of {}", path.display())))?;
                Checkpoint::from_bytes(&bytes, path)
            }
        }
    }

    /// Reads only the weights of the checkpoint `path` through the store.
    pub fn load_weights(&mut self, path: &Path) -> Result<Checkpoint> {
        self.load_weights_local(path, None)
    }

    /// [`CheckpointWriter::load_weights`], read rank-locally with `local`
    /// as [`CheckpointWriter::load_local`] reads.
    pub(crate) fn load_weights_local(
        &mut self,
        path: &Path,
        local: Option<&super::dcp::LocalRows>,
    ) -> Result<Checkpoint> {
        self.wait()?;
        match &self.io {
            None => Checkpoint::load_weights_local(path, local),
            Some(io) => {
                let bytes =
                    io.load(path).map_err(|e| e.context(format!("checkpoint_io load of {}", path.display())))?;
                Checkpoint::weights_from_bytes(&bytes, path)
            }
        }
    }

    /// Removes the checkpoint `path` (ModelCheckpoint's older top-k files),
    /// after the background save when that save writes `path`.
    pub fn remove(&mut self, path: &Path) -> Result<()> {
        if self.pending.as_ref().is_some_and(|p| p.path == path) {
            self.wait()?;
        }
        match &self.io {
            None => LocalFiles.remove(path),
            Some(io) => io.remove(path).map_err(|e| e.context(format!("checkpoint_io remove of {}", path.display()))),
        }
    }
}

impl Drop for CheckpointWriter {
    fn drop(&mut self) {
        // Never leaves a thread using the plugin after its run.
        let _ = self.wait();
    }
}

#[cfg(test)]
#[path = "io_tests.rs"]
mod tests;
