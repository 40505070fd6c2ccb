//! The gcounter-rls binary under test, run as a child process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use super::grpc::{RlsClient, limit_of};
use super::{
    HttpResponse, StartFailure, free_port, http_get, local_addr, log_tail, new_log_file,
    on_free_ports, spawn_logged, wait_ready,
};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);
/// How often [`Service::await_limit`] asks.
const LIMIT_POLL: Duration = Duration::from_millis(50);

/// A running `gcounter-rls serve`; killed on drop.
pub struct Service {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The debug listener: `/rlconfig` and counter inspection (`/counters`, `/counters/top`).
    pub debug_addr: SocketAddr,
    /// Combined stdout and stderr of the process.
    pub log_path: PathBuf,
    child: Child,
}

impl Service {
    /// Starts the service on free ports with `--config config` and waits until
    /// `GET /healthz` answers 200. Panics (with the log tail) if it does not
    /// within 15 s or exits first.
    pub fn start(config: impl AsRef<Path>, extra_args: &[&str]) -> Service {
        Self::start_with(config, extra_args, Launch::default())
    }

    /// Like [`Service::start`], launched as `launch` says (environment, open-files limit).
    pub fn start_with(
        config: impl AsRef<Path>,
        extra_args: &[&str],
        launch: Launch<'_>,
    ) -> Service {
        let config = config.as_ref();
        on_free_ports(|| Self::try_start_on(config, free_port(), free_port(), extra_args, launch))
            .unwrap_or_else(|failure| panic!("{}", failure.message))
    }

    /// The service with no `--config`: `extra_args` name the limits' source (the xDS
    /// server). Waits for `/healthz` like [`Service::start`].
    pub fn start_without_config(extra_args: &[&str], launch: Launch<'_>) -> Service {
        Self::start_with(Path::new(""), extra_args, launch)
    }

    /// The binary started as upstream's image starts it: named `ratelimit` (a symlink), no
    /// arguments, configured by `env` (upstream's variables) plus `HOST`/`PORT`/`GRPC_HOST`/
    /// `GRPC_PORT` on free loopback ports. Waits for `/healthz` like [`Service::start`].
    pub fn start_upstream(env: &[(&str, &str)]) -> Service {
        on_free_ports(|| Self::try_start_upstream(env))
            .unwrap_or_else(|failure| panic!("{}", failure.message))
    }

    fn try_start_upstream(env: &[(&str, &str)]) -> Result<Service, StartFailure> {
        let (log_path, log) = new_log_file("ratelimit");
        let link = log_path.with_extension("bin");
        std::fs::create_dir_all(&link).expect("create symlink dir");
        let link = link.join("ratelimit");
        if !link.exists() {
            std::os::unix::fs::symlink(super::binary(), &link)
                .unwrap_or_else(|e| panic!("symlink {}: {e}", link.display()));
        }
        let (grpc_port, http_port, debug_port) = (free_port(), free_port(), free_port());
        let child = spawn_logged(
            Command::new(&link)
                .env("HOST", "127.0.0.1")
                .env("PORT", http_port.to_string())
                .env("GRPC_HOST", "127.0.0.1")
                .env("GRPC_PORT", grpc_port.to_string())
                .env("DEBUG_HOST", "127.0.0.1")
                .env("DEBUG_PORT", debug_port.to_string())
                .envs(env.iter().copied())
                .env("RUST_BACKTRACE", "1"),
            log,
        );
        let mut service = Service {
            grpc_addr: local_addr(grpc_port),
            http_addr: local_addr(http_port),
            debug_addr: local_addr(debug_port),
            log_path,
            child,
        };
        service.wait_healthy(&link)?;
        Ok(service)
    }

    /// Like [`Service::start`] on given ports, for tests that must know the
    /// addresses beforehand (peers, restarts on the same port).
    pub fn start_on(
        config: impl AsRef<Path>,
        grpc_port: u16,
        http_port: u16,
        extra_args: &[&str],
    ) -> Service {
        Self::try_start_on(
            config.as_ref(),
            grpc_port,
            http_port,
            extra_args,
            Launch::default(),
        )
        .unwrap_or_else(|failure| panic!("{}", failure.message))
    }

    fn try_start_on(
        config: &Path,
        grpc_port: u16,
        http_port: u16,
        extra_args: &[&str],
        launch: Launch<'_>,
    ) -> Result<Service, StartFailure> {
        let grpc_addr = local_addr(grpc_port);
        let http_addr = local_addr(http_port);
        // The debug listener's default port is fixed (6070): each service gets a free one,
        // unless the test names its own.
        let debug_flag = extra_args.iter().position(|a| *a == "--debug-addr");
        let debug_addr = match debug_flag.and_then(|i| extra_args.get(i + 1)) {
            // No debug listener: nothing answers there.
            Some(&"off") => local_addr(0),
            Some(addr) => addr
                .parse()
                .unwrap_or_else(|e| panic!("--debug-addr {addr}: {e}")),
            None => local_addr(free_port()),
        };
        let debug_args = match debug_flag {
            Some(_) => Vec::new(),
            None => vec!["--debug-addr".to_owned(), debug_addr.to_string()],
        };
        let (log_path, log) = new_log_file("gcounter-rls");

        let binary = super::binary();
        // prlimit and the cgroup's shell exec the binary: the child's pid stays the service's.
        let mut program: Vec<std::ffi::OsString> = Vec::new();
        if let Some(procs) = launch.cgroup {
            program.push("sh".into());
            program.extend(super::cgroup::join_and_exec(procs));
        }
        if let Some(n) = launch.nofile {
            program.extend([
                "prlimit".into(),
                format!("--nofile={n}:{n}").into(),
                "--".into(),
            ]);
        }
        let mut command = match program.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        let child = spawn_logged(
            command
                .arg("serve")
                .args(
                    (!config.as_os_str().is_empty())
                        .then(|| [Path::new("--config"), config])
                        .into_iter()
                        .flatten(),
                )
                .args(["--grpc-addr", &grpc_addr.to_string()])
                .args(["--http-addr", &http_addr.to_string()])
                // A test that sets its own level (to see debug lines) gets it.
                .args(
                    (!extra_args.contains(&"--log-level"))
                        .then_some(["--log-level", "info"])
                        .into_iter()
                        .flatten(),
                )
                .args(&debug_args)
                .args(extra_args)
                .env("RUST_BACKTRACE", "1")
                .envs(launch.env.iter().copied()),
            log,
        );

        let mut service = Service {
            grpc_addr,
            http_addr,
            debug_addr,
            log_path,
            child,
        };
        service.wait_healthy(config)?;
        Ok(service)
    }

    fn wait_healthy(&mut self, config: &Path) -> Result<(), StartFailure> {
        let what = format!(
            "gcounter-rls (http {}, --config {})",
            self.http_addr,
            config.display()
        );
        let http_addr = self.http_addr;
        wait_ready(
            &mut self.child,
            &self.log_path,
            &what,
            STARTUP_TIMEOUT,
            || match http_get(http_addr, "/healthz", &[]) {
                Ok(r) if r.status == 200 => Ok(()),
                Ok(r) => Err(format!(
                    "/healthz: status {} body {:?}",
                    r.status,
                    r.body_text()
                )),
                Err(e) => Err(format!("/healthz: {e}")),
            },
        )
    }

    /// The last `lines` lines of the service's output, for assertion messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// Asserts `actual == expected`; the failure says `what` (first, as in the waiting
    /// helpers) and shows the log's tail.
    #[track_caller]
    pub fn assert_eq_logged<T: PartialEq + std::fmt::Debug>(
        &self,
        what: &str,
        actual: T,
        expected: T,
    ) {
        assert_eq!(
            actual,
            expected,
            "{what}\n--- service log ---\n{}",
            self.log_tail(30)
        );
    }

    /// Polls until the limit the service applies to `entries` in `domain` is `want` (checked
    /// without consuming, [`limit_of`]); how long that took. Panics after `timeout`, naming
    /// `after` (what the test changed) and with the log's tail.
    pub async fn await_limit(
        &self,
        client: &RlsClient,
        (domain, entries): (&str, &[(&str, &str)]),
        want: Option<u32>,
        timeout: Duration,
        after: &str,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let got = limit_of(client.clone(), domain, entries).await;
            if got == want {
                let took = start.elapsed();
                eprintln!("{domain} {entries:?}: limit {want:?} {took:?} after {after}");
                return took;
            }
            assert!(
                start.elapsed() < timeout,
                "{domain} {entries:?}: limit {got:?}, expected {want:?} within {timeout:?} after \
                 {after}\n--- service log ---\n{}",
                self.log_tail(30)
            );
            tokio::time::sleep(LIMIT_POLL).await;
        }
    }

    /// OS process id, e.g. to send it a signal.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the process (VmRSS from /proc), in KiB.
    pub fn rss_kib(&self) -> u64 {
        super::process::rss_kib(self.pid())
            .unwrap_or_else(|| panic!("no VmRSS for pid {}: has it exited?", self.pid()))
    }

    /// Sends `signal` (a name as `kill -s` takes it: `TERM`, `INT`, `HUP`) to the process.
    pub fn send_signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("run `kill -s {signal} {}`: {e}", self.pid()));
        assert!(
            status.success(),
            "`kill -s {signal} {}` failed ({status})",
            self.pid()
        );
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Polls `check` every 50 ms until it passes (`Ok`): a condition awaited, not a fixed
    /// sleep. Fails after `timeout` naming `what` it awaited, with the last state `check`
    /// described (`Err`) and the log's tail.
    pub fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut() -> Result<(), String>,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let state = match check() {
                Ok(()) => return,
                Err(state) => state,
            };
            assert!(
                Instant::now() < deadline,
                "not within {timeout:?}: {what}\n{state}\n--- log ---\n{}",
                self.log_tail(30)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and waits up to `within` for a clean exit (status 0); how long it took.
    /// Fails, showing the log's tail, while the process still runs after `within` or when it
    /// exits with an error.
    pub fn terminate_cleanly(&mut self, within: Duration) -> Duration {
        let signalled = Instant::now();
        self.send_signal("TERM");
        let status = self.wait_exit(within);
        let took = signalled.elapsed();
        let log = self.log_tail(30);
        let status = status.unwrap_or_else(|| {
            panic!("still running {within:?} after SIGTERM\n--- log ---\n{log}")
        });
        assert!(
            status.success(),
            "exit status {status} after SIGTERM\n--- log ---\n{log}"
        );
        took
    }

    /// Waits up to `timeout` for the process to exit; its status, or None if
    /// it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET path` on the admin (HTTP) port, panicking with the log tail on a
    /// transport error.
    pub fn admin_get(&self, path: &str) -> HttpResponse {
        self.get_on(self.http_addr, path)
    }

    /// `GET path` on the debug listener (counter inspection), panicking with the log tail
    /// on a transport error.
    pub fn debug_get(&self, path: &str) -> HttpResponse {
        self.get_on(self.debug_addr, path)
    }

    /// The sliding count of `descriptor` (`key=value` pairs, URL-encoded) in `domain`, as
    /// counter inspection shows it; 0 while the counter is unknown.
    pub fn sliding_count(&self, domain: &str, descriptor: &str) -> u64 {
        let inspected = self.debug_get(&format!(
            "/counters?domain={domain}&descriptor={descriptor}"
        ));
        let body: serde_json::Value = serde_json::from_slice(&inspected.body).unwrap_or_default();
        body["sliding_count"].as_u64().unwrap_or(0)
    }

    fn get_on(&self, addr: SocketAddr, path: &str) -> HttpResponse {
        http_get(addr, path, &[]).unwrap_or_else(|e| {
            panic!(
                "GET {path} on {addr} failed: {e}\n--- {} (tail) ---\n{}",
                self.log_path.display(),
                self.log_tail(30)
            )
        })
    }

    /// The running limits as `/rlconfig` shows them.
    pub fn rlconfig(&self) -> String {
        self.admin_get("/rlconfig").body_text()
    }

    /// Waits up to `timeout` until `/rlconfig` holds `needle` (a reload, a pushed config).
    pub fn wait_rlconfig(&self, timeout: Duration, needle: &str) {
        self.wait_until(timeout, &format!("{needle:?} in /rlconfig"), || {
            let text = self.rlconfig();
            text.contains(needle).then_some(()).ok_or(text)
        });
    }

    /// `rls_config_reloads_total{result}` (0 before the first).
    pub fn config_reloads(&self, result: &str) -> f64 {
        super::metrics::count(
            &self.metrics(),
            "rls_config_reloads_total",
            &[("result", result)],
        )
    }

    /// The text of `GET /metrics`.
    pub fn metrics(&self) -> String {
        let r = self.admin_get("/metrics");
        assert_eq!(r.status, 200, "GET /metrics: {}", r.body_text());
        r.body_text()
    }
}

/// How to launch the service beyond its flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct Launch<'a> {
    /// Extra environment variables (e.g. `RLS_*` settings).
    pub env: &'a [(&'a str, &'a str)],
    /// The open-files limit (soft and hard), set by `prlimit(1)` so a test can exhaust it.
    pub nofile: Option<u64>,
    /// The `cgroup.procs` of a group the service joins before it starts
    /// ([`super::cgroup::MemoryCgroup::procs`]).
    pub cgroup: Option<&'a Path>,
}

impl<'a> Launch<'a> {
    /// Launched with these environment variables, nothing else changed.
    pub fn env(env: &'a [(&'a str, &'a str)]) -> Self {
        Launch {
            env,
            ..Launch::default()
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // Already-exited children make kill() fail; nothing to do then.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
