//! A real Prometheus scraping the service under test, and `promtool`, both from Debian's
//! `prometheus` package, installed on first use by `integration/install-prometheus.sh`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_port, http_get, local_addr, log_tail, new_log_file, spawn_logged, wait_ready};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// `(promtool, prometheus)`, installed on first use.
fn tools() -> &'static (PathBuf, PathBuf) {
    static TOOLS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let printed = super::install_tool(
            "Prometheus and promtool",
            "install-prometheus.sh",
            "(apt-get install prometheus), or set PROMTOOL_BIN and PROMETHEUS_BIN",
        );
        // The script prints promtool's path, then prometheus's, one per line.
        let printed = printed.to_string_lossy().into_owned();
        let mut lines = printed.lines().map(str::trim).filter(|l| !l.is_empty());
        match (lines.next(), lines.next()) {
            (Some(promtool), Some(prometheus)) => (promtool.into(), prometheus.into()),
            _ => panic!("install-prometheus.sh printed {printed:?}, not two paths"),
        }
    })
}

/// The path of `promtool`.
pub fn promtool() -> &'static Path {
    &tools().0
}

/// The path of `prometheus`.
pub fn prometheus_binary() -> &'static Path {
    &tools().1
}

/// A running Prometheus with its own storage, scraping one target; killed on drop.
pub struct Prometheus {
    pub addr: SocketAddr,
    pub log_path: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `metrics_path` on `target` every `interval` under the job
    /// name `job`, with its config and storage in a temporary directory; waits until
    /// `/-/ready` answers 200.
    pub fn start(job: &str, target: SocketAddr, metrics_path: &str, interval: Duration) -> Self {
        let dir = tempfile::tempdir().expect("create a directory for Prometheus");
        let config = dir.path().join("prometheus.yml");
        let interval_ms = interval.as_millis().max(1);
        let timeout_ms = (interval_ms * 9 / 10).max(1);
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {interval_ms}ms\n  evaluation_interval: {interval_ms}ms\n\
                 scrape_configs:\n  - job_name: {job}\n    scrape_interval: {interval_ms}ms\n    \
                 scrape_timeout: {timeout_ms}ms\n    metrics_path: {metrics_path}\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
        let storage = dir.path().join("data");
        let port = free_port();
        let addr = local_addr(port);
        let (log_path, log) = new_log_file("prometheus");
        let mut child = spawn_logged(
            Command::new(prometheus_binary())
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", storage.display()))
                .arg(format!("--web.listen-address={addr}"))
                .current_dir(dir.path()),
            log,
        );
        let ready =
            wait_ready(
                &mut child,
                &log_path,
                "prometheus",
                STARTUP_TIMEOUT,
                || match http_get(addr, "/-/ready", &[]) {
                    Ok(r) if r.status == 200 => Ok(()),
                    Ok(r) => Err(format!("/-/ready answered {}", r.status)),
                    Err(e) => Err(e.to_string()),
                },
            );
        if let Err(failure) = ready {
            let _ = child.kill();
            panic!("{}", failure.message);
        }
        Prometheus {
            addr,
            log_path,
            child,
            _dir: dir,
        }
    }

    /// `GET /api/v1/query?query=expr` (an instant query, now): the result's samples, or the
    /// error Prometheus gave.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let path = format!("/api/v1/query?query={}", percent_encode(expr));
        let response = http_get(self.addr, &path, &[]).map_err(|e| format!("GET {path}: {e}"))?;
        let body: Value = serde_json::from_slice(&response.body)
            .map_err(|e| format!("not JSON ({e}): {}", response.body_text()))?;
        if body["status"] != "success" {
            return Err(format!(
                "{}: {}",
                body["errorType"].as_str().unwrap_or("error"),
                body["error"].as_str().unwrap_or_default()
            ));
        }
        match &body["data"]["result"] {
            Value::Array(samples) => Ok(samples.clone()),
            // A scalar or a string: one value.
            other => Ok(vec![other.clone()]),
        }
    }

    /// Waits until `up{job}` has been 1 in `scrapes` scrapes (at most `timeout`).
    pub fn wait_scraped(&self, job: &str, scrapes: u32, timeout: Duration) {
        let expr = format!("sum_over_time(up{{job=\"{job}\"}}[5m])");
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self
                .query(&expr)
                .ok()
                .and_then(|samples| {
                    samples
                        .first()
                        .and_then(|s| s["value"][1].as_str())
                        .and_then(|v| v.parse::<f64>().ok())
                })
                .unwrap_or(0.0);
            if seen >= f64::from(scrapes) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus scraped {job} successfully {seen} times in {timeout:?}, not {scrapes}; \
                 targets: {}\n--- {} (tail) ---\n{}",
                http_get(self.addr, "/api/v1/targets", &[])
                    .map(|r| r.body_text())
                    .unwrap_or_default(),
                self.log_path.display(),
                log_tail(&self.log_path, 30)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `s` for a URL's query string: unreserved characters kept, every other byte `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
