//! Shared harness for the end-to-end test targets (`integration/*.rs`).
//!
//! A test target includes it with `mod support;`. Nearly everything here is
//! synchronous (std networking and processes), so it works from plain
//! `#[test]`s and, for the short blocking calls it makes, from tokio tests too.
//! The exceptions: `load` (async, paced gRPC load) and `proxy` (a cuttable TCP
//! proxy on its own thread and Tokio runtime, usable from either kind of test).
//!
//! Processes are killed when their handle is dropped, including while a failed
//! test unwinds; their output goes to log files under `CARGO_TARGET_TMPDIR`.

// Each test target uses a different subset of the harness.
#![allow(dead_code, unused_imports)]

mod envoy;
pub mod example;
pub mod grpc;
mod http;
pub mod load;
pub mod metrics;
pub mod process;
pub mod proxy;
pub mod raw_grpc;
pub mod redis_admin;
pub mod rls;
mod service;
pub mod sql_admin;
pub mod tls;
pub mod windows;

pub use envoy::{Envoy, envoy_binary};
pub use example::Example;
pub use http::{HttpResponse, http_get, http_post};
pub use service::{Launch, Service};

use std::fs::{self, File};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A port that was free a moment ago on 127.0.0.1.
///
/// The listener is closed before returning, so another process could take the
/// port in between; the kernel hands out ephemeral ports in rotation, which
/// makes that unlikely enough for tests.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    listener
        .local_addr()
        .expect("local_addr of the probe listener")
        .port()
}

/// 127.0.0.1:`port`.
pub fn local_addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A path inside the repository (the crate root), e.g. `repo_path("envoy/per-client-ip.yaml")`.
pub fn repo_path(relative: impl AsRef<Path>) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Sleeps, if needed, so that the next `work` of wall-clock time does not
/// cross a multiple of `window` since the epoch.
///
/// Keeps tests that count requests against a per-second/minute limit from
/// flaking when the service aligns its windows to the clock.
pub fn avoid_window_boundary(window: Duration, work: Duration) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    let into_window = Duration::from_nanos((now.as_nanos() % window.as_nanos()) as u64);
    let left = window - into_window;
    if left < work {
        // A little past the boundary, so clock skew between processes does not matter.
        std::thread::sleep(left + Duration::from_millis(50));
    }
}

/// A fresh log file `<CARGO_TARGET_TMPDIR>/e2e-logs/<name>-<pid>-<n>.log`.
///
/// Kept after the test so a failure can be investigated.
fn new_log_file(name: &str) -> (PathBuf, File) {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-logs");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create log dir {}: {e}", dir.display()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{name}-{}-{n}.log", std::process::id()));
    let file =
        File::create(&path).unwrap_or_else(|e| panic!("create log file {}: {e}", path.display()));
    (path, file)
}

/// The last `lines` lines of a log file (or why it could not be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// Milliseconds since the Unix epoch, as the service's window cells count them.
pub fn now_ms() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(now.as_millis()).expect("milliseconds fit in u64")
}

/// A temporary directory holding one limits file `limits.yaml` with `yaml`;
/// the directory and the file's path. Keep the directory alive while the
/// service runs.
pub fn limits_file(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("create temp dir for limits");
    let path = dir.path().join("limits.yaml");
    fs::write(&path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    (dir, path)
}

/// Replaces `path` with `contents` as editors do: write a hidden temporary
/// file in the same directory, sync it, then rename it over `path`.
pub fn replace_file(path: &Path, contents: &str) {
    let dir = path.parent().expect("file has a parent directory");
    let name = path.file_name().expect("file has a name").to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = File::create(&tmp).unwrap_or_else(|e| panic!("create {}: {e}", tmp.display()));
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    drop(file);
    fs::rename(&tmp, path)
        .unwrap_or_else(|e| panic!("rename {} over {}: {e}", tmp.display(), path.display()));
}
