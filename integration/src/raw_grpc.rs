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

/// A gRPC call on `path` whose client sends `body` and then `RST_STREAM(reason)` where
/// END_STREAM should be, both in one write: the server reads the message and the reset
/// together, as from a client that gives up at once. Written as raw frames, because h2's
/// client drops a stream's queued DATA when the stream is reset. Returns once the server
/// answered a PING sent after them: it has read the reset.
pub async fn send_then_reset(addr: SocketAddr, path: &str, body: Vec<u8>, reason: h2::Reason) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const DATA: u8 = 0x0;
    const HEADERS: u8 = 0x1;
    const RST_STREAM: u8 = 0x3;
    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const END_HEADERS: u8 = 0x4;
    const ACK: u8 = 0x1;

    let authority = addr.to_string();
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority.as_str()),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        hpack_literal(&mut block, name, value);
    }
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend(frame(SETTINGS, 0, 0, &[]));
    wire.extend(frame(HEADERS, END_HEADERS, 1, &block));
    wire.extend(frame(DATA, 0, 1, &body));
    wire.extend(frame(RST_STREAM, 0, 1, &u32::from(reason).to_be_bytes()));
    wire.extend(frame(PING, 0, 0, b"reset?!!"));

    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    tcp.write_all(&wire).await.expect("the frames written");
    let answered = async {
        loop {
            let mut head = [0u8; 9];
            tcp.read_exact(&mut head).await?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            tcp.read_exact(&mut payload).await?;
            if head[3] == PING && head[4] & ACK != 0 {
                return Ok::<_, std::io::Error>(());
            }
        }
    };
    tokio::time::timeout(TIMEOUT, answered)
        .await
        .expect("a PING answered within 10 s")
        .expect("the connection open until the PING's answer");
}

/// An HTTP/2 frame: its 9-byte head, then `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a frame under 16 MiB");
    let mut frame = len.to_be_bytes()[1..].to_vec();
    frame.extend([kind, flags]);
    frame.extend(stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A header as HPACK's "literal without indexing, new name", unencoded strings under 127
/// bytes (RFC 7541, 6.2.2).
fn hpack_literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0);
    for text in [name, value] {
        let len = u8::try_from(text.len()).ok().filter(|len| *len < 127);
        block.push(len.expect("a header under 127 bytes"));
        block.extend_from_slice(text.as_bytes());
    }
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
