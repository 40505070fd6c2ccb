//! The gcounter-rls binary under test, run as a child process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{HttpResponse, free_port, http_get, local_addr, log_tail, new_log_file};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);

/// A running `gcounter-rls serve`; killed on drop.
pub struct Service {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// Combined stdout and stderr of the process.
    pub log_path: PathBuf,
    child: Child,
}

/// Why a start failed, and whether other ports could help.
struct StartFailure {
    port_taken: bool,
    message: String,
}

impl Service {
    /// Starts the service on free ports with `--config config` and waits until
    /// `GET /healthz` answers 200. Panics (with the log tail) if it does not
    /// within 15 s or exits first.
    pub fn start(config: impl AsRef<Path>, extra_args: &[&str]) -> Service {
        Self::start_with_nofile(config, extra_args, None)
    }

    /// Like [`Service::start`], with extra environment variables (upstream's `QUOTA_MODE`,
    /// `SHADOW_MODE`, ...).
    pub fn start_with_env(
        config: impl AsRef<Path>,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Service {
        Self::try_start_on(
            config.as_ref(),
            free_port(),
            free_port(),
            extra_args,
            None,
            env,
        )
        .unwrap_or_else(|failure| panic!("{}", failure.message))
    }

    /// Like [`Service::start`], with the open-files limit (soft and hard) set to `nofile`
    /// by `prlimit(1)`, so a test can exhaust it.
    pub fn start_with_nofile(
        config: impl AsRef<Path>,
        extra_args: &[&str],
        nofile: Option<u64>,
    ) -> Service {
        // `free_port` only finds a port that was free a moment ago: with many processes
        // starting in parallel another one may take it first. Then try other ports.
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            match Self::try_start_on(
                config.as_ref(),
                free_port(),
                free_port(),
                extra_args,
                nofile,
                &[],
            ) {
                Ok(service) => return service,
                Err(failure) if failure.port_taken && attempt < ATTEMPTS => continue,
                Err(failure) => panic!("{}", failure.message),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Like [`Service::start`] on given ports, for tests that must know the
    /// addresses beforehand (peers, restarts on the same port).
    pub fn start_on(
        config: impl AsRef<Path>,
        grpc_port: u16,
        http_port: u16,
        extra_args: &[&str],
    ) -> Service {
        Self::try_start_on(config.as_ref(), grpc_port, http_port, extra_args, None, &[])
            .unwrap_or_else(|failure| panic!("{}", failure.message))
    }

    fn try_start_on(
        config: &Path,
        grpc_port: u16,
        http_port: u16,
        extra_args: &[&str],
        nofile: Option<u64>,
        env: &[(&str, &str)],
    ) -> Result<Service, StartFailure> {
        let grpc_addr = local_addr(grpc_port);
        let http_addr = local_addr(http_port);
        let (log_path, log) = new_log_file("gcounter-rls");
        let log_err = log.try_clone().expect("clone log file handle");

        let binary = env!("CARGO_BIN_EXE_gcounter-rls");
        // prlimit execs the binary: the child's pid stays the service's.
        let mut command = match nofile {
            Some(n) => {
                let mut command = Command::new("prlimit");
                command
                    .arg(format!("--nofile={n}:{n}"))
                    .arg("--")
                    .arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let child = command
            .arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--grpc-addr", &grpc_addr.to_string()])
            .args(["--http-addr", &http_addr.to_string()])
            .args(["--log-level", "info"])
            .args(extra_args)
            .env("RUST_BACKTRACE", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .expect("spawn gcounter-rls (CARGO_BIN_EXE_gcounter-rls)");

        let mut service = Service {
            grpc_addr,
            http_addr,
            log_path,
            child,
        };
        service.wait_healthy(config)?;
        Ok(service)
    }

    fn wait_healthy(&mut self, config: &Path) -> Result<(), StartFailure> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let tail = self.log_tail(60);
                return Err(StartFailure {
                    port_taken: tail.contains("Address already in use"),
                    message: format!(
                        "gcounter-rls exited during startup ({status}) with --config {}\n--- {} (tail) ---\n{tail}",
                        config.display(),
                        self.log_path.display(),
                    ),
                });
            }
            let last = match http_get(self.http_addr, "/healthz", &[]) {
                Ok(r) if r.status == 200 => return Ok(()),
                Ok(r) => format!("status {} body {:?}", r.status, r.body_text()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(StartFailure {
                    port_taken: false,
                    message: format!(
                        "gcounter-rls not healthy after {STARTUP_TIMEOUT:?} on http {} (last /healthz: {last})\n--- {} (tail) ---\n{}",
                        self.http_addr,
                        self.log_path.display(),
                        self.log_tail(60)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last `lines` lines of the service's output, for assertion messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// OS process id, e.g. to send it a signal.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the process (VmRSS from /proc), in KiB.
    pub fn rss_kib(&self) -> u64 {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS line in {path}"))
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
        http_get(self.http_addr, path, &[]).unwrap_or_else(|e| {
            panic!(
                "GET {path} on {} failed: {e}\n--- {} (tail) ---\n{}",
                self.http_addr,
                self.log_path.display(),
                self.log_tail(30)
            )
        })
    }

    /// The text of `GET /metrics`.
    pub fn metrics(&self) -> String {
        let r = self.admin_get("/metrics");
        assert_eq!(r.status, 200, "GET /metrics: {}", r.body_text());
        r.body_text()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // Already-exited children make kill() fail; nothing to do then.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
