//! The ready-to-run examples: `envoy/<name>.yaml` with its limits `config/<name>.yaml`.
//!
//! The commands to run an example are written once, in the first lines of its Envoy file,
//! and the Envoy guide (`docs/envoy.md`) shows the same lines. [`Example::load`] reads them
//! from there and checks the guide, so what the tests run is what a user runs (only the
//! ports differ).

use std::path::{Path, PathBuf};

use super::{Envoy, Service, repo_path};

/// How the service command starts in an example's header (and in the Envoy guide).
const SERVE_PREFIX: &str = "cargo run --release -- serve ";

/// The guide that lists every example with its commands.
const ENVOY_GUIDE: &str = "docs/envoy.md";

pub struct Example {
    /// `envoy/<name>.yaml`, relative to the repository root.
    pub envoy_file: PathBuf,
    /// `config/<name>.yaml`, relative to the repository root.
    pub limits_file: PathBuf,
    /// The documented `serve` flags after `--config <limits>`, e.g. `--response-headers`.
    pub serve_flags: Vec<String>,
}

impl Example {
    /// Reads the example's two documented commands; panics if they are missing, name
    /// other files, or are not in the Envoy guide word for word.
    pub fn load(name: &str) -> Example {
        let envoy_file = PathBuf::from(format!("envoy/{name}.yaml"));
        let limits_file = PathBuf::from(format!("config/{name}.yaml"));
        let text = read(&envoy_file);
        let commands: Vec<&str> = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim())
            .collect();

        let serve = commands
            .iter()
            .find(|l| l.starts_with(SERVE_PREFIX))
            .unwrap_or_else(|| {
                panic!(
                    "{}: no `{SERVE_PREFIX}...` line in the leading comment",
                    envoy_file.display()
                )
            });
        let args: Vec<String> = serve[SERVE_PREFIX.len()..]
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let config = format!("{}", limits_file.display());
        assert!(
            args.len() >= 2 && args[0] == "--config" && args[1] == config,
            "{}: the serve command must start with `--config {config}`: {serve:?}",
            envoy_file.display()
        );
        assert!(
            repo_path(&limits_file).is_file(),
            "{} names {config}, which does not exist",
            envoy_file.display()
        );
        let envoy_command = format!("envoy -c {}", envoy_file.display());
        assert!(
            commands.contains(&envoy_command.as_str()),
            "{}: no `{envoy_command}` line in the leading comment",
            envoy_file.display()
        );

        let guide = read(Path::new(ENVOY_GUIDE));
        for command in [*serve, envoy_command.as_str()] {
            assert!(
                guide.contains(command),
                "{ENVOY_GUIDE} does not show `{command}` (from {}): keep them the same",
                envoy_file.display()
            );
        }

        Example {
            envoy_file,
            limits_file,
            serve_flags: args[2..].to_vec(),
        }
    }

    /// The service as documented, on free ports, with `extra` flags after the documented ones.
    pub fn start_service(&self, extra: &[&str]) -> Service {
        self.start_service_with(&repo_path(&self.limits_file), extra)
    }

    /// Like [`Example::start_service`] on another limits file (e.g. an editable copy).
    pub fn start_service_with(&self, limits: &Path, extra: &[&str]) -> Service {
        let mut flags: Vec<&str> = self.serve_flags.iter().map(String::as_str).collect();
        flags.extend_from_slice(extra);
        Service::start(limits, &flags)
    }

    /// Like [`Example::start_service`] on given ports (to restart on the same ones).
    pub fn start_service_on(&self, grpc_port: u16, http_port: u16, extra: &[&str]) -> Service {
        let mut flags: Vec<&str> = self.serve_flags.iter().map(String::as_str).collect();
        flags.extend_from_slice(extra);
        Service::start_on(repo_path(&self.limits_file), grpc_port, http_port, &flags)
    }

    /// Envoy on the example file, its rate-limit cluster at `service`.
    pub fn start_envoy(&self, service: &Service) -> Envoy {
        Envoy::start(&self.envoy_file, service.grpc_addr.port(), &[])
    }

    /// A copy of the limits file in a temporary directory (keep the directory alive).
    pub fn copy_limits(&self) -> (tempfile::TempDir, PathBuf) {
        super::limits_file(&read(&self.limits_file))
    }
}

fn read(relative: &Path) -> String {
    let path = repo_path(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A service and an Envoy started from one example; both stopped on drop.
pub struct Stack {
    pub service: Service,
    pub envoy: Envoy,
}

impl Stack {
    /// The example as documented; `extra` service flags after the documented ones.
    pub fn start(example: &Example, extra: &[&str]) -> Stack {
        let service = example.start_service(extra);
        let envoy = example.start_envoy(&service);
        Stack { service, envoy }
    }

    /// Requests through this stack's Envoy.
    pub fn client(&self) -> Client<'_> {
        Client::new(&self.envoy, vec![self.service.log_path.clone()])
    }
}

/// Sends requests through an Envoy and checks the answers; every failure message carries
/// Envoy's rate-limit stats and the tails of the Envoy and service logs.
pub struct Client<'a> {
    pub envoy: &'a Envoy,
    service_logs: Vec<PathBuf>,
}

/// The windows of every example are a minute: `x-ratelimit-reset` is within one.
const RESET_RANGE: std::ops::RangeInclusive<u64> = 1..=60;

impl<'a> Client<'a> {
    pub fn new(envoy: &'a Envoy, service_logs: Vec<PathBuf>) -> Self {
        Client {
            envoy,
            service_logs,
        }
    }

    /// Diagnostics for assertion messages.
    pub fn context(&self) -> String {
        let mut out = format!(
            "\n--- envoy ratelimit stats ---\n{}\n--- envoy log ({}) ---\n{}",
            self.envoy.stats_matching("cluster.upstream.ratelimit."),
            self.envoy.log_path.display(),
            self.envoy.log_tail(20)
        );
        for log in &self.service_logs {
            out.push_str(&format!(
                "\n--- service log ({}) ---\n{}",
                log.display(),
                super::log_tail(log, 20)
            ));
        }
        out
    }

    /// `GET path` through Envoy; panics on a transport error.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> super::HttpResponse {
        super::http_get(self.envoy.listen_addr, path, headers).unwrap_or_else(|e| {
            panic!(
                "GET {path} {headers:?} through Envoy: {e}{}",
                self.context()
            )
        })
    }

    /// Expects a 200 from the upstream with `x-ratelimit-limit: limit` and
    /// `x-ratelimit-remaining: remaining`, and a reset within the minute.
    pub fn admitted(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        limit: &str,
        remaining: u32,
    ) -> super::HttpResponse {
        let (r, what) = self.admitted_by_upstream(path, headers);
        self.check_x_headers(&r, &what, limit, remaining);
        r
    }

    /// GETs `path` and expects the upstream's 200 "ok"; returns it and how to name the call.
    fn admitted_by_upstream(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (super::HttpResponse, String) {
        let r = self.get(path, headers);
        let what = format!("GET {path} {headers:?}");
        assert_eq!(
            (r.status, r.body_text().as_str()),
            (200, "ok"),
            "{what}: admitted by the upstream expected; headers {:?}{}",
            r.headers,
            self.context()
        );
        (r, what)
    }

    /// Expects Envoy's 429 with `x-ratelimit-limit: limit` and nothing remaining.
    pub fn limited(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        limit: &str,
    ) -> super::HttpResponse {
        let r = self.get(path, headers);
        let what = format!("GET {path} {headers:?}");
        assert_eq!(
            r.status,
            429,
            "{what}: over the limit expected; body {:?} headers {:?}{}",
            r.body_text(),
            r.headers,
            self.context()
        );
        assert_eq!(
            r.header("x-envoy-ratelimited"),
            Some("true"),
            "{what}: headers {:?}",
            r.headers
        );
        self.check_x_headers(&r, &what, limit, 0);
        r
    }

    /// Expects `n` admissions, their remaining counting down to 0, then the 429.
    pub fn exhaust(&self, path: &str, headers: &[(&str, &str)], limit: &str, n: u32) {
        for remaining in (0..n).rev() {
            self.admitted(path, headers, limit, remaining);
        }
        self.limited(path, headers, limit);
    }

    /// Expects a 200 from the upstream without any `x-ratelimit-*` header: no limit applied
    /// (unlimited, no matching rule, or no descriptor at all).
    pub fn unlimited(&self, path: &str, headers: &[(&str, &str)]) -> super::HttpResponse {
        let (r, what) = self.admitted_by_upstream(path, headers);
        let x: Vec<_> = r
            .headers
            .iter()
            .filter(|(k, _)| k.to_ascii_lowercase().starts_with("x-ratelimit"))
            .collect();
        assert!(
            x.is_empty(),
            "{what}: no limit applies, yet {x:?}{}",
            self.context()
        );
        r
    }

    fn check_x_headers(&self, r: &super::HttpResponse, what: &str, limit: &str, remaining: u32) {
        let remaining = remaining.to_string();
        assert_eq!(
            (
                r.header("x-ratelimit-limit"),
                r.header("x-ratelimit-remaining")
            ),
            (Some(limit), Some(remaining.as_str())),
            "{what}: x-ratelimit-limit, x-ratelimit-remaining; headers {:?}{}",
            r.headers,
            self.context()
        );
        let reset = r.header("x-ratelimit-reset").and_then(|v| v.parse().ok());
        assert!(
            reset.is_some_and(|s| RESET_RANGE.contains(&s)),
            "{what}: x-ratelimit-reset {reset:?}, expected seconds in {RESET_RANGE:?}; headers {:?}",
            r.headers
        );
    }
}
