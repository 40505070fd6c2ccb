//! A TCP proxy whose link a test can cut and restore: put it between the service and a
//! backend (Redis) to make the backend vanish without stopping it, then come back.
//!
//! It runs on its own thread with its own Tokio runtime, so it keeps forwarding whatever the
//! test's thread or runtime does (blocking calls included); dropping it stops it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How the link fails while it is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// New connections are accepted and reset at once (as a closed port, but instantly).
    Refuse,
    /// New connections are accepted and then never answered: a partition, where only
    /// timeouts help. They are reset when the link is restored.
    Blackhole,
    /// As `Blackhole`, and open connections are not reset but frozen: nothing more goes
    /// through them either way (a partition that drops packets). Reset on restore.
    Freeze,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    Cut(Cut),
    Stop,
}

/// A running proxy from `addr` to an upstream address; stopped on drop.
pub struct Proxy {
    /// Where clients connect (127.0.0.1, a free port).
    pub addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    /// Milliseconds each chunk from the upstream waits before it is forwarded (0: none).
    delay_ms: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<free port>` to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy port");
        listener
            .set_nonblocking(true)
            .expect("make the proxy listener non-blocking");
        let addr = listener.local_addr().expect("proxy local address");
        let mode = Arc::new(watch::Sender::new(Mode::Forward));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let thread = {
            let mode = Arc::clone(&mode);
            let delay = Arc::clone(&delay_ms);
            std::thread::Builder::new()
                .name(format!("proxy-{}", addr.port()))
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("proxy runtime");
                    // Dropping the runtime afterwards drops every connection task.
                    runtime.block_on(serve(listener, upstream, mode, delay));
                })
                .expect("spawn the proxy thread")
        };
        Proxy {
            addr,
            mode,
            delay_ms,
            thread: Some(thread),
        }
    }

    /// Answers take `delay` longer: each chunk from the upstream waits that long before it
    /// is forwarded (a slow backend, or a long round trip). Zero turns it off.
    pub fn delay(&self, delay: std::time::Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::Relaxed);
    }

    /// `redis://` at the proxy's address, for a Redis behind it.
    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Resets every open connection (or freezes it, for [`Cut::Freeze`]); new ones fail as
    /// `how` says until [`Proxy::restore`].
    pub fn cut(&self, how: Cut) {
        self.mode.send_replace(Mode::Cut(how));
    }

    /// Forwards new connections again (connections held by a blackhole are reset).
    pub fn restore(&self) {
        self.mode.send_replace(Mode::Forward);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    upstream: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    delay_ms: Arc<AtomicU64>,
) {
    let listener = TcpListener::from_std(listener).expect("proxy listener into Tokio");
    let mut stop = mode.subscribe();
    loop {
        let socket = tokio::select! {
            socket = listener.accept() => socket,
            _ = stop.wait_for(|m| *m == Mode::Stop) => return,
        };
        let Ok((socket, _)) = socket else {
            // Out of file descriptors or similar: try again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        // Subscribed before reading the mode: a change in between is seen by the task.
        let changes = mode.subscribe();
        let now = *mode.borrow();
        tokio::spawn(connection(
            socket,
            upstream,
            now,
            changes,
            Arc::clone(&delay_ms),
        ));
    }
}

async fn connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    mode: Mode,
    mut changes: watch::Receiver<Mode>,
    delay_ms: Arc<AtomicU64>,
) {
    match mode {
        Mode::Forward => {
            let Ok(mut server) = TcpStream::connect(upstream).await else {
                let _ = client.set_zero_linger();
                return;
            };
            let (mut client_read, mut client_write) = client.split();
            let (mut server_read, mut server_write) = server.split();
            let cut = tokio::select! {
                _ = async {
                    tokio::join!(
                        async {
                            let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                            let _ = tokio::io::AsyncWriteExt::shutdown(&mut server_write).await;
                        },
                        delayed_copy(&mut server_read, &mut client_write, &delay_ms),
                    )
                } => None,
                mode = changes.wait_for(|m| *m != Mode::Forward) => mode.ok().map(|m| *m),
            };
            if cut == Some(Mode::Cut(Cut::Freeze)) {
                // Hold both ends without reading or writing until the mode changes.
                let _ = changes.wait_for(|m| *m != Mode::Cut(Cut::Freeze)).await;
            }
            if cut.is_some() {
                // A reset, not a clean close: bytes in flight are lost, as in a real cut.
                let _ = client.set_zero_linger();
                let _ = server.set_zero_linger();
            }
        }
        Mode::Cut(Cut::Refuse) => {
            let _ = client.set_zero_linger();
        }
        Mode::Cut(how @ (Cut::Blackhole | Cut::Freeze)) => {
            // Never read, never answer; hold the socket until the mode changes.
            let _ = changes.wait_for(|m| *m != Mode::Cut(how)).await;
            let _ = client.set_zero_linger();
        }
        Mode::Stop => {}
    }
}

/// Copies `from` into `to`, each chunk `delay_ms` late (read at each chunk).
async fn delayed_copy(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    delay_ms: &AtomicU64,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// A throwaway `redis-server` (failing the test with what is missing) behind a [`Proxy`], and
/// a key prefix of the test's own (`test` names it): connect the service to
/// `proxy.redis_url()`, cut or slow the link with the proxy, look at the server itself
/// through the first.
pub fn proxied_redis(test: &str) -> (gcounter_redis::testing::PlainRedis, Proxy, String) {
    let redis = gcounter_redis::testing::PlainRedis::start_or_fail();
    let proxy = Proxy::start(crate::local_addr(redis.server.port));
    (redis, proxy, gcounter_redis::testing::unique_prefix(test))
}

/// A service counting one daily rule (`domain`, key `user`, `limit`) on the Redis behind
/// `proxy`, waiting up to `read_timeout` for a Redis answer and replaying only when it stops
/// (`--replay-interval 1h`): no regular replay in flight can hide a race at shutdown, and the
/// final replay carries every decision. Starts well away from a day's boundary.
pub fn replaying_only_at_stop(
    proxy: &Proxy,
    prefix: &str,
    domain: &str,
    limit: u64,
    read_timeout: &str,
) -> (tempfile::TempDir, crate::Service) {
    crate::avoid_window_boundary(
        std::time::Duration::from_secs(86_400),
        std::time::Duration::from_secs(60),
    );
    let (dir, path) = crate::limits_file(&crate::one_rule(domain, "user", "day", 1, limit));
    let url = proxy.redis_url();
    let extra = [
        "--redis-read-timeout",
        read_timeout,
        "--replay-interval",
        "1h",
    ];
    let service =
        crate::Service::start(&path, &crate::redis_admin::redis_args(&url, prefix, &extra));
    (dir, service)
}
