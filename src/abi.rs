//! The library's ABI identity: its version as one number, the SONAME that
//! carries its compatibility series, and the rule that says whether a
//! program compiled with one header may use this library.
//!
//! A series is the major version, or `0.MINOR` before 1.0 (semver's rule
//! for 0.x). Within a series the ABI only grows: functions, enum values and
//! vtable fields (versioned by `struct_size`) are appended, and option
//! structs, which carry no size, keep their layout (changing one starts a
//! new series). So a library serves every header of its series up to its
//! own version.
use crate::error::{Error, Result};

/// A version as one number: `MAJOR * 1_000_000 + MINOR * 1_000 + PATCH`.
pub type VersionNumber = u32;

/// This library's version as a [`VersionNumber`].
pub fn library_version() -> VersionNumber {
    let part = |s: &str| s.parse::<u32>().expect("Cargo gives numeric version parts");
    number(
        part(env!("CARGO_PKG_VERSION_MAJOR")),
        part(env!("CARGO_PKG_VERSION_MINOR")),
        part(env!("CARGO_PKG_VERSION_PATCH")),
    )
}

/// The number of `major.minor.patch` (each part below 1000, as the header's
/// `FULMEN_ABI_VERSION` arithmetic assumes).
pub fn number(major: u32, minor: u32, patch: u32) -> VersionNumber {
    major * 1_000_000 + minor * 1_000 + patch
}

/// The `(major, minor, patch)` of a [`VersionNumber`].
pub fn parts(version: VersionNumber) -> (u32, u32, u32) {
    (version / 1_000_000, version / 1_000 % 1_000, version % 1_000)
}

/// The compatibility series of a version: `(major, 0)` from 1.0 on,
/// `(0, minor)` before.
fn series(version: VersionNumber) -> (u32, u32) {
    match parts(version) {
        (0, minor, _) => (0, minor),
        (major, _, _) => (major, 0),
    }
}

/// The SONAME of the shared library of `version`: `libfulmen.so.MAJOR`, or
/// `libfulmen.so.0.MINOR` before 1.0.
pub fn soname(version: VersionNumber) -> String {
    match series(version) {
        (0, minor) => format!("libfulmen.so.0.{minor}"),
        (major, _) => format!("libfulmen.so.{major}"),
    }
}

fn dotted(version: VersionNumber) -> String {
    let (major, minor, patch) = parts(version);
    format!("{major}.{minor}.{patch}")
}

/// Whether a library of version `library` serves a program compiled with
/// the header of version `header`: the same series, and the library not
/// older than the header. Fails with `Unsupported`, saying which to load.
pub fn check_compatible(library: VersionNumber, header: VersionNumber) -> Result<()> {
    let (lib, head) = (dotted(library), dotted(header));
    if series(library) != series(header) {
        return Err(Error::unsupported(format!(
            "the libfulmen loaded is {lib} ({}), but this program was compiled with the fulmen.h of {head}, \
             which needs {}: the ABIs differ; rebuild the program against the header of the library it loads",
            soname(library),
            soname(header)
        )));
    }
    if library < header {
        return Err(Error::unsupported(format!(
            "the libfulmen loaded is {lib}, older than the fulmen.h of {head} this program was compiled with: \
             load libfulmen {head} or newer of the same series ({})",
            soname(header)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn numbers_and_sonames() {
        assert_eq!(number(0, 1, 0), 1_000);
        assert_eq!(parts(number(2, 13, 7)), (2, 13, 7));
        assert_eq!(soname(number(0, 1, 4)), "libfulmen.so.0.1");
        assert_eq!(soname(number(3, 2, 1)), "libfulmen.so.3");
        assert_eq!(dotted(library_version()), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn a_library_serves_older_headers_of_its_series_only() {
        let v = |a, b, c| number(a, b, c);
        check_compatible(v(0, 1, 3), v(0, 1, 0)).unwrap();
        check_compatible(v(1, 4, 0), v(1, 2, 9)).unwrap();
        check_compatible(v(1, 0, 0), v(1, 0, 0)).unwrap();
        for (lib, header, says) in [
            (v(0, 1, 0), v(0, 1, 1), "older than"),
            (v(1, 2, 0), v(1, 3, 0), "older than"),
            (v(0, 2, 0), v(0, 1, 0), "the ABIs differ"),
            (v(0, 1, 0), v(0, 2, 0), "the ABIs differ"),
            (v(2, 0, 0), v(1, 9, 0), "the ABIs differ"),
        ] {
            let err = check_compatible(lib, header).unwrap_err();
            assert_eq!(err.code, ErrorCode::Unsupported);
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    /// The header's version macros (fulmen/base.h), written by hand in cbindgen.toml, and
    /// fulmen.pc.in's version follow Cargo.toml's; every macro is FULMEN_.
    #[test]
    fn header_macros_follow_the_crate_version() {
        let include = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
        let header = std::fs::read_to_string(include.join("fulmen/base.h")).expect("reading fulmen/base.h");
        let (major, minor, patch) = parts(library_version());
        for line in [
            format!("#define FULMEN_VERSION_MAJOR {major}"),
            format!("#define FULMEN_VERSION_MINOR {minor}"),
            format!("#define FULMEN_VERSION_PATCH {patch}"),
            format!("#define FULMEN_VERSION_STRING \"{}\"", env!("CARGO_PKG_VERSION")),
            format!("#define FULMEN_SONAME \"{}\"", soname(library_version())),
        ] {
            assert!(header.lines().any(|l| l == line), "fulmen/base.h lacks `{line}`");
        }
        // Every macro of every header is in fulmen's namespace.
        let mut headers = vec![include.join("fulmen.h")];
        for entry in std::fs::read_dir(include.join("fulmen")).expect("reading include/fulmen") {
            let path = entry.expect("reading include/fulmen").path();
            if path.extension().is_some_and(|e| e == "h") {
                headers.push(path);
            }
        }
        for path in headers {
            let text = std::fs::read_to_string(&path).expect("reading a header");
            for line in text.lines().filter(|l| l.starts_with("#define ")) {
                let name = line.split_whitespace().nth(1).unwrap_or_default();
                assert!(name.starts_with("FULMEN_"), "{} defines {name} outside the FULMEN_ namespace", path.display());
            }
        }
        let pc = include_str!("../fulmen.pc.in");
        let line = format!("Version: {}", env!("CARGO_PKG_VERSION"));
        assert!(pc.lines().any(|l| l == line), "fulmen.pc.in lacks `{line}`");
    }
}
