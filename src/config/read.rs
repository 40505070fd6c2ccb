//! Reading a config file with bounds: a limits file is input like any other.
//!
//! A path named `*.yaml` may be anything: a symlink to `/dev/zero` (a file with no end), a
//! FIFO (an open that blocks until a writer comes, forever), a device, or simply a file far
//! larger than any real config. The loader runs on reloads too, where blocking or reading
//! without end would stall the reload task, hold memory, and keep the process from exiting.
//! So only regular files are read (checked on the opened descriptor, not the path, so a file
//! swapped between the check and the open cannot slip through), the open never blocks, and
//! the bytes read from one load are capped.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::capped_read::read_at_most;

/// YAML nesting accepted in a limits file: 32 levels are 15 levels of nested `descriptors`,
/// far beyond any real config. Parsing, locating an error and compiling all recurse once per
/// level, and a reload runs on a blocking thread of 2 MiB of stack: deeper input must be
/// refused by the parser, not overflow that stack and abort the process.
pub const MAX_YAML_DEPTH: usize = 32;

/// serde-saphyr's options for a limits file: its default budgets (events, nodes, aliases,
/// anchors, documents) with [`MAX_YAML_DEPTH`].
pub fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    let mut budget = options.budget.take().unwrap_or_default();
    budget.max_depth = MAX_YAML_DEPTH;
    options.budget = Some(budget);
    options
}

/// Bounds on one load of the limits config (a file, or every file of a directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Bytes read in one load, all files together.
    pub max_bytes: u64,
    /// Files in a config directory (every file counts, whatever its extension).
    pub max_files: usize,
}

impl ReadLimits {
    /// 16 MiB: 10,000 rules take about 1 MiB of YAML.
    pub const DEFAULT_MAX_BYTES: u64 = 16 * 1024 * 1024;
    pub const DEFAULT_MAX_FILES: usize = 1_000;
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            max_files: Self::DEFAULT_MAX_FILES,
        }
    }
}

/// Why a config file was not read. Shown after the file's name.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot read: not a regular file ({0}); a config file must be a plain file")]
    NotRegular(&'static str),
    #[error(
        "cannot read: larger than the {max} bytes left of the config size limit \
         (--max-config-bytes)"
    )]
    TooLarge { max: u64 },
    #[error("cannot read: not UTF-8 text")]
    NotUtf8,
}

/// The text of a regular file of at most `max_bytes` bytes.
pub fn read_text(path: &Path, max_bytes: u64) -> Result<String, ReadError> {
    // O_NONBLOCK: opening a FIFO must not wait for a writer. It changes nothing for a
    // regular file, the only kind read past the check below.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular(kind_name(&kind)));
    }
    read_capped(file, max_bytes)
}

fn read_capped(file: File, max_bytes: u64) -> Result<String, ReadError> {
    let bytes = read_at_most(file, max_bytes)?.ok_or(ReadError::TooLarge { max: max_bytes })?;
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)
}

fn kind_name(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a plain file"
    }
}

#[cfg(test)]
mod tests;
