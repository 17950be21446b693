//! Temporary folders for tests. The tests of one process run in parallel
//! threads and other test processes (another suite, another clone) may run
//! at the same time, so a test never writes under a name another could
//! use: each folder's name holds the process id, the time and a counter.
//! `scripts/check-temp-paths.sh` (run by `make lint`) refuses other forms.
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A new, empty folder under the system temp dir, removed with everything
/// in it when dropped (also when the test panics).
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// Creates `<temp dir>/fulmen-<tag>-<pid>-<nanos>-<counter>`; `tag`
    /// only makes the folder easy to recognise.
    pub(crate) fn new(tag: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("fulmen-{tag}-{}-{nanos}-{n}", std::process::id()));
        // create_dir, not create_dir_all: a folder that is already there is
        // someone else's and is never shared.
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        TempDir(dir)
    }

    /// Makes the FIFO `name` in the folder; returns its path.
    pub(crate) fn fifo(&self, name: &str) -> PathBuf {
        let p = self.0.join(name);
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
        p
    }

    /// Writes `bytes` to the file `name` in the folder; returns its path.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p
    }
}

/// Runs `f(path)` on a thread and returns its result, or panics when it has
/// not returned after 10 s: a reader waiting on a FIFO fails the test
/// instead of hanging it.
pub(crate) fn within_10s<T: Send + 'static>(path: &Path, f: impl FnOnce(&Path) -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(f(&p));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("reading {} did not return", path.display()))
}

/// Checks that `load` refuses a FIFO made in `dir`, `/dev/zero` and `dir`
/// itself at once, with an IO error saying it is not a regular file.
pub(crate) fn assert_special_files_refused<T: 'static>(dir: &TempDir, load: fn(&Path) -> crate::error::Result<T>) {
    for path in [dir.fifo("fifo"), PathBuf::from("/dev/zero"), dir.to_path_buf()] {
        let e = within_10s(&path, move |p| load(p).map(|_| ())).unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::Io, "{}", e.message);
        assert!(e.message.contains("not a regular file"), "{}", e.message);
    }
}

impl Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::TempDir;
    use std::collections::HashSet;
    use std::path::PathBuf;
    use std::sync::Mutex;

    #[test]
    fn folders_made_at_once_by_many_threads_are_all_distinct_and_removed() {
        let made: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let dirs: Vec<TempDir> = (0..16).map(|_| TempDir::new("same-tag")).collect();
                    for d in &dirs {
                        assert!(d.is_dir());
                        assert_eq!(d.read_dir().unwrap().count(), 0, "{} is not empty", d.display());
                        d.write("f", b"x");
                    }
                    made.lock().unwrap().extend(dirs.iter().map(|d| d.to_path_buf()));
                });
            }
        });
        let all = made.into_inner().unwrap();
        let distinct: HashSet<&PathBuf> = all.iter().collect();
        assert_eq!(distinct.len(), 8 * 16);
        for p in &all {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            assert!(name.starts_with("fulmen-same-tag-"), "{name}");
            assert!(name.contains(&format!("-{}-", std::process::id())), "{name}");
            assert!(!p.exists(), "{} was left behind", p.display());
        }
    }

    #[test]
    fn write_puts_the_file_in_the_folder_and_drop_removes_both() {
        let dir = TempDir::new("write");
        let p = dir.write("a.bin", b"\x00\x01");
        assert_eq!(p, dir.join("a.bin"));
        assert_eq!(std::fs::read(&p).unwrap(), b"\x00\x01");
        let kept = dir.to_path_buf();
        drop(dir);
        assert!(!p.exists() && !kept.exists());
    }
}
