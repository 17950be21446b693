//! Files a run writes, created so that a run touches only what it created:
//! new files are made with `O_CREAT | O_EXCL | O_NOFOLLOW` (a planted file
//! or symlink is never followed or overwritten), and atomic replacements go
//! through a temporary file with a unique name next to the target, renamed
//! over it (a rename replaces a symlink itself, never its target).
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Opens a file that must not exist yet, for writing; a symlink or any
/// other entry at `path` is an error.
pub fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).mode(0o644).open(path)
}

/// Opens an existing regular file for appending, refusing a symlink.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().append(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// A temporary name next to `path`, unique to this process and call:
/// `<name>.<pid>-<n>.tmp`.
fn unique_tmp(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{}-{n}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Writes `bytes` to `path` atomically: a new uniquely named temporary file
/// (exclusive, no symlink followed), fsync, rename over `path`, and a
/// best-effort fsync of the folder. On error the temporary file is removed
/// and `path` is untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes).map_err(|e| Error::io(format!("writing {}: {e}", path.display()))))
}

/// [`write_atomic`] with the content written by `fill` into the temporary
/// file as it goes (nothing held whole in memory); an error from `fill`
/// leaves `path` untouched and is returned as it is.
pub fn write_atomic_with(path: &Path, fill: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
    let tmp = unique_tmp(path);
    let io = |e: std::io::Error| Error::io(format!("writing {}: {e}", path.display()));
    let mut f = create_new(&tmp).map_err(io)?;
    let result = fill(&mut f).and_then(|()| f.sync_all().map_err(io));
    drop(f);
    // Only our own file: `create_new` made it.
    if let Err(e) = result.and_then(|()| std::fs::rename(&tmp, path).map_err(io)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Creates a new folder `base/<prefix><n>` with the smallest free `n` at or
/// above the largest existing one plus one; a folder made meanwhile by
/// another process (or a planted entry) is skipped, never shared.
pub fn create_next_numbered_dir(base: &Path, prefix: &str) -> Result<PathBuf> {
    let mut next = std::fs::read_dir(base)
        .map_err(|e| Error::io(format!("listing {}: {e}", base.display())))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse::<u64>().ok())
        .max()
        .map_or(0, |v| v + 1);
    for _ in 0..10_000 {
        let dir = base.join(format!("{prefix}{next}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => next += 1,
            Err(e) => return Err(Error::io(format!("creating {}: {e}", dir.display()))),
        }
    }
    Err(Error::io(format!("creating a new {prefix}N folder in {}: every candidate was taken", base.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dirs::TempDir;

    #[test]
    fn atomic_write_replaces_a_planted_symlink_not_its_target() {
        let d = TempDir::new("fs-safe-symlink");
        let victim = d.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let target = d.join("last.ckpt");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        // A symlink planted where the old fixed temp name was.
        std::os::unix::fs::symlink(&victim, d.join("last.ckpt.tmp")).unwrap();
        write_atomic(&target, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert!(!std::fs::symlink_metadata(&target).unwrap().file_type().is_symlink());
        let leftovers: Vec<_> = d
            .read_dir()
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with("-0.tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn create_new_refuses_existing_entries_and_symlinks() {
        let d = TempDir::new("fs-safe-create");
        let victim = d.join("victim");
        std::fs::write(&victim, "x").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_new(&link).is_err());
        assert!(create_new(&victim).is_err());
        assert!(open_append(&link).is_err());
        assert!(create_new(&d.join("fresh")).is_ok());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "x");
    }

    #[test]
    fn numbered_dirs_are_never_shared() {
        let d = TempDir::new("fs-safe-numbered");
        std::fs::create_dir(d.join("version_0")).unwrap();
        // A planted symlink at the next name is skipped.
        std::os::unix::fs::symlink("/", d.join("version_1")).unwrap();
        let a = create_next_numbered_dir(&d, "version_").unwrap();
        assert_eq!(a, d.join("version_2"));
        let b = create_next_numbered_dir(&d, "version_").unwrap();
        assert_eq!(b, d.join("version_3"));
    }
}
