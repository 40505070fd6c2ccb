//! The transport: what a client can make the service hold before a request reaches `rls`.
//!
//! Every connection, stream and buffered byte a peer can open or send has a bound here:
//! a connection cap per listener (`listener`, each connection's IO owns its permit), a
//! deadline for the first bytes of a connection (`connection`), an accept loop that backs
//! off on errors such as EMFILE, HTTP/2 stream and window limits with a per-request deadline
//! (`grpc`), a global budget of request bytes being buffered (`budget`), the raw-bytes codec
//! that lets `rls` decode (and count) requests itself (`codec`), the HTTP/1 admin server with
//! its header read timeout (`admin`), the open-files limit (`fd_limit`), and binding both
//! listeners with their caps (`bind`).
//!
//! It knows HTTP/2, gRPC framing and TCP; it knows nothing of rate limits, Redis or SQL.

mod admin;
mod bind;
mod budget;
mod codec;
mod connection;
mod fd_limit;
mod grpc;
mod listener;
mod settings;

pub use admin::serve_http1;
pub use bind::{BindError, Listeners, bind};
pub use budget::{BodyBudget, BodyBudgetLayer};
pub use codec::RawRequestCodec;
pub use connection::BoundedConn;
pub use fd_limit::raise_nofile_limit;
pub use grpc::grpc_server;
pub use listener::{BoundedListener, ListenerSettings};
pub use settings::{InvalidTransportSetting, TransportSettings};
