//! Which files a config directory means, as envoyproxy/ratelimit's runtime (goruntime's
//! `filepath.Walk`) reads it: every file in it and in its subdirectories, whatever the
//! extension, in lexical depth-first order.
//!
//! As upstream, symlinks to files are read and symlinks to directories are not followed, so
//! a symlink loop cannot make the walk endless. Unlike upstream, names starting with `..`
//! (a Kubernetes ConfigMap volume's `..data` link and its `..<timestamp>` directory) are
//! always skipped: the volume's top-level links already point at those files, and reading
//! both loads every domain twice. Other dot-files are read unless asked not to (upstream's
//! `RUNTIME_IGNOREDOTFILES`). Files and directories visited are bounded.

use std::fs;
use std::path::{Path, PathBuf};

/// Why a directory could not be walked. Shown after the directory's name.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("cannot list directory: {0}")]
    List(std::io::Error),
    #[error("more than {max} files in this directory and its subdirectories")]
    TooManyFiles { max: usize },
    #[error("more than {max} subdirectories in this directory")]
    TooManyDirectories { max: usize },
}

/// Options of a walk.
#[derive(Debug, Clone, Copy)]
pub struct WalkOptions {
    /// Skip names starting with `.` (files and whole directories).
    pub ignore_dot_files: bool,
    /// Files returned, and also subdirectories entered, at most.
    pub max_entries: usize,
}

/// The files under `root`, in the order upstream loads them. An error on a subdirectory is
/// returned with that subdirectory's path.
pub fn files(root: &Path, options: WalkOptions) -> Result<Vec<PathBuf>, (PathBuf, WalkError)> {
    let mut files = Vec::new();
    let mut directories = 0usize;
    // Pending entries, the next one last: a depth-first walk without recursion.
    let mut pending = sorted_children(root, options).map_err(|e| (root.to_path_buf(), e))?;
    pending.reverse();
    while let Some((path, is_dir)) = pending.pop() {
        if is_dir {
            directories += 1;
            if directories > options.max_entries {
                return Err((
                    root.to_path_buf(),
                    WalkError::TooManyDirectories {
                        max: options.max_entries,
                    },
                ));
            }
            let mut children = sorted_children(&path, options).map_err(|e| (path.clone(), e))?;
            children.reverse();
            pending.extend(children);
        } else {
            if files.len() == options.max_entries {
                return Err((
                    root.to_path_buf(),
                    WalkError::TooManyFiles {
                        max: options.max_entries,
                    },
                ));
            }
            files.push(path);
        }
    }
    Ok(files)
}

/// The entries of one directory worth visiting, sorted by name, each with whether it is a
/// directory to enter (never through a symlink).
fn sorted_children(dir: &Path, options: WalkOptions) -> Result<Vec<(PathBuf, bool)>, WalkError> {
    let mut children = Vec::new();
    for entry in fs::read_dir(dir).map_err(WalkError::List)? {
        let entry = entry.map_err(WalkError::List)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("..") || (options.ignore_dot_files && name.starts_with('.')) {
            continue;
        }
        // `file_type` does not follow symlinks: a link is never entered as a directory.
        let is_dir = entry.file_type().map_err(WalkError::List)?.is_dir();
        let path = entry.path();
        // As upstream, a symlink to a directory is not read (nor followed).
        if !is_dir && fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        if children.len() > options.max_entries {
            return Err(WalkError::TooManyFiles {
                max: options.max_entries,
            });
        }
        children.push((path, is_dir));
    }
    children.sort();
    Ok(children)
}

#[cfg(test)]
mod tests;
