//! Files on disk for the config module's unit tests (loading, walking and reading a
//! directory): a temporary directory and what the tests put in it, each panicking with the
//! path on failure.

use std::fs;
use std::path::{Path, PathBuf};

pub(super) fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"))
}

/// Write `text` to `dir/name`; returns the path.
pub(super) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// Create the directory `path` and its parents.
pub(super) fn mkdir(path: &Path) {
    fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
}

/// A symbolic link at `path` to `target`.
pub(super) fn symlink(target: impl AsRef<Path>, path: &Path) {
    std::os::unix::fs::symlink(target, path)
        .unwrap_or_else(|e| panic!("symlink {}: {e}", path.display()));
}
