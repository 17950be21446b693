//! Resolving `ckpt_path`: a file, "last" or "best".
use super::Trainer;
use crate::callbacks::model_checkpoint::EXTENSION;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Checkpoint files in `dir` whose name starts with `prefix`.
fn checkpoints_in(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(prefix) && n.ends_with(EXTENSION))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn newest(paths: Vec<PathBuf>) -> Option<PathBuf> {
    paths.into_iter().max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

impl Trainer {
    /// Folders where this trainer's checkpoints may be: explicit
    /// ModelCheckpoint folders and every `lightning_logs/version_*/checkpoints`.
    fn checkpoint_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .callbacks
            .iter()
            .chain(self.defaults.iter())
            .filter_map(|c| c.as_any().and_then(|a| a.downcast_ref::<crate::callbacks::ModelCheckpoint>()))
            .filter_map(|m| m.options().dirpath.clone())
            .collect();
        let logs = self.opts.default_root_dir.join("lightning_logs");
        if let Ok(entries) = std::fs::read_dir(&logs) {
            dirs.extend(entries.filter_map(|e| e.ok()).map(|e| e.path().join("checkpoints")).filter(|p| p.is_dir()));
        }
        dirs.push(self.opts.default_root_dir.join("checkpoints"));
        dirs
    }

    /// The file `ckpt_path` names: "best" (this trainer's best checkpoint),
    /// "last" (the newest local `last*.ckpt`, else the newest checkpoint),
    /// or a path (a file or a sharded checkpoint directory; checked here
    /// unless a checkpoint IO plugin stores them).
    pub(crate) fn resolve_ckpt_path(&self, ckpt_path: &str) -> Result<PathBuf> {
        match ckpt_path {
            "best" => {
                let best = self.checkpoint_callback().map(|c| c.best_model_path.clone()).unwrap_or_default();
                if best.is_empty() {
                    return Err(Error::state(
                        "ckpt_path=\"best\": no best checkpoint yet (run fit with a ModelCheckpoint first)",
                    ));
                }
                Ok(PathBuf::from(best))
            }
            "last" => {
                let dirs = self.checkpoint_dirs();
                let last: Vec<PathBuf> = dirs.iter().flat_map(|d| checkpoints_in(d, "last")).collect();
                let found = if last.is_empty() {
                    newest(dirs.iter().flat_map(|d| checkpoints_in(d, "")).collect())
                } else {
                    newest(last)
                };
                found.ok_or_else(|| {
                    Error::state(format!(
                        "ckpt_path=\"last\": no checkpoint found in {:?}",
                        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>()
                    ))
                })
            }
            // The checkpoint IO plugin says whether it has the file.
            path if self.checkpoint_io.is_some() => Ok(PathBuf::from(path)),
            path => {
                let p = PathBuf::from(path);
                if crate::checkpoint::dcp::is_sharded_dir(&p) {
                    return Ok(p);
                }
                match crate::fs_safe::regular_metadata(&p) {
                    Ok(_) => Ok(p),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err(Error::io(format!("checkpoint {path} does not exist")))
                    }
                    Err(e) => Err(Error::io(format!("checkpoint {path}: {e}"))),
                }
            }
        }
    }
}
