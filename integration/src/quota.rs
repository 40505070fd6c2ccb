//! An RLQS client for the service under test: one `StreamRateLimitQuotas` stream, reports in,
//! bucket actions out, as Envoy's `rate_limit_quota` filter speaks it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::Streaming;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
pub use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::google::protobuf;

/// One open stream.
pub struct QuotaStream {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    /// Filled by a task that reads every response as it comes, as Envoy does, so the server
    /// never waits on this client.
    responses: mpsc::UnboundedReceiver<Result<Option<RateLimitQuotaResponse>, tonic::Status>>,
}

/// A bucket id of `(key, value)` entries.
pub fn bucket(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<HashMap<_, _>>(),
    }
}

/// One bucket's usage over `elapsed_s` seconds.
pub fn usage(id: &BucketId, allowed: u64, denied: u64, elapsed_s: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id.clone()),
        time_elapsed: Some(protobuf::Duration {
            seconds: elapsed_s,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// A report of `domain` with these usages.
pub fn report(domain: &str, usages: Vec<BucketQuotaUsage>) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: usages,
    }
}

/// What a bucket action says, flattened.
#[derive(Debug, Clone, PartialEq)]
pub enum Assigned {
    Allow {
        ttl_s: i64,
    },
    Deny {
        ttl_s: i64,
    },
    /// Hits per second, the bucket's size and the time to live.
    TokenBucket {
        rate: f64,
        max_tokens: u32,
        ttl_s: i64,
    },
    Abandon,
}

impl Assigned {
    pub fn of(action: &BucketAction) -> Option<Assigned> {
        match action.bucket_action.as_ref()? {
            bucket_action::BucketAction::AbandonAction(_) => Some(Assigned::Abandon),
            bucket_action::BucketAction::QuotaAssignmentAction(assignment) => {
                let ttl_s = assignment.assignment_time_to_live.map_or(-1, |d| d.seconds);
                match assignment.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
                    Strategy::BlanketRule(rule) if *rule == BlanketRule::AllowAll as i32 => {
                        Some(Assigned::Allow { ttl_s })
                    }
                    Strategy::BlanketRule(_) => Some(Assigned::Deny { ttl_s }),
                    Strategy::TokenBucket(bucket) => {
                        let tokens = bucket.tokens_per_fill.map_or(0, |t| t.value);
                        let interval = bucket.fill_interval.map_or(0, |d| d.seconds);
                        Some(Assigned::TokenBucket {
                            rate: f64::from(tokens) / interval.max(1) as f64,
                            max_tokens: bucket.max_tokens,
                            ttl_s,
                        })
                    }
                    Strategy::RequestsPerTimeUnit(_) => None,
                }
            }
        }
    }
}

impl QuotaStream {
    /// Opens a stream to the service at `addr`.
    pub async fn open(addr: SocketAddr) -> Result<QuotaStream, tonic::Status> {
        let mut client = RateLimitQuotaServiceClient::new(super::grpc::channel(addr).await);
        let (reports, outbound) = mpsc::channel(16);
        let outbound = tokio_stream::wrappers::ReceiverStream::new(outbound);
        let mut inbound: Streaming<RateLimitQuotaResponse> = client
            .stream_rate_limit_quotas(outbound)
            .await?
            .into_inner();
        let (sender, responses) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let message = inbound.message().await;
                let last = !matches!(message, Ok(Some(_)));
                if sender.send(message).is_err() || last {
                    return;
                }
            }
        });
        Ok(QuotaStream { reports, responses })
    }

    pub async fn send(&self, report: RateLimitQuotaUsageReports) {
        self.reports
            .send(report)
            .await
            .expect("the stream's request side is open");
    }

    /// Sends `report` every `every` until the stream's request side closes, as an Envoy
    /// reports each interval whether or not its responses are read.
    pub fn report_every(&self, every: Duration, report: RateLimitQuotaUsageReports) {
        let reports = self.reports.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if reports.send(report.clone()).await.is_err() {
                    return;
                }
            }
        });
    }

    /// A stream to the service at `addr`, which must open.
    pub async fn opened(addr: SocketAddr) -> QuotaStream {
        QuotaStream::open(addr).await.expect("stream opens")
    }

    /// Sends a report of `domain` with one bucket's usage (see [`usage`]).
    pub async fn send_usage(
        &self,
        domain: &str,
        id: &BucketId,
        allowed: u64,
        denied: u64,
        elapsed_s: i64,
    ) {
        self.send(report(domain, vec![usage(id, allowed, denied, elapsed_s)]))
            .await;
    }

    /// The next response, or the status that ended the stream (`Ok(None)`: ended cleanly).
    pub async fn next(
        &mut self,
        within: Duration,
    ) -> Result<Option<RateLimitQuotaResponse>, tonic::Status> {
        match tokio::time::timeout(within, self.responses.recv()).await {
            Ok(Some(message)) => message,
            Ok(None) => Ok(None),
            Err(_) => panic!("no RLQS response within {within:?}"),
        }
    }

    /// The actions of responses until one is about `id`; that one.
    pub async fn action_for(&mut self, id: &BucketId, within: Duration) -> Assigned {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let response = match self.next(left).await {
                Ok(Some(response)) => response,
                other => panic!("the stream ended before an action for {id:?}: {other:?}"),
            };
            if let Some(action) = response
                .bucket_action
                .iter()
                .rev()
                .find(|action| action.bucket_id.as_ref() == Some(id))
                && let Some(assigned) = Assigned::of(action)
            {
                return assigned;
            }
        }
    }

    /// Actions for `id` until one satisfies `wanted`; that one.
    pub async fn action_until(
        &mut self,
        id: &BucketId,
        within: Duration,
        wanted: impl Fn(&Assigned) -> bool,
    ) -> Assigned {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let assigned = self.action_for(id, left).await;
            if wanted(&assigned) {
                return assigned;
            }
        }
    }
}
