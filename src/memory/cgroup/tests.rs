use std::collections::HashMap;
use std::path::Path;

use super::*;

const MIB: u64 = 1 << 20;

/// A fake file system: `files` by path, anything else absent.
fn limit_of(files: &[(&str, &str)]) -> Result<Option<CgroupLimit>, CgroupError> {
    let files: HashMap<&Path, &str> = files.iter().map(|&(p, t)| (Path::new(p), t)).collect();
    let read = |path: &Path, max: u64| -> Result<Option<String>, CgroupError> {
        match files.get(path) {
            Some(text) if text.len() as u64 > max => Err(CgroupError::TooLarge {
                path: path.to_owned(),
                max,
            }),
            Some(text) => Ok(Some((*text).to_owned())),
            None => Ok(None),
        }
    };
    limit_from(&read)
}

/// The limit's bytes found in `files`, `None` for no limit or an error.
fn bytes_of(files: &[(&str, &str)]) -> Option<u64> {
    limit_of(files).ok().flatten().map(|l| l.bytes)
}

const V2_MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw,nsdelegate
";

const V1_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:7 - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

#[test]
fn v2_in_a_container_reads_memory_max_at_its_root() {
    let limit = limit_of(&[
        ("/proc/self/cgroup", "0::/\n"),
        ("/proc/self/mountinfo", V2_MOUNTINFO),
        ("/sys/fs/cgroup/memory.max", "536870912\n"),
    ]);
    assert_eq!(
        limit.ok().flatten(),
        Some(CgroupLimit {
            bytes: 512 * MIB,
            version: Version::V2
        })
    );
}

#[test]
fn v2_nested_groups_take_the_tightest_ancestor() {
    assert_eq!(
        bytes_of(&[
            ("/proc/self/cgroup", "0::/kubepods/burstable/pod1/ctr\n"),
            ("/proc/self/mountinfo", V2_MOUNTINFO),
            (
                "/sys/fs/cgroup/kubepods/burstable/pod1/ctr/memory.max",
                "max\n",
            ),
            (
                "/sys/fs/cgroup/kubepods/burstable/pod1/memory.max",
                "268435456\n",
            ),
            (
                "/sys/fs/cgroup/kubepods/burstable/memory.max",
                "1073741824\n",
            ),
            ("/sys/fs/cgroup/kubepods/memory.max", "max\n"),
        ]),
        Some(256 * MIB)
    );
}

#[test]
fn max_everywhere_is_no_limit() {
    let limit = limit_of(&[
        ("/proc/self/cgroup", "0::/a/b\n"),
        ("/proc/self/mountinfo", V2_MOUNTINFO),
        ("/sys/fs/cgroup/a/b/memory.max", "max\n"),
        ("/sys/fs/cgroup/a/memory.max", "max\n"),
    ]);
    assert_eq!(limit.ok().flatten(), None);
}

#[test]
fn v1_memory_controller_in_a_hybrid_layout() {
    let limit = limit_of(&[
        (
            "/proc/self/cgroup",
            "9:name=systemd:/\n4:memory:/outer/inner\n1:cpu,cpuacct:/\n0::/\n",
        ),
        ("/proc/self/mountinfo", V1_MOUNTINFO),
        (
            "/sys/fs/cgroup/memory/outer/inner/memory.limit_in_bytes",
            "268435456\n",
        ),
        (
            "/sys/fs/cgroup/memory/outer/memory.limit_in_bytes",
            "9223372036854771712\n",
        ),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        ),
    ]);
    assert_eq!(
        limit.ok().flatten(),
        Some(CgroupLimit {
            bytes: 256 * MIB,
            version: Version::V1
        })
    );
}

#[test]
fn v1_huge_values_and_minus_one_are_no_limit() {
    assert_eq!(parse_v1("9223372036854771712\n"), Some(None));
    assert_eq!(parse_v1("9223372036854775807"), Some(None));
    assert_eq!(parse_v1("-1"), Some(None));
    assert_eq!(parse_v1("268435456"), Some(Some(256 * MIB)));
    assert_eq!(parse_v1("lots"), None);
    assert_eq!(parse_v2("max\n"), Some(None));
    assert_eq!(parse_v2(" 1048576 \n"), Some(Some(MIB)));
    assert_eq!(parse_v2("-1"), None);
    assert_eq!(parse_v2(""), None);
}

#[test]
fn a_mount_of_a_subtree_strips_its_root() {
    // Docker without a cgroup namespace: the container's group is the mount's root.
    let mountinfo = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
    assert_eq!(
        bytes_of(&[
            ("/proc/self/cgroup", "4:memory:/docker/abc\n"),
            ("/proc/self/mountinfo", mountinfo),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "134217728\n"),
        ]),
        Some(128 * MIB)
    );
}

#[test]
fn a_group_outside_the_mount_is_looked_for_at_the_mount_point() {
    // Seen from another cgroup namespace, the path climbs out of it.
    assert_eq!(
        bytes_of(&[
            ("/proc/self/cgroup", "0::/../../sibling\n"),
            ("/proc/self/mountinfo", V2_MOUNTINFO),
            ("/sys/fs/cgroup/memory.max", "268435456\n"),
        ]),
        Some(256 * MIB)
    );
}

#[test]
fn no_mount_table_assumes_the_usual_mount_points() {
    assert_eq!(
        bytes_of(&[
            ("/proc/self/cgroup", "0::/\n"),
            ("/sys/fs/cgroup/memory.max", "268435456\n"),
        ]),
        Some(256 * MIB)
    );
}

#[test]
fn no_proc_file_is_no_limit() {
    assert_eq!(limit_of(&[]).ok().flatten(), None);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let error = limit_of(&[("/proc/self/cgroup", "not a cgroup file\n")]);
    assert!(matches!(error, Err(CgroupError::Parse { .. })), "{error:?}");
    let error = limit_of(&[
        ("/proc/self/cgroup", "0::/\n"),
        ("/proc/self/mountinfo", V2_MOUNTINFO),
        ("/sys/fs/cgroup/memory.max", "a lot\n"),
    ]);
    let text = error.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("/sys/fs/cgroup/memory.max"), "{text}");
    assert!(text.contains("a lot"), "{text}");
    let huge = "9".repeat(100);
    let error = limit_of(&[
        ("/proc/self/cgroup", "0::/\n"),
        ("/proc/self/mountinfo", V2_MOUNTINFO),
        ("/sys/fs/cgroup/memory.max", &huge),
    ]);
    assert!(
        matches!(error, Err(CgroupError::TooLarge { .. })),
        "{error:?}"
    );
    for text in ["", "\n", "::", "0:", "x:y:relative", "\u{0}\u{1}:\u{2}"] {
        let _ = parse_proc_cgroup(text);
        let _ = parse_mountinfo(text);
    }
}

#[test]
fn mountinfo_paths_are_unescaped() {
    let mounts = parse_mountinfo(
        "35 31 0:32 / /sys/fs/cgroup/my\\040memory rw shared:7 - cgroup cgroup rw,memory\n",
    );
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0].point, Path::new("/sys/fs/cgroup/my memory"));
    assert_eq!(mounts[0].options, "rw,memory");
}

#[test]
fn the_real_files_never_panic() {
    // Whatever this machine has: a limit, none, or an error, but an answer.
    let _ = container_limit();
}
