//! The admin HTTP/1 server (`/healthz`, `/rlconfig`, `/metrics`) on a bounded listener.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use super::listener::BoundedListener;

/// Serves `router` until `shutdown`, then waits for open requests to finish.
///
/// Not `axum::serve`: it sets no timer on hyper, so hyper's header read timeout never fires
/// and a client that sends half a request head holds its connection forever. Here each
/// connection gets `header_timeout` for a request head, and the listener's cap and preface
/// deadline apply, so a flood of the admin port cannot take file descriptors from gRPC, nor
/// a flood of gRPC take `/healthz` (its own listener, its own cap).
pub async fn serve_http1(
    mut listener: BoundedListener,
    router: axum::Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            conn = listener.accept() => {
                let service = TowerToHyperService::new(router.clone());
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(TokioIo::new(conn), service);
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "admin connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    // Stop accepting before waiting for the open connections.
    drop(listener);
    graceful.shutdown().await;
}
