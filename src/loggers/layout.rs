//! Where a file logger writes, as Lightning lays it out:
//! `save_dir/name/version_N` (`name` empty: `save_dir/version_N`), the
//! version a number (`version_N`), a folder name, or the next free number,
//! which Lightning's `_get_next_version` computes from the folders there.
use crate::error::{Error, Result, ResultExt};
use std::path::{Component, Path, PathBuf};

/// Lightning's default experiment name.
pub const DEFAULT_NAME: &str = "lightning_logs";

/// A logger's version (Lightning's `version: int | str | None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// The next free number, resolved when the folder is made (`None`).
    Next,
    /// `version_N`.
    Number(u64),
    /// A folder name used as it is.
    Name(String),
}

/// A logger's folder: `save_dir`, `name` and `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The save directory.
    pub save_dir: PathBuf,
    /// The experiment name; empty: versions directly in `save_dir`.
    pub name: String,
    /// The version.
    pub version: Version,
}

impl Layout {
    /// `save_dir/lightning_logs/<next version>`, Lightning's default.
    pub fn new(save_dir: &Path) -> Self {
        Layout { save_dir: save_dir.to_path_buf(), name: DEFAULT_NAME.to_string(), version: Version::Next }
    }

    /// The folder holding the versions: `save_dir/name`, or `save_dir`
    /// when the name is empty.
    pub fn root_dir(&self) -> PathBuf {
        if self.name.is_empty() {
            self.save_dir.clone()
        } else {
            self.save_dir.join(&self.name)
        }
    }

    /// Creates the version folder (the next free number for
    /// [`Version::Next`], made atomically so two loggers never share one;
    /// an existing folder is used for a given version, as in Lightning).
    /// Returns the folder and the version it resolved to.
    pub fn create(&self) -> Result<(PathBuf, Version)> {
        let root = self.root_dir();
        std::fs::create_dir_all(&root).ctx(format!("creating {}", root.display()))?;
        match &self.version {
            Version::Next => {
                let (dir, n) = create_next_version_dir(&root)?;
                Ok((dir, Version::Number(n)))
            }
            Version::Number(n) => {
                let dir = root.join(format!("version_{n}"));
                std::fs::create_dir_all(&dir).ctx(format!("creating {}", dir.display()))?;
                Ok((dir, self.version.clone()))
            }
            Version::Name(s) if s.is_empty() => Ok((root, self.version.clone())),
            Version::Name(s) => {
                let dir = root.join(s);
                std::fs::create_dir_all(&dir).ctx(format!("creating {}", dir.display()))?;
                Ok((dir, self.version.clone()))
            }
        }
    }
}

/// Checks an experiment name or version folder name: a relative path that
/// stays below the save directory (no absolute path, no `..`).
pub fn check_relative(what: &str, text: &str) -> Result<()> {
    let p = Path::new(text);
    let escapes = p.components().any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_)));
    if escapes {
        return Err(Error::invalid(format!(
            "{what} {text:?} must be a relative path below the save directory (no leading '/', no '..')"
        )));
    }
    Ok(())
}

/// The number Lightning reads from a folder name: `version_<digits>`,
/// the digits being what lies between the first and the second `_`
/// (`version_3_old` is version 3, as `name.split("_")[1]`); `None` for any
/// other name.
pub fn version_number(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("version_")?;
    let digits = rest.split('_').next().unwrap_or("");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Lightning's `_get_next_version`: one more than the largest version
/// number among the folders (symbolic links to folders included) in
/// `root`; 0 when there is none or `root` cannot be listed.
pub fn next_version(root: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(root) else { return 0 };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = version_number(e.file_name().to_str()?)?;
            std::fs::metadata(e.path()).ok().filter(|m| m.is_dir()).map(|_| n)
        })
        .max()
        .map_or(0, |n| n.saturating_add(1))
}

/// Creates `root/version_N` for the next free `N` ([`next_version`]); a
/// name taken meanwhile (by another process, or by a file) moves on to the
/// next number, so the folder is never shared.
pub fn create_next_version_dir(root: &Path) -> Result<(PathBuf, u64)> {
    let mut n = next_version(root);
    for _ in 0..10_000 {
        let dir = root.join(format!("version_{n}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((dir, n)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n = n.saturating_add(1),
            Err(e) => return Err(Error::io(format!("creating {}: {e}", dir.display()))),
        }
    }
    Err(Error::io(format!("creating a new version_N folder in {}: every candidate was taken", root.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::test_dirs::TempDir;

    #[test]
    fn version_numbers_as_lightning_reads_them() {
        assert_eq!(version_number("version_0"), Some(0));
        assert_eq!(version_number("version_12"), Some(12));
        assert_eq!(version_number("version_3_old"), Some(3));
        assert_eq!(version_number("version_07"), Some(7));
        assert_eq!(version_number("version_"), None);
        assert_eq!(version_number("version_x"), None);
        assert_eq!(version_number("version_+1"), None);
        assert_eq!(version_number("Version_1"), None);
        assert_eq!(version_number("run_1"), None);
    }

    #[test]
    fn next_version_counts_folders_only() {
        let d = TempDir::new("layout-next");
        assert_eq!(next_version(&d.join("missing")), 0);
        assert_eq!(next_version(&d), 0);
        std::fs::create_dir(d.join("version_3_old")).unwrap();
        std::fs::write(d.join("version_9"), b"a file").unwrap();
        std::fs::create_dir(d.join("version_x")).unwrap();
        assert_eq!(next_version(&d), 4);
        std::os::unix::fs::symlink(d.join("version_3_old"), d.join("version_5")).unwrap();
        assert_eq!(next_version(&d), 6);
        let (dir, n) = create_next_version_dir(&d).unwrap();
        assert_eq!((dir, n), (d.join("version_6"), 6));
        // A file holding the next name is skipped over.
        std::fs::write(d.join("version_7"), b"").unwrap();
        assert_eq!(create_next_version_dir(&d).unwrap().1, 8);
    }

    #[test]
    fn layouts() {
        let d = TempDir::new("layout-create");
        let mut l = Layout::new(&d);
        assert_eq!(l.create().unwrap(), (d.join("lightning_logs/version_0"), Version::Number(0)));
        assert_eq!(l.create().unwrap().0, d.join("lightning_logs/version_1"));
        l.name = String::new();
        assert_eq!(l.create().unwrap().0, d.join("version_0"));
        l.name = "exp/a".into();
        l.version = Version::Number(5);
        assert_eq!(l.create().unwrap().0, d.join("exp/a/version_5"));
        assert_eq!(l.create().unwrap().0, d.join("exp/a/version_5"), "a given version is reused");
        l.version = Version::Name("run-a".into());
        assert_eq!(l.create().unwrap().0, d.join("exp/a/run-a"));
        assert!(check_relative("name", "a/b").is_ok());
        assert_eq!(check_relative("name", "../x").unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(check_relative("version", "/abs").unwrap_err().code, ErrorCode::InvalidArgument);
        std::fs::write(d.join("blocker"), b"").unwrap();
        let bad = Layout::new(&d.join("blocker"));
        assert_eq!(bad.create().unwrap_err().code, ErrorCode::Io);
    }
}
