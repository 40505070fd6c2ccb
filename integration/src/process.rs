//! What a process holds, read from /proc: resident memory, open files, CPU time.

use std::fs;

/// Resident set size in KiB (`VmRSS`), or None if the process is gone.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Open file descriptors, or None if the process is gone.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// Connections the process has accepted on its listener at `port` (IPv4) and still holds:
/// the sockets of its descriptors whose local port is `port` and that are not listening.
/// Unlike a count of descriptors, this is not thrown by the process's other files or by a
/// connection that is still waiting in the kernel's backlog. None if the process is gone.
pub fn accepted_on(pid: u32, port: u16) -> Option<usize> {
    accepted_peers(pid, port).map(|peers| peers.len())
}

/// The peers' ports of the connections [`accepted_on`] counts, so a test can wait for its
/// own connections whatever else the process holds.
pub fn accepted_peers(pid: u32, port: u16) -> Option<Vec<u16>> {
    let mut inodes = std::collections::HashSet::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd")).ok()? {
        let Ok(target) = entry.and_then(|e| fs::read_link(e.path())) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|rest| rest.strip_suffix(']'))
        {
            inodes.insert(inode.to_owned());
        }
    }
    let table = fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    let port = format!(":{port:04X}");
    Some(
        table
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // local_address, rem_address, state (0A: listening), inode.
                let accepted = fields.len() > 9
                    && fields[1].ends_with(&port)
                    && fields[3] != "0A"
                    && inodes.contains(fields[9]);
                let (_, peer) = fields.get(2)?.split_once(':')?;
                accepted
                    .then(|| u16::from_str_radix(peer, 16).ok())
                    .flatten()
            })
            .collect(),
    )
}

/// User + system CPU time in clock ticks (USER_HZ, 100 per second on Linux).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A finished command's exit status, stdout and stderr, for assertion messages.
pub fn describe(output: &std::process::Output) -> String {
    format!(
        "exit status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `command` (stdin null, stdout and stderr captured) to its end, for at most `timeout`:
/// past it the process is killed. Returns its output, stdout then stderr as one text, and
/// whether it ended by itself.
pub fn run_within(
    command: &mut std::process::Command,
    timeout: std::time::Duration,
) -> (std::process::Output, String, bool) {
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let deadline = std::time::Instant::now() + timeout;
    let mut ended = false;
    while std::time::Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            ended = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if !ended {
        let _ = child.kill();
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("output of {command:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, text, ended)
}
