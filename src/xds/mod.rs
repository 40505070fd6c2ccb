//! The xDS config source: limits pushed by a management server (Envoy Gateway, Envoy AI
//! Gateway) over ADS, state of the world, instead of read from files (`CONFIG_TYPE=GRPC_XDS_SOTW`).
//!
//! `config` knows no gRPC: this module holds the client (`client`), the TLS to the server
//! (`tls`), the flags and their checks (`args`, `settings`), and maps the protos onto the
//! config model the YAML loader builds, compiled by the same compiler (`resource`).

mod args;
mod client;
mod resource;
mod settings;
mod tls;

pub use args::XdsArgs;
pub use client::{SessionError, Sink, run};
pub use resource::{MAX_DESCRIPTOR_DEPTH, MAX_DESCRIPTORS, Rejected, TYPE_URL, compile};
pub use settings::{Backoff, XdsSettings, XdsTls};
pub use tls::XdsTlsError;
