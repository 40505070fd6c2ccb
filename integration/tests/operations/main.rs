//! What an operator runs and watches: the lifecycle under failing backends, TLS, metrics and
//! alerts against a real Prometheus, tracing to an OTLP collector.

mod circuit;
mod grpc_tls;
mod lifecycle;
mod observability;
mod shutdown;
mod statsd;
mod tracing;
