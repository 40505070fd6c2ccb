//! The transport: what a client can make the service hold before a request reaches `rls`.
//!
//! Every connection, stream and buffered byte a peer can open or send has a bound here:
//! a connection cap per listener (`listener`, each connection's IO owns its permit), a
//! deadline for the first bytes of a connection (`connection`), an accept loop that backs
//! off on errors such as EMFILE, the gRPC server on hyper's HTTP/2 with its stream and window
//! limits and maximum connection age (`grpc`), what makes a request a gRPC call at all
//! (`request_head`), the compressions accepted and a message decompressed within its bound
//! (`compression`), a per-request deadline (`deadline`), a cap on
//! requests in flight (`inflight`), a global budget of request bytes being buffered
//! (`budget`) charged by request bodies that hand on whole messages only (`messages`), a
//! client's reset told from its request's end (`end_stream`), the raw-bytes codec that lets `rls` decode (and count) requests itself (`codec`), the HTTP/1 admin server with
//! its header read timeout (`admin`), the open-files limit (`fd_limit`), binding both
//! listeners with their caps (`bind`), the first-bytes deadline on any stream (`preface`),
//! TLS and mTLS with certificates re-read on change (`tls`), and the gRPC server's
//! connections, plaintext or handshaken within the same bounds (`incoming`).
//!
//! It knows HTTP/2, gRPC framing and TCP; it knows nothing of rate limits, Redis or SQL.

/// `AsyncWrite` for a stream whose writes go unchanged to its field `$inner`, an `Unpin`
/// stream (`BoundedConn`, `PrefaceDeadline`: only their reads differ). Every method is
/// forwarded, the vectored ones too, so the wrapper never hides a capability of the stream.
macro_rules! forward_async_write {
    ($inner:ident) => {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::pin::Pin::new(&mut self.get_mut().$inner).poll_write(cx, buf)
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.get_mut().$inner).poll_flush(cx)
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.get_mut().$inner).poll_shutdown(cx)
        }

        fn poll_write_vectored(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::pin::Pin::new(&mut self.get_mut().$inner).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            self.$inner.is_write_vectored()
        }
    };
}

mod admin;
mod bind;
mod body;
mod budget;
mod codec;
mod compression;
mod connection;
mod deadline;
mod end_stream;
mod fd_limit;
mod grpc;
mod incoming;
mod inflight;
mod listener;
mod messages;
mod preface;
mod request_head;
mod settings;
mod tls;

pub use admin::serve_http1;
pub use bind::{BindError, Listeners, bind, bind_side, bounded, bounded_side};
pub use body::GrpcBody;
pub use budget::{BodyBudget, BodyBudgetLayer, BufferedBytes, CONNECTION_SHARE};
pub use codec::RawRequestCodec;
pub use compression::{Compression, decompress};
pub use connection::BoundedConn;
pub use fd_limit::raise_nofile_limit;
pub use grpc::{GrpcRequest, GrpcServer};
pub use incoming::{GrpcConn, grpc_incoming};
pub use listener::{BoundedListener, ListenerSettings};
pub use messages::BudgetedBody;
pub use settings::{InvalidTransportSetting, TransportSettings};
pub use tls::{MAX_PEM_BYTES, TlsError, TlsFiles, TlsReloader, TlsSetting};
