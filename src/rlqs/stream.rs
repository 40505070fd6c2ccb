//! One `StreamRateLimitQuotas` stream: one Envoy's buckets, their reports counted on the
//! engine, their assignments sent when they change, renewed before they expire, abandoned
//! when idle, and expired at once when the service shuts down.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use gcounter_engine::Hit;
use gcounter_engine::local::WindowPosition;
use tokio::sync::mpsc;
use tonic::Status;

use super::board::Member;
use super::bucket::{Resolution, resolve};
use super::share::Strategy;
use super::validate::{BucketKey, StreamFault, bucket_key, usage_counts};
use super::{Shared, action};
use crate::config::LimitsConfig;
use crate::telemetry::{AssignmentKind, StreamError, UsageOutcome};

/// A new bucket's first report stands for this long of demand (Envoy sends it on the
/// bucket's first request, with a `time_elapsed` of 0).
const FIRST_INTERVAL: Duration = Duration::from_secs(1);
/// Demand is measured over at least this long, so two reports in quick succession do not
/// make a burst look like a flood.
const SHORTEST_INTERVAL: Duration = Duration::from_millis(250);

/// How long the expiring assignments sent on shutdown may wait for a slow client.
const SHUTDOWN_SEND: Duration = Duration::from_secs(1);

/// What the stream's task sends back: a response, or the status that ends the stream.
pub type Outbound = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// One bucket of the stream.
struct StreamBucket {
    id: BucketId,
    resolution: Resolution,
    /// On the board (its demand weighs in its counter's split); `None` for a bucket that is
    /// not counted, or past a bucket cap.
    member: Option<Member>,
    last_report: Instant,
    /// The last report with a request in it.
    last_active: Instant,
    sent: Option<(Strategy, Instant)>,
}

/// The state of one stream; its bucket counts leave the service's totals when dropped.
pub struct QuotaStream {
    shared: Arc<Shared>,
    /// Numbers the stream in `/counters`.
    id: u64,
    domain: Option<String>,
    buckets: HashMap<BucketKey, StreamBucket>,
    /// The config the buckets were resolved against.
    limits: Arc<LimitsConfig>,
    /// Reports the stream may still send now (refilled at the allowed rate).
    report_tokens: f64,
    refilled: Instant,
}

impl Drop for QuotaStream {
    fn drop(&mut self) {
        self.shared.buckets_left(self.buckets.len());
        self.shared.streams.fetch_sub(1, Ordering::Relaxed);
        self.shared.metrics.quota.stream_closed();
    }
}

/// Why the stream's loop ended with an error.
enum Ended {
    Fault(StreamFault),
    TooManyReports,
}

impl QuotaStream {
    /// A stream the caller has counted in `shared.streams`.
    pub fn new(shared: Arc<Shared>) -> Self {
        shared.metrics.quota.stream_opened();
        let limits = shared.limits.load_full();
        let burst = f64::from(shared.settings.max_reports_per_second) * 2.0;
        let id = shared.next_stream.fetch_add(1, Ordering::Relaxed);
        Self {
            shared,
            id,
            domain: None,
            buckets: HashMap::new(),
            limits,
            report_tokens: burst,
            refilled: Instant::now(),
        }
    }

    /// Serves the stream until the client ends it, breaks a rule, or the service shuts down.
    pub async fn run(
        mut self,
        mut inbound: tonic::Streaming<RateLimitQuotaUsageReports>,
        out: Outbound,
    ) {
        let shutdown = self.shared.shutdown.clone();
        let period = self.shared.settings.reassign_interval;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let actions = tokio::select! {
                biased;
                () = shutdown.cancelled() => {
                    let actions = self.expire_all();
                    let expire = out.send(Ok(RateLimitQuotaResponse { bucket_action: actions }));
                    // The service is going: a client that does not read gets a moment, not
                    // the whole drain.
                    let _ = tokio::time::timeout(SHUTDOWN_SEND, expire).await;
                    return;
                }
                message = inbound.message() => { let received = Instant::now(); match message {
                    Ok(Some(reports)) => match self.on_report(reports).await {
                        Ok(actions) => {
                            self.shared.metrics.quota.report_handled(received.elapsed());
                            actions
                        }
                        Err(ended) => {
                            let status = self.ended(ended);
                            let _ = out.try_send(Err(status));
                            return;
                        }
                    },
                    Ok(None) => return,
                    Err(status) => {
                        tracing::debug!(%status, "RLQS stream ended by the transport");
                        self.shared.metrics.quota.stream_error(StreamError::transport);
                        return;
                    }
                }},
                _ = tick.tick() => self.on_tick(Instant::now()),
            };
            if actions.is_empty() {
                continue;
            }
            let response = Ok(RateLimitQuotaResponse {
                bucket_action: actions,
            });
            tokio::select! {
                sent = out.send(response) => if sent.is_err() { return },
                () = shutdown.cancelled() => {}
            }
        }
    }

    fn ended(&self, ended: Ended) -> Status {
        let metrics = &self.shared.metrics.quota;
        match ended {
            Ended::Fault(fault) => {
                metrics.stream_error(StreamError::invalid_argument);
                Status::invalid_argument(fault.to_string())
            }
            Ended::TooManyReports => {
                metrics.stream_error(StreamError::too_many_reports);
                Status::resource_exhausted(format!(
                    "more than {} reports per second on one stream (--rlqs-max-reports-per-second)",
                    self.shared.settings.max_reports_per_second
                ))
            }
        }
    }

    /// Takes one report from the stream's allowance.
    fn take_report(&mut self, now: Instant) -> bool {
        let rate = f64::from(self.shared.settings.max_reports_per_second);
        let refill = now.saturating_duration_since(self.refilled).as_secs_f64() * rate;
        self.report_tokens = (self.report_tokens + refill).min(rate * 2.0);
        self.refilled = now;
        if self.report_tokens < 1.0 {
            return false;
        }
        self.report_tokens -= 1.0;
        true
    }

    async fn on_report(
        &mut self,
        reports: RateLimitQuotaUsageReports,
    ) -> Result<Vec<BucketAction>, Ended> {
        let now = Instant::now();
        if !self.take_report(now) {
            return Err(Ended::TooManyReports);
        }
        match &self.domain {
            None if reports.domain.is_empty() => {
                return Err(Ended::Fault(StreamFault::MissingDomain));
            }
            None => self.domain = Some(reports.domain.clone()),
            Some(fixed) if !reports.domain.is_empty() && *fixed != reports.domain => {
                return Err(Ended::Fault(StreamFault::DomainChanged {
                    fixed: fixed.clone(),
                    sent: reports.domain,
                }));
            }
            Some(_) => {}
        }
        let max = self.shared.settings.max_buckets_per_stream;
        if reports.bucket_quota_usages.len() > max {
            return Err(Ended::Fault(StreamFault::TooManyUsages {
                usages: reports.bucket_quota_usages.len(),
                max,
            }));
        }
        let mut actions = Vec::new();
        for usage in &reports.bucket_quota_usages {
            let key = bucket_key(usage.bucket_id.as_ref(), &self.shared.request_limits)
                .map_err(Ended::Fault)?;
            let Ok((allowed, denied, _)) = usage_counts(usage) else {
                self.shared.metrics.quota.usage(UsageOutcome::ignored);
                continue;
            };
            let new = !self.buckets.contains_key(&key);
            if new {
                let bucket = self.new_bucket(usage.bucket_id.clone().unwrap_or_default(), now);
                if !self.has_room() {
                    // Past a cap the bucket is not held: what Envoy let through still counts,
                    // and Envoy keeps its no-assignment behaviour for it.
                    let _ = count(&self.shared, &bucket, allowed, denied, None).await;
                    self.shared.metrics.quota.usage(UsageOutcome::over_capacity);
                    continue;
                }
                self.shared.bucket_held();
                self.buckets.insert(key.clone(), bucket);
            }
            let Some(bucket) = self.buckets.get_mut(&key) else {
                continue;
            };
            let interval = (!new).then(|| {
                now.saturating_duration_since(bucket.last_report)
                    .max(SHORTEST_INTERVAL)
            });
            bucket.last_report = now;
            if allowed + denied > 0 {
                bucket.last_active = now;
            }
            let outcome = count(&self.shared, bucket, allowed, denied, interval).await;
            self.shared.metrics.quota.usage(outcome);
            if let Some(action) = self.assign(&key, now) {
                actions.push(action);
            }
        }
        Ok(actions)
    }

    /// A bucket seen for the first time, resolved, on the board if it is counted.
    fn new_bucket(&self, id: BucketId, now: Instant) -> StreamBucket {
        let resolution = resolve(
            &self.limits,
            self.domain.as_deref().unwrap_or_default(),
            &id.bucket,
            self.shared.service_shadow,
        );
        let member = if self.has_room() {
            self.member_for(&resolution)
        } else {
            None
        };
        StreamBucket {
            id,
            resolution,
            member,
            last_report: now,
            last_active: now,
            sent: None,
        }
    }

    /// Whether one more bucket fits under `--rlqs-max-buckets-per-stream` and
    /// `--rlqs-max-buckets`.
    fn has_room(&self) -> bool {
        let settings = &self.shared.settings;
        self.buckets.len() < settings.max_buckets_per_stream
            && self.shared.buckets.load(Ordering::Relaxed) < settings.max_buckets
    }

    /// A place on the board for a counted bucket.
    fn member_for(&self, resolution: &Resolution) -> Option<Member> {
        let Resolution::Counted { counters, .. } = resolution else {
            return None;
        };
        self.shared.board.join(counters, self.id)
    }

    /// The action for the bucket now, if one is due: a new strategy, or the current one
    /// renewed when half its time to live has passed.
    fn assign(&mut self, key: &BucketKey, now: Instant) -> Option<BucketAction> {
        let shared = Arc::clone(&self.shared);
        let bucket = self.buckets.get_mut(key)?;
        let current = bucket.sent.map(|(strategy, _)| strategy);
        let wanted = match &bucket.resolution {
            Resolution::Counted { shadow: true, .. } | Resolution::Unlimited => Strategy::AllowAll,
            Resolution::Counted { .. } => {
                // Every counted bucket the stream holds is on the board.
                let member = bucket.member.as_ref()?;
                let share = member.share(&shared.engine, now);
                if share.penalized {
                    Strategy::DenyAll
                } else {
                    Strategy::next(current, share.rate)
                }
            }
            Resolution::Unmatched(_) => shared.settings.unmatched,
        };
        let ttl = shared.settings.assignment_ttl;
        let due = match bucket.sent {
            None => true,
            Some((strategy, at)) => {
                strategy != wanted || now.saturating_duration_since(at) >= ttl / 2
            }
        };
        if !due {
            return None;
        }
        bucket.sent = Some((wanted, now));
        shared.metrics.quota.assignment(kind_of(wanted));
        Some(action::assignment(bucket.id.clone(), wanted, ttl))
    }

    /// The periodic pass: a changed config resolved again, idle buckets abandoned, changed
    /// shares and renewals sent.
    fn on_tick(&mut self, now: Instant) -> Vec<BucketAction> {
        let limits = self.shared.limits.load_full();
        if !Arc::ptr_eq(&limits, &self.limits) {
            self.limits = limits;
            self.resolve_again();
        }
        let abandon_after = self.shared.settings.abandon_after;
        let idle: Vec<BucketKey> = self
            .buckets
            .iter()
            .filter(|(_, b)| now.saturating_duration_since(b.last_active) >= abandon_after)
            .map(|(key, _)| key.clone())
            .collect();
        let mut actions = Vec::new();
        for key in idle {
            if let Some(bucket) = self.buckets.remove(&key) {
                self.shared.buckets_left(1);
                self.shared
                    .metrics
                    .quota
                    .assignment(AssignmentKind::abandon);
                actions.push(action::abandon(bucket.id));
            }
        }
        let keys: Vec<BucketKey> = self.buckets.keys().cloned().collect();
        actions.extend(keys.iter().filter_map(|key| self.assign(key, now)));
        actions
    }

    /// Every bucket resolved against the current config; those whose counters changed move
    /// to their new group.
    fn resolve_again(&mut self) {
        let domain = self.domain.clone().unwrap_or_default();
        let keys: Vec<BucketKey> = self.buckets.keys().cloned().collect();
        for key in keys {
            let Some(bucket) = self.buckets.get(&key) else {
                continue;
            };
            let resolution = resolve(
                &self.limits,
                &domain,
                &bucket.id.bucket,
                self.shared.service_shadow,
            );
            if resolution == bucket.resolution {
                continue;
            }
            let member = self.member_for(&resolution);
            if let Some(bucket) = self.buckets.get_mut(&key) {
                bucket.resolution = resolution;
                bucket.member = member;
            }
        }
    }

    /// On shutdown: every bucket's assignment, expiring at once, so Envoy falls back to its
    /// `expired_assignment_behavior` now rather than when the assignment would have ended.
    fn expire_all(&mut self) -> Vec<BucketAction> {
        let metrics = &self.shared.metrics.quota;
        self.buckets
            .values()
            .map(|bucket| {
                metrics.assignment(AssignmentKind::expire);
                let strategy = bucket.sent.map_or(Strategy::AllowAll, |(s, _)| s);
                action::assignment(bucket.id.clone(), strategy, Duration::ZERO)
            })
            .collect()
    }
}

/// Counts a usage's allowed requests on the bucket's counters (the part that happened before
/// the current window began on the previous window's cell) and its demand on the board.
async fn count(
    shared: &Shared,
    bucket: &StreamBucket,
    allowed: u64,
    denied: u64,
    interval: Option<Duration>,
) -> UsageOutcome {
    let Resolution::Counted { counters, .. } = &bucket.resolution else {
        return UsageOutcome::not_counted;
    };
    let now_ms = shared.engine.now_ms();
    let measured = interval.unwrap_or(FIRST_INTERVAL);
    let interval_ms = u64::try_from(measured.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut in_current = Vec::with_capacity(counters.len());
    for counter in counters {
        let position = WindowPosition::at(now_ms, counter.counter.duration_ms);
        let before = interval_ms.saturating_sub(position.elapsed_ms);
        // Requests spread evenly over the interval: the share before the boundary.
        let in_previous =
            (u128::from(allowed) * u128::from(before) / u128::from(interval_ms)) as u64;
        let hit = Hit {
            counter: counter.counter.borrowed(),
            limit: counter.limit,
            cost: allowed,
        };
        shared.engine.count_admitted(hit, in_previous).await;
        in_current.push(allowed - in_previous.min(allowed));
    }
    let Some(member) = &bucket.member else {
        return UsageOutcome::over_capacity;
    };
    let demand = (allowed + denied) as f64 / measured.as_secs_f64();
    member.report(demand, &in_current, interval);
    UsageOutcome::counted
}

fn kind_of(strategy: Strategy) -> AssignmentKind {
    match strategy {
        Strategy::AllowAll => AssignmentKind::allow_all,
        Strategy::DenyAll => AssignmentKind::deny_all,
        Strategy::TokenBucket { .. } => AssignmentKind::token_bucket,
    }
}
