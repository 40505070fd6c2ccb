//! A small HTTP/1.1 client for a running service's admin endpoints (`/rlconfig`, `POST
//! /json`): plain `http://` only, every call bounded in time and in the bytes read.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

/// The longest answer read: a `/rlconfig` of many thousand rules stays far below.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// Connecting, sending and reading one answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// An admin address: `http://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminUrl {
    /// `host:port`, as connected to and sent in `Host`.
    authority: String,
    /// As given, for messages.
    pub shown: String,
}

impl AdminUrl {
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("--service {url}: expected `http://host:port` (the admin port; plain HTTP)")
        })?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "--service {url}: expected `http://host:port`, without a path"
            ));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Self {
            authority,
            shown: url.trim_end_matches('/').to_owned(),
        })
    }

    /// `method` on `path`; the status and the body as text.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, String), String> {
        tokio::time::timeout(TIMEOUT, self.call_once(method, path, body))
            .await
            .map_err(|_| format!("{}{path}: no answer within {TIMEOUT:?}", self.shown))?
    }

    async fn call_once(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, String), String> {
        let failed = |e: &dyn std::fmt::Display| format!("{}{path}: {e}", self.shown);
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| failed(&e))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(&e))?;
        let driver = tokio::spawn(connection);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.authority);
        if body.is_some() {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| failed(&e))?;
        let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
        let status = response.status().as_u16();
        let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| failed(&e))?
            .to_bytes();
        driver.abort();
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| failed(&"the answer is not UTF-8 text"))?;
        Ok((status, text))
    }
}
