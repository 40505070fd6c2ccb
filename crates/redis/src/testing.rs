//! Throwaway `redis-server` processes for tests: a plain node, a TLS node, a Redis Cluster.
//!
//! Only std and `tempfile`; other crates' tests use it through the `testing` feature. Servers
//! are killed when their handle drops (also when a test panics); each keeps its files in its
//! own temp dir.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to start Redis on this machine, for failure messages.
pub const HOW_TO_START_REDIS: &str = "install it (apt-get install redis-server) and start it \
     with `redis-server --daemonize yes --port 6379 --save '' --appendonly no` \
     (or run `bash .ci/services.sh`)";

/// A key prefix no other test, process or earlier run uses (no `{` or `}`, so any Redis
/// and any cluster slot takes it): `test` names the test in what it leaves behind.
pub fn unique_prefix(test: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "it:{test}:{}:{nanos}:{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One port as [`free_ports`] finds them.
pub fn one_free_port() -> Result<u16, String> {
    free_ports(1)?
        .first()
        .copied()
        .ok_or_else(|| "no free port".to_owned())
}

/// Ports free on 127.0.0.1 whose cluster-bus port (+10000) is free too.
pub fn free_ports(count: usize) -> Result<Vec<u16>, String> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..200 {
        if ports.len() == count {
            break;
        }
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot bind a port: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("no local address: {e}"))?
            .port();
        let Some(bus) = port.checked_add(10_000) else {
            held.push(listener);
            continue;
        };
        if let Ok(bus_listener) = TcpListener::bind(("127.0.0.1", bus)) {
            ports.push(port);
            held.push(bus_listener);
        }
        // Held until all are chosen, so one call never returns the same port twice.
        held.push(listener);
    }
    if ports.len() == count {
        Ok(ports)
    } else {
        Err(format!("found only {} free port pairs", ports.len()))
    }
}

/// One `redis-server` child process.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` with `args` (after the common ones) and waits until it serves.
    fn start(dir: &Path, port: u16, args: &[String]) -> Result<Self, String> {
        let log = dir.join(format!("redis-{port}.log"));
        let mut command = Command::new("redis-server");
        command
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command
            .spawn()
            .map_err(|e| format!("cannot run redis-server ({e}): {HOW_TO_START_REDIS}"))?;
        let mut server = Self { child, port, log };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains("Ready to accept connections") {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "redis-server on {} exited ({status}):\n{log}",
                    self.port
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "redis-server on {} not ready after 10 s:\n{log}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir() -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("gcrls-redis-")
        .tempdir()
        .map_err(|e| format!("cannot make a temp dir: {e}"))
}

/// A plain standalone Redis on a fresh port.
pub struct PlainRedis {
    pub server: RedisServer,
    _dir: tempfile::TempDir,
}

impl PlainRedis {
    pub fn start() -> Result<Self, String> {
        let port = one_free_port()?;
        Self::start_on(port)
    }

    pub fn start_on(port: u16) -> Result<Self, String> {
        let dir = temp_dir()?;
        let server = RedisServer::start(dir.path(), port, &["--port".into(), port.to_string()])?;
        Ok(Self { server, _dir: dir })
    }

    /// For a test: a dedicated node, or the test fails saying what is missing.
    pub fn start_or_fail() -> Self {
        Self::start().unwrap_or_else(|e| {
            panic!(
                "Redis is missing: cannot start a dedicated redis-server: {e}\n{HOW_TO_START_REDIS}"
            )
        })
    }

    pub fn url(&self) -> String {
        self.server.url()
    }
}

/// A Redis Cluster of primaries only, every slot assigned, `cluster_state:ok` on every node.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts `count` (at least 3) nodes on fresh ports; retries if another test took a port.
    pub fn start(count: usize) -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_on(&free_ports(count)?) {
                Ok(cluster) => return Ok(cluster),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    /// For a test: a cluster of `count` nodes, or the test fails saying what is missing.
    pub fn start_or_fail(count: usize) -> Self {
        Self::start(count).unwrap_or_else(|e| {
            panic!("Redis Cluster is missing: cannot start {count} redis-server nodes: {e}\n{HOW_TO_START_REDIS}")
        })
    }

    pub fn start_on(ports: &[u16]) -> Result<Self, String> {
        let dir = temp_dir()?;
        let mut nodes = Vec::new();
        for &port in ports {
            let args = [
                "--port".to_owned(),
                port.to_string(),
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                format!("nodes-{port}.conf"),
                "--cluster-node-timeout".into(),
                "2000".into(),
                // Surviving nodes keep serving their slots when a test kills one.
                "--cluster-require-full-coverage".into(),
                "no".into(),
            ];
            nodes.push(RedisServer::start(dir.path(), port, &args)?);
        }
        let cluster = Self { nodes, _dir: dir };
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run redis-cli: {e}"))?;
        if !created.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed:\n{}{}",
                String::from_utf8_lossy(&created.stdout),
                String::from_utf8_lossy(&created.stderr)
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for &port in ports {
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "cluster", "info"])
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("cannot run redis-cli: {e}"))?;
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "cluster node {port} never reached cluster_state:ok"
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(cluster)
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// A Redis serving only TLS, with a certificate for 127.0.0.1 and localhost signed by a CA
/// made for it (by the `openssl` command).
pub struct TlsRedis {
    pub server: RedisServer,
    /// The CA certificate (PEM) that signed the server's.
    pub ca_pem: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    pub fn start() -> Result<Self, String> {
        let dir = temp_dir()?;
        let path = dir.path();
        std::fs::write(
            path.join("server.ext"),
            "basicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\n\
             subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .map_err(|e| format!("cannot write the certificate extensions: {e}"))?;
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            path,
            &[
                &["req", "-x509"],
                &ec[..],
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=gcrls test CA",
                ],
            ],
        )?;
        openssl(
            path,
            &[
                &["req"],
                &ec[..],
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=localhost",
                ],
            ],
        )?;
        openssl(
            path,
            &[&[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ]],
        )?;
        let ca_pem = std::fs::read(path.join("ca.crt"))
            .map_err(|e| format!("cannot read the CA certificate: {e}"))?;
        let port = one_free_port()?;
        let file = |name: &str| path.join(name).to_string_lossy().into_owned();
        let args = [
            "--port".to_owned(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            file("server.crt"),
            "--tls-key-file".into(),
            file("server.key"),
            "--tls-ca-cert-file".into(),
            file("ca.crt"),
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        let server = RedisServer::start(path, port, &args)?;
        Ok(Self {
            server,
            ca_pem,
            _dir: dir,
        })
    }

    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.server.port)
    }
}

fn openssl(dir: &Path, parts: &[&[&str]]) -> Result<(), String> {
    let args: Vec<&str> = parts.iter().flat_map(|part| part.iter().copied()).collect();
    let output = Command::new("openssl")
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run openssl ({e}); install it (apt-get install openssl)"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
