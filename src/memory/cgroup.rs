//! The memory limit of the container this process runs in, read from its control group.
//!
//! Kubernetes and Docker put a container's `resources.limits.memory` on its cgroup; past it the
//! kernel's OOM killer ends the process. The process learns the limit from the files the
//! kernel exposes:
//!
//! - `/proc/self/cgroup` names the process's group: `0::/path` under cgroup v2, and
//!   `N:memory:/path` (among other controllers) under cgroup v1;
//! - `/proc/self/mountinfo` says where each hierarchy is mounted and which of its groups the
//!   mount shows as its root (a container usually sees its own group as `/`);
//! - the limit is `memory.max` under v2 (`max`: none) or `memory.limit_in_bytes` under v1 (a
//!   huge number: none), in the group's directory and in each parent up to the mount point:
//!   a parent's limit binds its children, so the tightest one is the limit.
//!
//! Every read is bounded and every parse checked: an unexpected file is a [`CgroupError`], never
//! a panic, and the caller treats the limit as unknown.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::capped_read::read_at_most;

/// Where the kernel says which groups this process belongs to.
const PROC_CGROUP: &str = "/proc/self/cgroup";
/// Where the kernel lists this process's mounts.
const MOUNTINFO: &str = "/proc/self/mountinfo";
/// A process belongs to a few dozen groups at most: its file is a few hundred bytes.
const MAX_PROC_CGROUP_BYTES: u64 = 64 << 10;
/// A node with many volumes has a few thousand mounts of ~150 bytes each.
const MAX_MOUNTINFO_BYTES: u64 = 4 << 20;
/// A limit file holds one number.
const MAX_LIMIT_FILE_BYTES: u64 = 64;
/// cgroup v1 writes "no limit" as the largest page-aligned count (9223372036854771712 with
/// 4 KiB pages); anything from 2^62 bytes up is no limit a machine could have.
const V1_UNLIMITED: u64 = 1 << 62;
/// Groups nest a handful of levels deep; this only stops a malformed path from walking far.
const MAX_DEPTH: usize = 64;

/// Which cgroup version gave the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The tightest memory limit of this process's group and its parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimit {
    pub bytes: u64,
    pub version: Version,
}

/// Why the limit could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is larger than {max} bytes", path.display())]
    TooLarge { path: PathBuf, max: u64 },
    #[error("{}: unexpected content {text:?}", path.display())]
    Parse { path: PathBuf, text: String },
}

/// Reads a file of at most `max` bytes: `None` when it does not exist.
pub type ReadFile<'a> = &'a dyn Fn(&Path, u64) -> Result<Option<String>, CgroupError>;

/// The limit of this process's container: `None` when there is none (or no cgroup at all).
pub fn container_limit() -> Result<Option<CgroupLimit>, CgroupError> {
    limit_from(&read_bounded)
}

/// The file at `path`, refused past `max` bytes.
fn read_bounded(path: &Path, max: u64) -> Result<Option<String>, CgroupError> {
    let read_error = |source| CgroupError::Read {
        path: path.to_owned(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
    };
    let bytes = read_at_most(file, max)
        .map_err(read_error)?
        .ok_or_else(|| CgroupError::TooLarge {
            path: path.to_owned(),
            max,
        })?;
    String::from_utf8(bytes).map(Some).map_err(|_| {
        // The error `read_to_string` gave, in its words.
        let source = io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        );
        read_error(source)
    })
}

/// The limit, with every file read through `read`.
pub fn limit_from(read: ReadFile<'_>) -> Result<Option<CgroupLimit>, CgroupError> {
    let Some(text) = read(Path::new(PROC_CGROUP), MAX_PROC_CGROUP_BYTES)? else {
        return Ok(None);
    };
    let groups = parse_proc_cgroup(&text).ok_or_else(|| CgroupError::Parse {
        path: PROC_CGROUP.into(),
        text: first_line(&text),
    })?;
    // Without the mount table the usual mount points are assumed (and the whole hierarchy
    // visible): a wrong guess finds no file, so no limit, never a wrong one.
    let mounts = match read(Path::new(MOUNTINFO), MAX_MOUNTINFO_BYTES) {
        Ok(Some(text)) => parse_mountinfo(&text),
        Ok(None) | Err(_) => Vec::new(),
    };
    let known = !mounts.is_empty();
    let mut tightest: Option<CgroupLimit> = None;
    let mut consider = |bytes: Option<u64>, version| {
        if let Some(bytes) = bytes
            && tightest.is_none_or(|t| bytes < t.bytes)
        {
            tightest = Some(CgroupLimit { bytes, version });
        }
    };
    if let Some(group) = groups.iter().find(|g| g.is_v2()) {
        let mount = mounts.iter().find(|m| m.fs_type == "cgroup2");
        let fallback = Mount::fallback("/sys/fs/cgroup");
        if let Some(mount) = mount.or((!known).then_some(&fallback)) {
            let dir = mount.group_dir(&group.path);
            consider(
                walk_up(read, &dir, mount, "memory.max", parse_v2)?,
                Version::V2,
            );
        }
    }
    if let Some(group) = groups.iter().find(|g| g.has_controller("memory")) {
        let mount = mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.options.split(',').any(|o| o == "memory"));
        let fallback = Mount::fallback("/sys/fs/cgroup/memory");
        if let Some(mount) = mount.or((!known).then_some(&fallback)) {
            let dir = mount.group_dir(&group.path);
            let limit = walk_up(read, &dir, mount, "memory.limit_in_bytes", parse_v1)?;
            consider(limit, Version::V1);
        }
    }
    Ok(tightest)
}

/// The tightest limit in `file` of `dir` and each parent up to the mount point.
fn walk_up(
    read: ReadFile<'_>,
    dir: &Path,
    mount: &Mount,
    file: &str,
    parse: fn(&str) -> Option<Option<u64>>,
) -> Result<Option<u64>, CgroupError> {
    let mut tightest: Option<u64> = None;
    for dir in dir.ancestors().take(MAX_DEPTH) {
        let path = dir.join(file);
        if let Some(text) = read(&path, MAX_LIMIT_FILE_BYTES)? {
            let limit = parse(&text).ok_or_else(|| CgroupError::Parse {
                path: path.clone(),
                text: first_line(&text),
            })?;
            tightest = match (tightest, limit) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if dir == mount.point {
            break;
        }
    }
    Ok(tightest)
}

/// The start of an unexpected file, for an error message.
fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").chars().take(80).collect()
}

/// One line of `/proc/self/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, PartialEq, Eq)]
pub struct Membership {
    pub hierarchy: String,
    pub controllers: String,
    pub path: String,
}

impl Membership {
    /// The unified (v2) hierarchy: id 0, no controllers listed.
    fn is_v2(&self) -> bool {
        self.hierarchy == "0" && self.controllers.is_empty()
    }

    fn has_controller(&self, name: &str) -> bool {
        self.controllers.split(',').any(|c| c == name)
    }
}

/// The lines of `/proc/self/cgroup`; `None` if one is not `id:controllers:/path`.
pub fn parse_proc_cgroup(text: &str) -> Option<Vec<Membership>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (hierarchy, rest) = line.split_once(':')?;
            // The path may itself hold ':'; the controllers never do.
            let (controllers, path) = rest.split_once(':')?;
            path.starts_with('/').then(|| Membership {
                hierarchy: hierarchy.to_owned(),
                controllers: controllers.to_owned(),
                path: path.to_owned(),
            })
        })
        .collect()
}

/// A cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, PartialEq, Eq)]
pub struct Mount {
    /// The group the mount shows at its mount point (`/` unless the mount is of a subtree).
    pub root: String,
    pub point: PathBuf,
    pub fs_type: String,
    /// The super-block options: a v1 hierarchy's controllers (`rw,memory`).
    pub options: String,
}

impl Mount {
    fn fallback(point: &str) -> Self {
        Self {
            root: "/".to_owned(),
            point: point.into(),
            fs_type: String::new(),
            options: String::new(),
        }
    }

    /// The directory of `group` (a path as `/proc/self/cgroup` writes it) under this mount.
    /// A group outside the mount's root, or a path with `..` (a group seen from another
    /// cgroup namespace), is looked for at the mount point itself.
    fn group_dir(&self, group: &str) -> PathBuf {
        let relative = Path::new(group)
            .strip_prefix(&self.root)
            .ok()
            .filter(|rel| rel.components().all(|c| matches!(c, Component::Normal(_))));
        match relative {
            Some(rel) => self.point.join(rel),
            None => self.point.clone(),
        }
    }
}

/// The cgroup mounts (v1 and v2) in `/proc/self/mountinfo`; lines that do not parse are
/// skipped (they are other mounts, or the kernel added fields this reader does not know).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            // id parent major:minor root mount-point options [optional...] - type source super
            let (before, after) = line.split_once(" - ")?;
            let mut before = before.split(' ').skip(3);
            let (root, point) = (before.next()?, before.next()?);
            let mut after = after.split(' ');
            let fs_type = after.next()?;
            let _source = after.next()?;
            let options = after.next().unwrap_or("");
            if !matches!(fs_type, "cgroup" | "cgroup2") {
                return None;
            }
            Some(Mount {
                root: unescape(root),
                point: PathBuf::from(unescape(point)),
                fs_type: fs_type.to_owned(),
                options: options.to_owned(),
            })
        })
        .collect()
}

/// mountinfo writes a space, tab, newline or backslash in a path as `\ooo` (octal).
fn unescape(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let mut rest = field.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        // `\ooo` with a first digit of at most 3: one byte.
        let octal = match (first, tail) {
            (b'\\', &[a, b, c, ..]) => {
                let digit = |d: u8| (b'0'..=b'7').contains(&d).then(|| d - b'0');
                match (digit(a), digit(b), digit(c)) {
                    (Some(a @ 0..=3), Some(b), Some(c)) => Some((a << 6) | (b << 3) | c),
                    _ => None,
                }
            }
            _ => None,
        };
        match octal {
            Some(byte) => {
                out.push(byte);
                rest = tail.get(3..).unwrap_or_default();
            }
            None => {
                out.push(first);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `memory.max`: `max` (no limit) or a number of bytes; `None` if it is neither.
pub fn parse_v2(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        number => number.parse::<u64>().ok().map(Some),
    }
}

/// `memory.limit_in_bytes`: a number of bytes, a huge one (or -1) meaning no limit; `None` if
/// it is not a number.
pub fn parse_v1(text: &str) -> Option<Option<u64>> {
    let text = text.trim();
    if text == "-1" {
        return Some(None);
    }
    let bytes = text.parse::<u64>().ok()?;
    Some((bytes < V1_UNLIMITED).then_some(bytes))
}

#[cfg(test)]
mod tests;
