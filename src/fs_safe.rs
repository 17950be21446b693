//! Files a run writes, created so that a run touches only what it created:
//! new files are made with `O_CREAT | O_EXCL | O_NOFOLLOW` (a planted file
//! or symlink is never followed or overwritten), and atomic replacements go
//! through a temporary file with a unique name next to the target, renamed
//! over it (a rename replaces a symlink itself, never its target).
//!
//! Files a run reads (models, checkpoints, weights, TorchScript, data) are
//! opened with [`open_regular`]: only a regular file is read, and never past
//! the size it had when opened.
use crate::error::{Error, ErrorCode, Result};
use std::fs::{File, FileType, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
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

/// A regular file opened to be read (see [`open_regular`]): reads give at
/// most the size it had when opened, and a file found longer or shorter
/// than that is an error, never an unbounded read.
#[derive(Debug)]
pub struct RegularFile {
    file: File,
    size: u64,
    left: u64,
}

impl RegularFile {
    /// The size the file had when it was opened: all that reads give.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The open file (its descriptor, for a reader that takes one).
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Read for RegularFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // The size checked is read: the file must end here.
            let mut probe = [0u8; 1];
            return match self.file.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    Err(std::io::Error::other(format!("the file grew past the {} bytes it had when opened", self.size)))
                }
            };
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file shrank below the {} bytes it had when opened", self.size),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// What an entry that is not a regular file is, in words.
fn kind_of(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

fn not_regular(t: FileType) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("not a regular file (it is {})", kind_of(t)))
}

/// The metadata of `path` (symlinks followed) when it is a regular file;
/// anything else (a device, a FIFO, a socket, a directory) is an
/// `InvalidInput` error saying what it is. A check before reading: the
/// read itself goes through [`open_regular`], which checks again.
pub fn regular_metadata(path: &Path) -> std::io::Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path)?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    Ok(meta)
}

/// Opens `path` (symlinks followed) to read a model, checkpoint, weights,
/// TorchScript or data file. Anything but a regular file (a device, a
/// FIFO, a socket, a directory) is refused before it is opened, and again
/// by the opened file's own metadata, so a path swapped in between is
/// refused too; the open never waits on a FIFO (`O_NONBLOCK`, cleared once
/// the file is known to be regular) and never takes a terminal as the
/// controlling one.
pub fn open_regular(path: &Path) -> std::io::Result<RegularFile> {
    regular_metadata(path)?;
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    blocking(&file)?;
    Ok(RegularFile { file, size: meta.len(), left: meta.len() })
}

/// Clears `O_NONBLOCK`, set only so that opening never waits.
fn blocking(file: &File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns, alive for the call.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the whole regular file at `path` (see [`open_regular`]) into one
/// buffer of the size it had when opened. Errors: `Io` naming the path
/// (not a regular file, unreadable, changed size while read),
/// `OutOfMemory` when that size cannot be allocated.
pub fn read_regular(path: &Path) -> Result<Vec<u8>> {
    let io = |e: std::io::Error| Error::io(format!("reading {}: {e}", path.display()));
    let mut file = open_regular(path).map_err(io)?;
    let size = usize::try_from(file.size())
        .map_err(|_| Error::io(format!("reading {}: {} bytes do not fit in memory", path.display(), file.size())))?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(size).map_err(|_| {
        Error::new(ErrorCode::OutOfMemory, format!("reading {}: {size} bytes cannot be allocated", path.display()))
    })?;
    file.read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
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

/// Makes `link` a symlink to `target` (by file name when both share a
/// folder, else by absolute path), replacing the file or symlink at
/// `link` without following it: the symlink is made under a unique
/// temporary name and renamed over `link` (a folder there is an error).
/// Where the filesystem refuses symlinks, `link` becomes an atomic copy of
/// `target` instead (Lightning's `_link_checkpoint`).
pub fn replace_with_link(target: &Path, link: &Path) -> Result<()> {
    let io = |e: std::io::Error| Error::io(format!("linking {} to {}: {e}", link.display(), target.display()));
    let tmp = unique_tmp(link);
    match std::os::unix::fs::symlink(link_text(target, link).map_err(io)?, &tmp) {
        Ok(()) => std::fs::rename(&tmp, link).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        }),
        Err(e) if refuses_symlinks(&e) => copy_atomic(target, link),
        Err(e) => Err(io(e)),
    }
}

/// What a symlink at `link` holds to reach `target`: its file name when
/// both are in the same folder, else its absolute path.
fn link_text(target: &Path, link: &Path) -> std::io::Result<PathBuf> {
    let folder = |p: &Path| p.parent().filter(|d| !d.as_os_str().is_empty()).map(Path::to_path_buf);
    match (folder(target), folder(link), target.file_name()) {
        (a, b, Some(name)) if a == b => Ok(PathBuf::from(name)),
        _ if target.is_absolute() => Ok(target.to_path_buf()),
        _ => Ok(std::env::current_dir()?.join(target)),
    }
}

/// Whether a symlink error says the filesystem does not make symlinks.
fn refuses_symlinks(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS))
}

/// Replaces `to` atomically (see [`write_atomic_with`]) with a copy of the
/// regular file `from`.
pub fn copy_atomic(from: &Path, to: &Path) -> Result<()> {
    let mut src = open_regular(from).map_err(|e| Error::io(format!("reading {}: {e}", from.display())))?;
    write_atomic_with(to, |f| {
        std::io::copy(&mut src, f)
            .map(|_| ())
            .map_err(|e| Error::io(format!("copying {} to {}: {e}", from.display(), to.display())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dirs::TempDir;

    #[test]
    fn links_replace_a_planted_symlink_not_its_target() {
        let d = TempDir::new("fs-safe-link");
        let victim = d.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let ckpt = d.join("epoch=0-step=2.ckpt");
        std::fs::write(&ckpt, "weights").unwrap();
        let last = d.join("last.ckpt");
        std::os::unix::fs::symlink(&victim, &last).unwrap();
        replace_with_link(&ckpt, &last).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_link(&last).unwrap(), PathBuf::from("epoch=0-step=2.ckpt"));
        assert_eq!(std::fs::read_to_string(&last).unwrap(), "weights");
        // A regular file there is replaced too; a folder is an error.
        std::fs::remove_file(&last).unwrap();
        std::fs::write(&last, "old").unwrap();
        replace_with_link(&ckpt, &last).unwrap();
        assert!(std::fs::symlink_metadata(&last).unwrap().file_type().is_symlink());
        let folder = d.join("folder.ckpt");
        std::fs::create_dir(&folder).unwrap();
        let e = replace_with_link(&ckpt, &folder).unwrap_err();
        assert_eq!(e.code, ErrorCode::Io);
        assert!(folder.is_dir());
    }

    #[test]
    fn the_copy_fallback_writes_a_regular_file() {
        let d = TempDir::new("fs-safe-copy");
        let ckpt = d.join("a.ckpt");
        std::fs::write(&ckpt, "weights").unwrap();
        let last = d.join("last.ckpt");
        std::os::unix::fs::symlink(d.join("victim"), &last).unwrap();
        copy_atomic(&ckpt, &last).unwrap();
        assert!(!d.join("victim").exists());
        assert_eq!(std::fs::read_to_string(&last).unwrap(), "weights");
        assert!(refuses_symlinks(&std::io::Error::from_raw_os_error(libc::EPERM)));
        assert!(!refuses_symlinks(&std::io::Error::from_raw_os_error(libc::ENOENT)));
        assert_eq!(copy_atomic(&d.join("missing"), &last).unwrap_err().code, ErrorCode::Io);
    }

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

    /// `read_regular(path)` run on a thread (`within_10s`).
    fn read_bounded(path: &Path) -> Result<Vec<u8>> {
        crate::test_dirs::within_10s(path, read_regular)
    }

    #[test]
    fn only_regular_files_are_read() {
        let d = TempDir::new("fs-safe-regular");
        let file = d.join("weights.bin");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(read_bounded(&file).unwrap(), b"abc");
        let empty = d.join("empty.bin");
        std::fs::write(&empty, b"").unwrap();
        assert!(read_bounded(&empty).unwrap().is_empty());
        // A symlink is followed to a regular file.
        let link = d.join("link.bin");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_bounded(&link).unwrap(), b"abc");
        let fifo = d.fifo("fifo.pt");
        let fifo_link = d.join("fifo-link.pt");
        std::os::unix::fs::symlink(&fifo, &fifo_link).unwrap();
        let socket = d.join("socket.pt");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let cases = [
            (fifo.clone(), "a FIFO"),
            (fifo_link, "a FIFO"),
            (socket, "a socket"),
            (PathBuf::from("/dev/zero"), "a character device"),
            (d.to_path_buf(), "a directory"),
        ];
        for (path, kind) in cases {
            let e = read_bounded(&path).unwrap_err();
            assert_eq!(e.code, ErrorCode::Io, "{}", e.message);
            assert!(
                e.message.contains(&path.display().to_string())
                    && e.message.contains("not a regular file")
                    && e.message.contains(kind),
                "{}",
                e.message
            );
        }
        // open_regular itself refuses them, never waiting on the FIFO.
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn reads_stop_at_the_size_checked() {
        let d = TempDir::new("fs-safe-size");
        let path = d.join("data.csv");
        std::fs::write(&path, b"1,2\n").unwrap();
        // A file that grows while it is read: an error, not more bytes.
        let mut f = open_regular(&path).unwrap();
        assert_eq!(f.size(), 4);
        open_append(&path).unwrap().write_all(b"3,4\n").unwrap();
        let mut got = Vec::new();
        let e = f.read_to_end(&mut got).unwrap_err();
        assert!(e.to_string().contains("grew past the 4 bytes"), "{e}");
        assert_eq!(got, b"1,2\n");
        // One that shrinks: an error too.
        let mut f = open_regular(&path).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(2).unwrap();
        let e = f.read_to_end(&mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("shrank below the 8 bytes"), "{e}");
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
