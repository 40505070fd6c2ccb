//! Sending statsd lines: over UDP in datagrams of at most 1,432 bytes (what lyft/gostats and
//! datadog-go send, so none is fragmented on a 1,500-byte MTU), or over one TCP connection
//! (gostats' default) kept open and made again when it fails. Every step is bounded in time;
//! the collector's name is resolved at each connection, as Go's dialer does.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

/// How statsd lines travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Tcp,
    Udp,
}

/// The largest datagram.
pub const DATAGRAM_BYTES: usize = 1_432;
/// gostats' dial timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1_500);
/// For one flush's lines (gostats allows a second per buffer).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a flush was not sent; the counts go with the next one.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot resolve {target}: {reason}")]
    Resolve { target: String, reason: String },
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    #[error("cannot send to {addr}: {reason}")]
    Send { addr: SocketAddr, reason: String },
}

/// Where the lines go, and the connection or socket they go through.
#[derive(Debug)]
pub struct Sink {
    target: String,
    protocol: Protocol,
    tcp: Option<(SocketAddr, TcpStream)>,
    udp: Option<UdpSocket>,
}

impl Sink {
    pub fn new(target: String, protocol: Protocol) -> Self {
        Self {
            target,
            protocol,
            tcp: None,
            udp: None,
        }
    }

    /// Sends `payload` (whole lines, each ending in `\n`). On an error the TCP connection is
    /// dropped, to be made again next time.
    pub async fn send(&mut self, payload: &str) -> Result<(), SendError> {
        match self.protocol {
            Protocol::Udp => self.send_udp(payload).await,
            Protocol::Tcp => {
                let outcome = self.send_tcp(payload).await;
                if outcome.is_err() {
                    self.tcp = None;
                }
                outcome
            }
        }
    }

    async fn resolve(&self) -> Result<SocketAddr, SendError> {
        let failed = |reason: String| SendError::Resolve {
            target: self.target.clone(),
            reason,
        };
        let found = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host(&self.target))
            .await
            .map_err(|_| failed("timed out".into()))?
            .map_err(|e| failed(e.to_string()))?
            .next();
        found.ok_or_else(|| failed("no address".into()))
    }

    async fn send_tcp(&mut self, payload: &str) -> Result<(), SendError> {
        if self.tcp.is_none() {
            let addr = self.resolve().await?;
            let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await;
            let stream = match connect {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    return Err(SendError::Connect {
                        addr,
                        reason: e.to_string(),
                    });
                }
                Err(_) => {
                    return Err(SendError::Connect {
                        addr,
                        reason: "timed out".into(),
                    });
                }
            };
            self.tcp = Some((addr, stream));
        }
        let Some((addr, stream)) = self.tcp.as_mut() else {
            return Ok(());
        };
        let addr = *addr;
        match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(payload.as_bytes())).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SendError::Send {
                addr,
                reason: e.to_string(),
            }),
            Err(_) => Err(SendError::Send {
                addr,
                reason: "timed out".into(),
            }),
        }
    }

    async fn send_udp(&mut self, payload: &str) -> Result<(), SendError> {
        let addr = self.resolve().await?;
        let fresh = match &self.udp {
            Some(socket) => socket
                .local_addr()
                .is_ok_and(|local| local.is_ipv4() != addr.is_ipv4()),
            None => true,
        };
        if fresh {
            let any: SocketAddr = if addr.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let socket = UdpSocket::bind(any).await.map_err(|e| SendError::Connect {
                addr,
                reason: e.to_string(),
            })?;
            self.udp = Some(socket);
        }
        let Some(socket) = self.udp.as_ref() else {
            return Ok(());
        };
        for datagram in datagrams(payload, DATAGRAM_BYTES) {
            let sent =
                tokio::time::timeout(WRITE_TIMEOUT, socket.send_to(datagram.as_bytes(), addr));
            match sent.await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(SendError::Send {
                        addr,
                        reason: e.to_string(),
                    });
                }
                Err(_) => {
                    return Err(SendError::Send {
                        addr,
                        reason: "timed out".into(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// `payload` cut at line ends into pieces of at most `max` bytes (a longer line alone).
pub fn datagrams(payload: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut end = 0;
    for line in payload.split_inclusive('\n') {
        if end > start && end - start + line.len() > max {
            out.extend(payload.get(start..end));
            start = end;
        }
        end += line.len();
    }
    if end > start {
        out.extend(payload.get(start..end));
    }
    out
}
