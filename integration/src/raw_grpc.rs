//! A gRPC call with a head and body of the test's choosing (garbage, a lying length prefix,
//! compression, another method or content type, a reset), over a
//! plain HTTP/2 connection: what a broken or hostile client sends and tonic's client won't.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The gRPC status code and message the server answered to one unary call on `path` whose
/// body is exactly `body` (length prefix included).
pub async fn call(addr: SocketAddr, path: &str, body: Vec<u8>) -> (i32, String) {
    call_with(addr, path, body, true).await
}

/// As [`call`], but the request's body is left open after `body`: a client that stopped
/// sending in the middle of a message.
pub async fn call_unfinished(addr: SocketAddr, path: &str, body: Vec<u8>) -> (i32, String) {
    call_with(addr, path, body, false).await
}

async fn call_with(addr: SocketAddr, path: &str, body: Vec<u8>, end: bool) -> (i32, String) {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let (client, connection) = h2::client::handshake(tcp)
        .await
        .unwrap_or_else(|e| panic!("HTTP/2 handshake with {addr}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.expect("HTTP/2 connection ready");
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a valid request head");
    let (response, mut send) = client
        .send_request(request, false)
        .expect("open an HTTP/2 stream");
    // The server may answer before reading it all; a refused send is fine then.
    let _ = send.send_data(Bytes::from(body), end);
    let response = tokio::time::timeout(TIMEOUT, response)
        .await
        .expect("an answer within 10 s")
        .expect("an HTTP/2 response");
    let (head, mut body) = response.into_parts();
    let mut headers = head.headers;
    if !headers.contains_key("grpc-status") {
        // Not trailers-only: the status is in the trailers, after the body.
        while let Some(chunk) = tokio::time::timeout(TIMEOUT, body.data())
            .await
            .expect("the body within 10 s")
        {
            chunk.expect("a body chunk");
        }
        if let Some(trailers) = tokio::time::timeout(TIMEOUT, body.trailers())
            .await
            .expect("trailers within 10 s")
            .expect("trailers")
        {
            headers = trailers;
        }
    }
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no grpc-status in {headers:?}"));
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (code, message)
}

/// A gRPC length prefix (uncompressed) announcing `len` bytes, followed by `body`.
pub fn framed(len: u32, body: &[u8]) -> Vec<u8> {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(body);
    framed
}

/// A request head of the test's choosing, for [`exchange`].
pub struct Head {
    pub method: http::Method,
    /// `None`: no `content-type` at all.
    pub content_type: Option<&'static str>,
    pub headers: Vec<(&'static str, &'static str)>,
}

impl Head {
    /// A gRPC call's head: `POST`, `application/grpc`, `te: trailers`.
    pub fn grpc() -> Self {
        Self {
            method: http::Method::POST,
            content_type: Some("application/grpc"),
            headers: vec![("te", "trailers")],
        }
    }

    /// The same head with one more header.
    pub fn with(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// What the server did with one request of [`exchange`].
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per call of a test, read at once"
)]
pub enum Answered {
    /// A response: its head, whether the head ended the stream (no body, no trailers), its
    /// data and its trailers.
    Response {
        status: http::StatusCode,
        headers: http::HeaderMap,
        ended_with_head: bool,
        data: Vec<u8>,
        trailers: Option<http::HeaderMap>,
    },
    /// The server reset the stream (`RST_STREAM` with this reason) instead of answering.
    Reset(h2::Reason),
}

impl Answered {
    /// The gRPC status code: in the trailers, or in the head of a trailers-only answer.
    pub fn grpc_status(&self) -> Option<i32> {
        self.grpc_header("grpc-status")
            .and_then(|value| value.parse().ok())
    }

    /// A gRPC header (`grpc-status`, `grpc-message`, ...) of the trailers or of the head.
    pub fn grpc_header(&self, name: &str) -> Option<String> {
        let Answered::Response {
            headers, trailers, ..
        } = self
        else {
            return None;
        };
        trailers
            .as_ref()
            .and_then(|trailers| trailers.get(name))
            .or_else(|| headers.get(name))
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    }

    /// The length-prefixed messages of the response's data: (compressed flag, bytes).
    pub fn messages(&self) -> Vec<(u8, Vec<u8>)> {
        let Answered::Response { data, .. } = self else {
            return Vec::new();
        };
        let mut messages = Vec::new();
        let mut rest = &data[..];
        while rest.len() >= 5 {
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            let end = (5 + len).min(rest.len());
            messages.push((rest[0], rest[5..end].to_vec()));
            rest = &rest[end..];
        }
        messages
    }
}

/// One request on a new HTTP/2 connection: `head` on `path`, then `body` (sent only when
/// not empty), the request ended after it when `end`; what the server answered.
pub async fn exchange(
    addr: SocketAddr,
    path: &str,
    head: Head,
    body: Vec<u8>,
    end: bool,
) -> Answered {
    let mut client = connect(addr).await;
    let mut request = http::Request::builder()
        .method(head.method)
        .uri(format!("http://{addr}{path}"));
    if let Some(content_type) = head.content_type {
        request = request.header("content-type", content_type);
    }
    for (name, value) in head.headers {
        request = request.header(name, value);
    }
    let request = request.body(()).expect("a valid request head");
    let end_with_head = end && body.is_empty();
    let (response, mut send) = client
        .send_request(request, end_with_head)
        .expect("open an HTTP/2 stream");
    if !body.is_empty() {
        // The server may answer before reading it all; a refused send is fine then.
        let _ = send.send_data(Bytes::from(body), end);
    }
    let response = match tokio::time::timeout(TIMEOUT, response)
        .await
        .expect("an answer within 10 s")
    {
        Ok(response) => response,
        Err(error) => match error.reason() {
            Some(reason) if error.is_reset() => return Answered::Reset(reason),
            _ => panic!("the stream failed without a reset: {error}"),
        },
    };
    let (head, mut body) = response.into_parts();
    let ended_with_head = body.is_end_stream();
    let mut data = Vec::new();
    while let Some(chunk) = tokio::time::timeout(TIMEOUT, body.data())
        .await
        .expect("the body within 10 s")
    {
        match chunk {
            Ok(chunk) => data.extend_from_slice(&chunk),
            Err(error) => match error.reason() {
                Some(reason) if error.is_reset() => return Answered::Reset(reason),
                _ => panic!("the body failed without a reset: {error}"),
            },
        }
    }
    let trailers = tokio::time::timeout(TIMEOUT, body.trailers())
        .await
        .expect("trailers within 10 s")
        .unwrap_or_else(|error| panic!("trailers: {error}"));
    Answered::Response {
        status: head.status,
        headers: head.headers,
        ended_with_head,
        data,
        trailers,
    }
}

/// A gRPC call on `path` whose client sends `body` and then resets the stream with
/// `RST_STREAM(CANCEL)` instead of ending its request. Returns once the server has read the
/// reset (a PING sent after it came back).
pub async fn send_then_cancel(addr: SocketAddr, path: &str, body: Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let (client, mut connection) = h2::client::handshake(tcp)
        .await
        .unwrap_or_else(|e| panic!("HTTP/2 handshake with {addr}: {e}"));
    let mut ping = connection.ping_pong().expect("the connection's ping");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.expect("HTTP/2 connection ready");
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a valid request head");
    let (_response, mut send) = client
        .send_request(request, false)
        .expect("open an HTTP/2 stream");
    send.send_data(Bytes::from(body), false)
        .expect("the body sent");
    send.send_reset(h2::Reason::CANCEL);
    tokio::time::timeout(TIMEOUT, ping.ping(h2::Ping::opaque()))
        .await
        .expect("a PING answered within 10 s")
        .expect("a PING answered");
    drop((client, send));
    driver.abort();
}

async fn connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let (client, connection) = h2::client::handshake(tcp)
        .await
        .unwrap_or_else(|e| panic!("HTTP/2 handshake with {addr}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client.ready().await.expect("HTTP/2 connection ready")
}

/// `message` compressed with gRPC's `gzip` or `deflate` (zlib), framed with the compressed
/// flag set.
pub fn compressed(encoding: &str, message: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let level = flate2::Compression::best();
    let bytes = match encoding {
        "gzip" => {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
            encoder.write_all(message).expect("compressed in memory");
            encoder.finish().expect("compressed in memory")
        }
        "deflate" => {
            let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), level);
            encoder.write_all(message).expect("compressed in memory");
            encoder.finish().expect("compressed in memory")
        }
        other => panic!("no encoder for {other}"),
    };
    let mut framed = framed(u32::try_from(bytes.len()).expect("a small message"), &bytes);
    framed[0] = 1;
    framed
}
