//! Upstream's runtime directory: where envoyproxy/ratelimit's image reads its limits, for the
//! tests that start the binary as that image starts it ([`super::Service::start_upstream`]).

/// A temporary `RUNTIME_ROOT` holding `ratelimit/config/limits.yaml` (upstream reads
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/`). Keep it alive while the service runs.
pub struct UpstreamRuntime {
    _dir: tempfile::TempDir,
    /// The directory's path, as `RUNTIME_ROOT` takes it.
    pub root: String,
}

impl UpstreamRuntime {
    /// A runtime directory whose one limits file holds `yaml`.
    pub fn new(yaml: &str) -> UpstreamRuntime {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("ratelimit").join("config");
        std::fs::create_dir_all(&config).expect("create runtime dir");
        std::fs::write(config.join("limits.yaml"), yaml).expect("write limits");
        let root = dir.path().to_string_lossy().into_owned();
        UpstreamRuntime { _dir: dir, root }
    }

    /// Upstream's variables pointing at it (`RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`), with
    /// `USE_STATSD=false` (no statsd here; upstream's default is on), then `more`.
    pub fn env<'a>(&'a self, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env = vec![
            ("RUNTIME_ROOT", self.root.as_str()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("USE_STATSD", "false"),
        ];
        env.extend_from_slice(more);
        env
    }
}
