//! `POST /json` and `/counters` on the admin port, answered by the gRPC service's limiter.

use std::sync::Arc;

use crate::admin;
use crate::rls::RateLimiter;
use gcounter_engine::InspectedCounter;

/// `POST /json` on the admin port, answered by the gRPC service's limiter.
pub(super) struct JsonRoute(pub(super) Arc<RateLimiter>);

impl admin::JsonDecisions for JsonRoute {
    fn decide<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
        body: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = admin::JsonAnswer> + Send + 'a>> {
        Box::pin(async move {
            let reply = crate::rls::should_rate_limit_json(&self.0, headers, body).await;
            admin::JsonAnswer {
                status: reply.status,
                body: reply.body,
            }
        })
    }
}

/// `/counters` on the admin port: the limiter's config matching names the counter.
pub(super) struct CounterRoute(pub(super) Arc<RateLimiter>);

impl admin::CounterLookup for CounterRoute {
    fn find(&self, domain: &str, entries: &[(String, String)]) -> Result<InspectedCounter, String> {
        use crate::rls::NotCounted;
        self.0
            .inspect_counter(domain, entries)
            .map_err(|not_counted| match not_counted {
                NotCounted::UnknownDomain => format!("no domain `{domain}` is loaded"),
                NotCounted::NoRule => "no rule matches this descriptor".into(),
                NotCounted::Unlimited => {
                    "the matching rule is `unlimited: true`: nothing is counted".into()
                }
            })
    }
}
