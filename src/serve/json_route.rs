//! `POST /json` on the admin port, answered by the gRPC service's limiter.

use std::sync::Arc;

use crate::admin;
use crate::rls::RateLimiter;

/// `POST /json` on the admin port, answered by the gRPC service's limiter.
pub(super) struct JsonRoute(pub(super) Arc<RateLimiter>);

impl admin::JsonDecisions for JsonRoute {
    fn decide<'a>(
        &'a self,
        body: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = admin::JsonAnswer> + Send + 'a>> {
        Box::pin(async move {
            let reply = crate::rls::should_rate_limit_json(&self.0, body).await;
            admin::JsonAnswer {
                status: reply.status,
                body: reply.body,
            }
        })
    }
}
