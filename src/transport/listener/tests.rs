use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn settings(max_connections: usize, preface_timeout: Duration) -> ListenerSettings {
    ListenerSettings {
        name: "test",
        max_connections,
        preface_bytes: 4,
        preface_timeout,
        max_accept_backoff: Duration::from_millis(100),
        tcp_keepalive: None,
    }
}

/// A bounded listener on a free loopback port, and its address.
async fn listening(
    max_connections: usize,
    preface_timeout: Duration,
) -> (BoundedListener, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let settings = settings(max_connections, preface_timeout);
    let bounded = BoundedListener::new(listener, settings, ConnectionMetrics::default());
    (bounded, addr)
}

#[tokio::test]
async fn the_cap_holds_and_a_closed_connection_frees_its_slot() {
    let (mut bounded, addr) = listening(1, Duration::from_secs(60)).await;
    let _a = TcpStream::connect(addr).await.expect("connect a");
    let _b = TcpStream::connect(addr).await.expect("connect b");
    let first = bounded.accept().await;
    let second = tokio::time::timeout(Duration::from_millis(200), bounded.accept()).await;
    assert!(
        second.is_err(),
        "a second connection was accepted over a cap of 1"
    );
    drop(first);
    tokio::time::timeout(Duration::from_secs(5), bounded.accept())
        .await
        .expect("the slot of a closed connection is reused");
}

#[tokio::test]
async fn a_silent_connection_fails_its_read_after_the_preface_timeout() {
    let (mut bounded, addr) = listening(4, Duration::from_millis(100)).await;

    let _silent = TcpStream::connect(addr).await.expect("connect");
    let mut conn = bounded.accept().await;
    let mut buf = [0u8; 8];
    let error = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
        .await
        .expect("the read ends")
        .expect_err("a silent peer times out");
    assert_eq!(error.kind(), io::ErrorKind::TimedOut);

    // A peer that sends its preface in time is not cut later.
    let mut talker = TcpStream::connect(addr).await.expect("connect");
    talker.write_all(b"PRI *").await.expect("write");
    let mut conn = bounded.accept().await;
    let n = conn.read(&mut buf).await.expect("read the preface");
    assert!(n >= 4, "read {n} bytes");
    tokio::time::sleep(Duration::from_millis(200)).await;
    talker.write_all(b"x").await.expect("write");
    let n = conn
        .read(&mut buf)
        .await
        .expect("no timeout after the preface");
    assert_eq!(n, 1);
}
