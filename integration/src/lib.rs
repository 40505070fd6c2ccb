//! The harness of gcounter-rls's end-to-end tests (`integration/tests/`): the real
//! binary started on free ports ([`Service`]), gRPC and raw HTTP/2 clients, a real Envoy
//! ([`Envoy`]), a real Prometheus ([`prometheus::Prometheus`]), Redis and SQL
//! administration, a cuttable TCP proxy ([`proxy::Proxy`]), paced load and the checks on
//! what it left behind.
//!
//! The binary is found beside the test executable ([`binary`]; `cargo build -p gcounter-rls`
//! builds it); `scenario_tests!` makes one test per case of a scenario (e.g. per SQL backend),
//! `Service::await_limit` polls a limit until a change applies, and `repo_path` names the
//! repository's files.
//!
//! Each test target uses it as `use gcounter_rls_integration as support;`. Nearly
//! everything here is synchronous (std networking and processes), so it works from plain
//! `#[test]`s and, for the short blocking calls it makes, from tokio tests too. The
//! exceptions: `load` (async, paced gRPC load) and `proxy` (a cuttable TCP proxy on its
//! own thread and Tokio runtime, usable from either kind of test).
//!
//! Processes are killed when their handle is dropped, including while a failed test
//! unwinds; their output goes to log files under `target/tmp/e2e-logs/`.

pub mod bounded;
pub mod cgroup;
pub mod check_config;
mod envoy;
pub mod example;
pub mod grpc;
mod http;
pub mod load;
pub mod metrics;
pub mod otlp;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod quota;
pub mod raw_grpc;
pub mod redis_admin;
pub mod rls;
mod scenario;
mod service;
pub mod sql_admin;
pub mod statsd;
pub mod tls;
pub mod upstream;
pub mod windows;
pub mod xds;

pub use envoy::{Envoy, envoy_binary};
pub use example::Example;
pub use http::{HttpResponse, http_get, http_post, http_post_with, http_request};
pub use service::{Launch, Service};
pub use upstream::UpstreamRuntime;

use std::fs::{self, File};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// The repository's root: the directory above this crate's (`integration/`).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the integration crate sits inside the repository")
}

/// A path inside the repository, e.g. `repo_path("envoy/per-client-ip.yaml")`.
pub fn repo_path(relative: impl AsRef<Path>) -> PathBuf {
    repo_root().join(relative)
}

/// The target profile directory the running test executable was built into
/// (`target/debug` for `target/debug/deps/<test>-<hash>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test executable's path");
    let deps = exe
        .parent()
        .expect("the test executable sits in a directory");
    let dir = if deps.file_name().is_some_and(|name| name == "deps") {
        deps.parent().expect("deps sits in the profile directory")
    } else {
        deps
    };
    dir.to_path_buf()
}

/// The service binary, `gcounter-rls`, from the same target profile as the running test
/// (`cargo nextest run --workspace` builds it; `cargo build -p gcounter-rls` does too).
///
/// Panics, saying how to build it, when it is not there.
pub fn binary() -> PathBuf {
    let binary = profile_dir().join("gcounter-rls");
    assert!(
        binary.is_file(),
        "no service binary at {}: build it first: cargo build -p gcounter-rls \
         (cargo nextest run --workspace builds it too)",
        binary.display()
    );
    binary
}

/// The arguments of `serve` with `config` and the two listeners' addresses, then `extra`.
pub fn serve_argv<'a>(
    config: &'a str,
    grpc_addr: &'a str,
    http_addr: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "serve",
        "--config",
        config,
        "--grpc-addr",
        grpc_addr,
        "--http-addr",
        http_addr,
    ];
    args.extend_from_slice(extra);
    args
}

/// Runs the installer `integration/<script>`, which installs `what` on first use and prints
/// where it is; that path. Panics when it fails, saying how to install `what` by hand
/// (`by_hand`) with the installer's stderr.
pub fn install_tool(what: &str, script: &str, by_hand: &str) -> PathBuf {
    let script = repo_path("integration").join(script);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what} is missing: cannot run {}: {e}", script.display()));
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || path.is_empty() {
        panic!(
            "{what} is missing and could not be installed ({} exited with {}).\n\
             Install it with `bash {}` {by_hand}.\n--- installer stderr ---\n{}",
            script.display(),
            out.status,
            script
                .strip_prefix(repo_root())
                .unwrap_or(&script)
                .display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    PathBuf::from(path)
}

/// Polls `read` until it returns `want` (a condition awaited, not a fixed sleep); panics
/// with the last value after 10 s.
pub fn eventually<T: PartialEq + std::fmt::Debug>(
    what: &str,
    want: T,
    mut read: impl FnMut() -> T,
) {
    let started = std::time::Instant::now();
    loop {
        let got = read();
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: {got:?}, {want:?} expected"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `probe` every `every` until it answers `Some` (a condition awaited, not a fixed
/// sleep); that value. Panics with `failure()` after 10 s.
pub async fn until_some<T>(
    every: Duration,
    failure: impl Fn() -> String,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{}", failure());
        tokio::time::sleep(every).await;
    }
}

/// Polls `probe` every 50 ms until it answers true (a condition awaited, not a fixed sleep);
/// how long that took. Panics naming `what` after `timeout`.
pub fn wait_for(timeout: Duration, what: &str, mut probe: impl FnMut() -> bool) -> Duration {
    let started = std::time::Instant::now();
    while !probe() {
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
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

/// Sleeps until 20 ms past the next multiple of `window` since the epoch (the service aligns
/// its windows to the clock); that window's start, in ms since the epoch. A test that needs
/// several requests inside one window calls it right before them, after everything they need
/// is up: they then have the whole window, the most a loaded machine can be given.
pub fn into_fresh_window(window: Duration) -> u64 {
    let window_ms = u64::try_from(window.as_millis()).expect("a window in u64 ms");
    let now = now_ms();
    let start = (now / window_ms + 1) * window_ms;
    std::thread::sleep(Duration::from_millis(start + 20 - now));
    start
}

/// Sleeps until `at_ms` (ms since the epoch), if that is still ahead.
pub fn sleep_until_ms(at_ms: u64) {
    std::thread::sleep(Duration::from_millis(at_ms.saturating_sub(now_ms())));
}

/// A fresh log file `target/tmp/e2e-logs/<name>-<pid>-<n>.log`.
///
/// Kept after the test so a failure can be investigated.
fn new_log_file(name: &str) -> (PathBuf, File) {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    // `target/tmp`, the directory Cargo gives test targets as `CARGO_TARGET_TMPDIR`.
    let target = profile_dir();
    let dir = target
        .parent()
        .unwrap_or(&target)
        .join("tmp")
        .join("e2e-logs");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create log dir {}: {e}", dir.display()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{name}-{}-{n}.log", std::process::id()));
    let file =
        File::create(&path).unwrap_or_else(|e| panic!("create log file {}: {e}", path.display()));
    (path, file)
}

/// Why a start failed, and whether other ports could help.
struct StartFailure {
    port_taken: bool,
    message: String,
}

/// Runs `start` (which picks its ports with [`free_port`]) until it does not fail on a taken
/// port, at most 5 times. `free_port` only finds a port that was free a moment ago: with many
/// processes starting in parallel another one may take it first, so a start fails now and
/// then with "Address already in use" through no fault of the code under test.
fn on_free_ports<T>(mut start: impl FnMut() -> Result<T, StartFailure>) -> Result<T, StartFailure> {
    const ATTEMPTS: usize = 5;
    let mut attempt = 1;
    loop {
        match start() {
            Err(failure) if failure.port_taken && attempt < ATTEMPTS => attempt += 1,
            done => return done,
        }
    }
}

/// Polls `probe` every 50 ms until it answers `Ok`, `child` exits, or `timeout` passes.
/// `what` names the process and its config in the failure, which ends with the log's tail.
fn wait_ready(
    child: &mut Child,
    log_path: &Path,
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<(), String>,
) -> Result<(), StartFailure> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let tail = log_tail(log_path, 60);
            return Err(StartFailure {
                port_taken: tail.contains("Address already in use"),
                message: format!(
                    "{what} exited during startup ({status})\n--- {} (tail) ---\n{tail}",
                    log_path.display(),
                ),
            });
        }
        let last = match probe() {
            Ok(()) => return Ok(()),
            Err(last) => last,
        };
        if std::time::Instant::now() >= deadline {
            return Err(StartFailure {
                port_taken: false,
                message: format!(
                    "{what} not ready after {timeout:?} ({last})\n--- {} (tail) ---\n{}",
                    log_path.display(),
                    log_tail(log_path, 60)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Spawns `command` with no stdin and both outputs into `log`; panics naming the program.
fn spawn_logged(command: &mut Command, log: File) -> Child {
    let log_err = log.try_clone().expect("clone log file handle");
    command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {:?}: {e}", command.get_program()))
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

/// Asserts that `text` (an error output, a list of problems) mentions `needle`; `whose`
/// names the text in the failure.
pub fn assert_mentions(text: &str, needle: &str, whose: &str) {
    assert!(
        text.contains(needle),
        "{whose} does not mention {needle:?}:\n{text}"
    );
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

/// One rule: `domain` with one descriptor `key` limited to `limit` per `multiplier` `unit`s.
pub fn one_rule(domain: &str, key: &str, unit: &str, multiplier: u32, limit: u64) -> String {
    format!(
        "domain: {domain}\n\
         descriptors:\n  \
           - key: {key}\n    \
             rate_limit:\n      \
               unit: {unit}\n      \
               unit_multiplier: {multiplier}\n      \
               requests_per_unit: {limit}\n"
    )
}

/// A domain of top-level rules, one descriptor key each, from `(key, unit, requests_per_unit)`:
/// the limits most request-semantics tests need, so a test states its numbers rather than
/// spelling out the same YAML around them.
pub fn flat_rules(domain: &str, rules: &[(&str, &str, u64)]) -> String {
    let mut yaml = format!("domain: {domain}\ndescriptors:\n");
    for (key, unit, limit) in rules {
        yaml.push_str(&format!(
            "  - key: {key}\n    rate_limit: {{ unit: {unit}, requests_per_unit: {limit} }}\n"
        ));
    }
    yaml
}

/// The service on a limits file holding `yaml`, with `args`; keep the directory alive while
/// the service runs.
pub fn serve_limits(yaml: &str, args: &[&str]) -> (tempfile::TempDir, Service) {
    let (dir, path) = limits_file(yaml);
    let service = Service::start(&path, args);
    (dir, service)
}

/// Sleeps, if needed, so that the next `work` stays within one clock minute (see
/// [`avoid_window_boundary`]).
pub fn stay_in_one_minute(work: Duration) {
    avoid_window_boundary(Duration::from_secs(60), work);
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
