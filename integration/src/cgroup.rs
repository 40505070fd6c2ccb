//! A memory cgroup of the test's own, so a service runs under a container's memory limit:
//! [`MemoryCgroup::create`] makes the group (cgroup v1's memory controller, else cgroup v2),
//! [`crate::Launch::cgroup`] starts the service inside it, and dropping it removes the group.
//!
//! The group is made where the test process already is (a child of its v1 memory group, a
//! sibling of its v2 group), so every limit above the test still applies. It needs root.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Which hierarchy the group is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    V1,
    V2,
}

/// A memory cgroup with a limit; removed on drop (once its processes are gone).
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    pub hierarchy: Hierarchy,
}

impl MemoryCgroup {
    /// A new group limited to `bytes`. Panics, saying what is missing, when neither cgroup
    /// v1's memory controller nor cgroup v2's can be written.
    pub fn create(bytes: u64) -> MemoryCgroup {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "gcounter-rls-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let v1 = Self::create_v1(&name, bytes);
        let v1_error = match v1 {
            Ok(group) => return group,
            Err(error) => error,
        };
        match Self::create_v2(&name, bytes) {
            Ok(group) => group,
            Err(v2_error) => panic!(
                "this test runs the service under a memory limit and needs a memory cgroup it \
                 can create, as root: cgroup v1's memory controller mounted writable (usually \
                 at /sys/fs/cgroup/memory) or cgroup v2 with the memory controller enabled for \
                 the test's parent group.\n  cgroup v1: {v1_error}\n  cgroup v2: {v2_error}"
            ),
        }
    }

    fn create_v1(name: &str, bytes: u64) -> Result<MemoryCgroup, String> {
        let mount = mount_point(|fs_type, options| {
            fs_type == "cgroup" && options.split(',').any(|o| o == "memory")
        })
        .ok_or("no cgroup v1 memory controller in /proc/self/mountinfo")?;
        let own = own_group(|controllers| controllers.split(',').any(|c| c == "memory"))
            .ok_or("no memory line in /proc/self/cgroup")?;
        let parent = mount.join(own.trim_start_matches('/'));
        let parent = if parent.is_dir() { parent } else { mount };
        let group = Self::make(parent.join(name), Hierarchy::V1)?;
        group.write("memory.limit_in_bytes", &bytes.to_string())?;
        Ok(group)
    }

    fn create_v2(name: &str, bytes: u64) -> Result<MemoryCgroup, String> {
        let mount = mount_point(|fs_type, _| fs_type == "cgroup2")
            .ok_or("no cgroup2 mount in /proc/self/mountinfo")?;
        let own = own_group(str::is_empty).ok_or("no 0:: line in /proc/self/cgroup")?;
        let own = mount.join(own.trim_start_matches('/'));
        // A sibling: a group that holds processes cannot give controllers to children.
        let parent = own
            .parent()
            .filter(|p| p.starts_with(&mount))
            .unwrap_or(&mount);
        let controllers = fs::read_to_string(parent.join("cgroup.subtree_control"))
            .map_err(|e| format!("{}: {e}", parent.display()))?;
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(format!(
                "the memory controller is not enabled in {}/cgroup.subtree_control",
                parent.display()
            ));
        }
        let group = Self::make(parent.join(name), Hierarchy::V2)?;
        group.write("memory.max", &bytes.to_string())?;
        group.write("memory.swap.max", "0").ok();
        Ok(group)
    }

    fn make(dir: PathBuf, hierarchy: Hierarchy) -> Result<MemoryCgroup, String> {
        fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        Ok(MemoryCgroup { dir, hierarchy })
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir.join(file);
        fs::write(&path, value).map_err(|e| format!("write {value} to {}: {e}", path.display()))
    }

    /// The file a process writes its pid into to join the group.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// A file of the group (`memory.failcnt`, `memory.events`, ...), as text.
    pub fn read(&self, file: &str) -> String {
        let path = self.dir.join(file);
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    }

    /// Processes the kernel's OOM killer killed in the group.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.hierarchy {
            Hierarchy::V1 => "memory.oom_control",
            Hierarchy::V2 => "memory.events",
        };
        let text = self.read(file);
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no oom_kill count in {file}: {text}"))
    }

    /// The group's peak memory use in bytes (v1's `memory.max_usage_in_bytes`, v2's
    /// `memory.peak`), when the kernel reports it.
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.hierarchy {
            Hierarchy::V1 => "memory.max_usage_in_bytes",
            Hierarchy::V2 => "memory.peak",
        };
        fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The `source` label the service should report for this group's limit.
    pub fn source_label(&self) -> &'static str {
        match self.hierarchy {
            Hierarchy::V1 => "cgroup_v1",
            Hierarchy::V2 => "cgroup_v2",
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The kernel removes a group only once its last process has exited: killed
        // processes may take a moment.
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove the cgroup {}", self.dir.display());
    }
}

/// The mount point of the first cgroup mount that `wanted(fs_type, super_options)` accepts.
fn mount_point(wanted: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let point = before.split(' ').nth(4)?;
        let mut after = after.split(' ');
        let fs_type = after.next()?;
        let options = after.nth(1).unwrap_or("");
        wanted(fs_type, options).then(|| PathBuf::from(point))
    })
}

/// This process's group in the hierarchy whose controllers `wanted` accepts.
fn own_group(wanted: impl Fn(&str) -> bool) -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        wanted(controllers).then(|| path.to_owned())
    })
}

/// The `sh` arguments that join the group whose `cgroup.procs` is `procs`, then exec the
/// program and arguments that follow them: the pid stays the service's, and it starts
/// already under the limit.
pub fn join_and_exec(procs: &Path) -> [std::ffi::OsString; 3] {
    [
        "-c".into(),
        r#"echo $$ > "$0" && exec "$@""#.into(),
        procs.as_os_str().to_owned(),
    ]
}
