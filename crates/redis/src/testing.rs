//! Throwaway `redis-server` processes for tests: a plain node, a TLS node (optionally asking
//! for client certificates), a node on a Unix socket with a password, a Redis Cluster, and a
//! Sentinel set (master, replica, three sentinels) that can fail over.
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

    /// Starts `redis-server <config> --sentinel` (a sentinel needs a config file it can
    /// rewrite) and waits until it monitors its master.
    fn start_sentinel(dir: &Path, port: u16, config: &Path) -> Result<Self, String> {
        let log = dir.join(format!("sentinel-{port}.log"));
        let child = Command::new("redis-server")
            .arg(config)
            .arg("--sentinel")
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run redis-server ({e}): {HOW_TO_START_REDIS}"))?;
        let mut server = Self { child, port, log };
        server.wait_for("+monitor master")?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        // "Ready to accept connections tcp", or "… now ready to accept connections at <socket>".
        self.wait_for("eady to accept connections")
    }

    fn wait_for(&mut self, line: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(line) {
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

    /// Kills the process now (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's log so far, for a failure message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
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
                if redis_cli(port, None, &["cluster", "info"])?.contains("cluster_state:ok") {
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

/// A Redis serving only TLS, with a certificate signed by a CA made for it (by the `openssl`
/// command), and a client certificate signed by the same CA.
pub struct TlsRedis {
    pub server: RedisServer,
    /// The CA certificate (PEM) that signed the server's and the client's.
    pub ca_pem: Vec<u8>,
    /// The same CA, the client certificate and its key, as files (for the binary's settings).
    pub ca_file: PathBuf,
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    _dir: tempfile::TempDir,
}

/// How a [`TlsRedis`] is made.
#[derive(Debug, Clone, Copy)]
pub struct TlsOptions {
    /// `tls-auth-clients yes`: a client without a certificate the CA signed is refused.
    pub auth_clients: bool,
    /// The server certificate's subjectAltName (`DNS:localhost,IP:127.0.0.1` by default); a
    /// name that is not 127.0.0.1 fails the hostname check.
    pub server_names: &'static str,
}

impl Default for TlsOptions {
    fn default() -> Self {
        Self {
            auth_clients: false,
            server_names: "DNS:localhost,IP:127.0.0.1",
        }
    }
}

impl TlsRedis {
    pub fn start() -> Result<Self, String> {
        Self::start_with(TlsOptions::default())
    }

    pub fn start_with(options: TlsOptions) -> Result<Self, String> {
        let dir = temp_dir()?;
        let path = dir.path();
        let write = |name: &str, text: String| {
            std::fs::write(path.join(name), text)
                .map_err(|e| format!("cannot write the certificate extensions: {e}"))
        };
        write(
            "server.ext",
            format!(
                "basicConstraints=CA:FALSE\n\
                 keyUsage=critical,digitalSignature,keyEncipherment\n\
                 extendedKeyUsage=serverAuth\n\
                 subjectAltName={}\n",
                options.server_names
            ),
        )?;
        write(
            "client.ext",
            "basicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=clientAuth\n"
                .to_owned(),
        )?;
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
        for (name, subject) in [("server", "/CN=localhost"), ("client", "/CN=gcrls client")] {
            let key = format!("{name}.key");
            let csr = format!("{name}.csr");
            let crt = format!("{name}.crt");
            let ext = format!("{name}.ext");
            openssl(
                path,
                &[
                    &["req"],
                    &ec[..],
                    &["-keyout", &key, "-out", &csr, "-subj", subject],
                ],
            )?;
            openssl(
                path,
                &[&[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &crt,
                    "-days",
                    "2",
                    "-extfile",
                    &ext,
                ]],
            )?;
        }
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
            if options.auth_clients { "yes" } else { "no" }.into(),
        ];
        let server = RedisServer::start(path, port, &args)?;
        Ok(Self {
            server,
            ca_pem,
            ca_file: path.join("ca.crt"),
            client_cert_file: path.join("client.crt"),
            client_key_file: path.join("client.key"),
            _dir: dir,
        })
    }

    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.server.port)
    }
}

/// A Redis listening only on a Unix socket, with a password (`requirepass`).
pub struct UnixRedis {
    pub server: RedisServer,
    pub socket: PathBuf,
    pub password: String,
    _dir: tempfile::TempDir,
}

impl UnixRedis {
    pub fn start(password: &str) -> Result<Self, String> {
        let dir = temp_dir()?;
        let socket = dir.path().join("redis.sock");
        let args = [
            "--port".to_owned(),
            "0".into(),
            "--unixsocket".into(),
            socket.to_string_lossy().into_owned(),
            "--unixsocketperm".into(),
            "700".into(),
            "--requirepass".into(),
            password.into(),
        ];
        // `port` only names the log file here: nothing listens on TCP.
        let server = RedisServer::start(dir.path(), one_free_port()?, &args)?;
        Ok(Self {
            server,
            socket,
            password: password.to_owned(),
            _dir: dir,
        })
    }

    /// `redis+unix:///path?pass=…`.
    pub fn url(&self) -> String {
        format!(
            "redis+unix://{}?pass={}",
            self.socket.to_string_lossy(),
            self.password
        )
    }
}

/// Redis Sentinel: a master, one replica of it, and three sentinels watching it as `name`
/// (quorum 2, a master is down after 1 s), optionally with passwords on the data nodes
/// (`requirepass`/`masterauth`) and on the sentinels.
pub struct SentinelSet {
    pub name: String,
    /// The data nodes, master first (as started; a failover swaps their roles).
    pub nodes: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
    pub node_password: Option<String>,
    pub sentinel_password: Option<String>,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    pub fn start(
        name: &str,
        node_password: Option<&str>,
        sentinel_password: Option<&str>,
    ) -> Result<Self, String> {
        let dir = temp_dir()?;
        let ports = free_ports(5)?;
        let [master, replica, sentinel_ports @ ..] = ports.as_slice() else {
            return Err("free_ports(5) gave fewer ports".into());
        };
        let (master, replica) = (*master, *replica);
        let auth = |args: &mut Vec<String>| {
            if let Some(password) = node_password {
                args.extend([
                    "--requirepass".into(),
                    password.into(),
                    "--masterauth".into(),
                    password.into(),
                ]);
            }
        };
        let mut args = vec!["--port".to_owned(), master.to_string()];
        auth(&mut args);
        let mut nodes = vec![RedisServer::start(dir.path(), master, &args)?];
        let mut args = vec![
            "--port".to_owned(),
            replica.to_string(),
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.to_string(),
        ];
        auth(&mut args);
        nodes.push(RedisServer::start(dir.path(), replica, &args)?);
        let mut sentinels = Vec::new();
        // `failover-timeout` also spaces a sentinel's failover attempts (twice it): with the
        // default-like 10 s, one split leader vote after a killed master delayed the new
        // master past 30 s (seen once under CI load). 3 s retries within 6 s.
        for &port in sentinel_ports {
            let mut config = format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {name} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir.path().display()
            );
            if let Some(password) = node_password {
                config.push_str(&format!("sentinel auth-pass {name} {password}\n"));
            }
            if let Some(password) = sentinel_password {
                config.push_str(&format!(
                    "requirepass {password}\nsentinel sentinel-pass {password}\n"
                ));
            }
            let file = dir.path().join(format!("sentinel-{port}.conf"));
            std::fs::write(&file, config)
                .map_err(|e| format!("cannot write a sentinel's config: {e}"))?;
            sentinels.push(RedisServer::start_sentinel(dir.path(), port, &file)?);
        }
        let set = Self {
            name: name.to_owned(),
            nodes,
            sentinels,
            node_password: node_password.map(str::to_owned),
            sentinel_password: sentinel_password.map(str::to_owned),
            _dir: dir,
        };
        set.tolerate_a_busy_machine()?;
        set.wait_until_watched()?;
        Ok(set)
    }

    /// A sentinel whose timer runs more than 2 s late (its config file's fsync behind a busy
    /// disk, a starved CPU) enters TILT mode and acts on nothing for 30 s, so a failover a
    /// test asked for would not come within its wait. The set's sentinels tolerate 10 s late.
    fn tolerate_a_busy_machine(&self) -> Result<(), String> {
        for sentinel in &self.sentinels {
            let reply =
                self.sentinel_cli(sentinel, &["SENTINEL", "DEBUG", "tilt-trigger", "10000"])?;
            if !reply.contains("OK") {
                return Err(format!(
                    "sentinel {} refused SENTINEL DEBUG tilt-trigger (Redis 7 or later is needed): {reply}",
                    sentinel.port
                ));
            }
        }
        Ok(())
    }

    /// For a test: the set, or the test fails saying what is missing.
    pub fn start_or_fail(
        name: &str,
        node_password: Option<&str>,
        sentinel_password: Option<&str>,
    ) -> Self {
        Self::start(name, node_password, sentinel_password).unwrap_or_else(|e| {
            panic!("Redis Sentinel is missing: cannot start a master, a replica and three sentinels: {e}\n{HOW_TO_START_REDIS}")
        })
    }

    /// `redis-cli` against a sentinel (its password given).
    fn sentinel_cli(&self, sentinel: &RedisServer, args: &[&str]) -> Result<String, String> {
        redis_cli(sentinel.port, self.sentinel_password.as_deref(), args)
    }

    /// `redis-cli` against a data node.
    pub fn node_cli(&self, port: u16, args: &[&str]) -> Result<String, String> {
        redis_cli(port, self.node_password.as_deref(), args)
    }

    /// Every sentinel knows the replica and the two other sentinels (a failover needs both).
    fn wait_until_watched(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        for sentinel in &self.sentinels {
            loop {
                let replicas =
                    self.sentinel_cli(sentinel, &["SENTINEL", "REPLICAS", &self.name])?;
                let others = self.sentinel_cli(sentinel, &["SENTINEL", "SENTINELS", &self.name])?;
                let replica_port = self.nodes.get(1).map(|n| n.port.to_string());
                let known_sentinels = self
                    .sentinels
                    .iter()
                    .filter(|s| others.contains(&s.port.to_string()))
                    .count();
                if replica_port.is_some_and(|port| replicas.contains(&port)) && known_sentinels == 2
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "sentinel {} does not know the replica and the other sentinels after 30 s:\n{replicas}\n{others}\n{}",
                        sentinel.port,
                        sentinel.log()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The sentinels' URLs, `redis://[:password@]127.0.0.1:port`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        let auth = self
            .sentinel_password
            .as_ref()
            .map_or(String::new(), |p| format!(":{p}@"));
        self.sentinels
            .iter()
            .map(|s| format!("redis://{auth}127.0.0.1:{}", s.port))
            .collect()
    }

    /// `127.0.0.1:port` of each sentinel, as upstream's REDIS_URL lists them.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The port the sentinels name as master now (the first sentinel that answers).
    pub fn master_port(&self) -> Result<u16, String> {
        for sentinel in &self.sentinels {
            let reply = self.sentinel_cli(
                sentinel,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name],
            )?;
            if let Some(port) = reply.lines().nth(1).and_then(|p| p.trim().parse().ok()) {
                return Ok(port);
            }
        }
        Err("no sentinel names a master".into())
    }

    /// `SENTINEL FAILOVER`: the replica becomes master. Returns the new master's port once
    /// the sentinels name it and it answers as master.
    pub fn failover(&self) -> Result<u16, String> {
        let old = self.master_port()?;
        let sentinel = self.sentinels.first().ok_or("no sentinel")?;
        let reply = self.sentinel_cli(sentinel, &["SENTINEL", "FAILOVER", &self.name])?;
        if !reply.contains("OK") {
            return Err(format!("SENTINEL FAILOVER refused: {reply}"));
        }
        self.wait_for_new_master(old, Duration::from_secs(30))
    }

    /// Waits until the sentinels name a master other than `old` and it answers as master.
    pub fn wait_for_new_master(&self, old: u16, within: Duration) -> Result<u16, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(port) = self.master_port()
                && port != old
                && self
                    .node_cli(port, &["ROLE"])
                    .is_ok_and(|role| role.starts_with("master"))
            {
                return Ok(port);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no new master after {within:?}:\n{}",
                    self.sentinels
                        .first()
                        .map(RedisServer::log)
                        .unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The data node on `port`.
    pub fn node_mut(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.nodes.iter_mut().find(|n| n.port == port)
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

/// `redis-cli -p port [-a password] args…` on 127.0.0.1: its standard output (a failed
/// command's error reply included; only a missing `redis-cli` is an error).
fn redis_cli(port: u16, password: Option<&str>, args: &[&str]) -> Result<String, String> {
    let mut command = Command::new("redis-cli");
    command.args(["-h", "127.0.0.1", "-p", &port.to_string()]);
    if let Some(password) = password {
        command.args(["--no-auth-warning", "-a", password]);
    }
    let output = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run redis-cli: {e}"))?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
