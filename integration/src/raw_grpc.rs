//! A gRPC call with a body of the test's choosing (garbage, a lying length prefix), over a
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
