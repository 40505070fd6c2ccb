//! One `StreamRateLimitQuotas` stream: one Envoy's buckets, their reports counted on the
//! engine, their assignments sent when they change, renewed before they expire, abandoned
//! when idle, and expired at once when the service shuts down.
//!
//! What one stream costs is bounded by what it sends, not by how many others share its
//! counters: a usage is counted and its share read in constant time (the split is the
//! board's, amortized), a bucket's bytes are charged against `--rlqs-max-bucket-bytes`,
//! responses go out in bounded pieces, and an Envoy that stops reading them is let go.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use futures_util::{Stream, StreamExt};
use gcounter_engine::plant::{self, Plant};
use tonic::{Code, Status};

use super::board::Member;
use super::bucket::{Resolution, resolve};
use super::bucket_key::BucketKey;
use super::memory::Charge;
use super::outbox::{Outbox, Unsent};
use super::reservation::{self, Ledger};
use super::share::{Decision, Strategy};
use super::usage::{Usage, count};
use super::validate::{StreamFault, bucket_key, usage_counts};
use super::wire::Outbound;
use super::{Shared, action};
use crate::config::LimitsConfig;
use crate::telemetry::{AssignmentKind, StreamError, UsageOutcome};

/// Demand is measured over at least this long, so two reports in quick succession do not
/// make a burst look like a flood.
const SHORTEST_INTERVAL: Duration = Duration::from_millis(250);
/// How long the expiring assignments sent on shutdown may wait for a slow client.
const SHUTDOWN_SEND: Duration = Duration::from_secs(1);
/// A report's or a tick's work yields to the runtime after this many buckets, so a stream of
/// thousands never holds a worker (and the RLS v3 calls queued on it) for long.
const REPORT_SLICE: usize = 256;
/// What one bucket holds beside its key: its entry in the stream's map, its state, its place
/// in its group (measured: docs/rlqs.md, "Bounds").
pub const BUCKET_OVERHEAD: usize = 320;

/// One bucket of the stream.
struct StreamBucket {
    resolution: Resolution,
    /// On the board (its demand weighs in its counter's split); `None` for a bucket that is
    /// not counted, or whose group was full after a config change.
    member: Option<Member>,
    last_report: Instant,
    /// The last report with a request in it.
    last_active: Instant,
    sent: Option<(Strategy, Instant)>,
    /// The burst the sent strategy lent (its `max_tokens`, 0 for none): what Envoy may hold
    /// of it at most.
    lent: u32,
    /// A `never_above` bucket's takes and reports (`reservation`), once it has any, and
    /// their bytes against `--rlqs-max-bucket-bytes`.
    ledger: Option<(Box<Ledger>, Charge)>,
    /// Its bytes against `--rlqs-max-bucket-bytes`.
    _charge: Charge,
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

/// Why the stream ended before its client ended it.
enum Ended {
    Fault(StreamFault),
    TooManyReports,
    /// The request body's error: a bound of the transport, bytes that do not decode, the
    /// client's reset.
    Inbound(Status),
    Unsent(Unsent),
}

impl From<Unsent> for Ended {
    fn from(unsent: Unsent) -> Self {
        Self::Unsent(unsent)
    }
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

    /// Serves the stream until the client ends it, breaks a rule, stops reading, or the
    /// service shuts down.
    pub async fn run<S>(mut self, mut inbound: S, out: Outbound)
    where
        S: Stream<Item = Result<RateLimitQuotaUsageReports, Status>> + Unpin,
    {
        let shutdown = self.shared.shutdown.clone();
        let period = self.shared.settings.reassign_interval;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let wait = self.shared.settings.abandon_after;
        let mut outbox = Outbox::new(&out.responses, wait, Some(&shutdown));
        let ended = loop {
            let step = tokio::select! {
                biased;
                () = shutdown.cancelled() => {
                    self.expire_all(&out).await;
                    return;
                }
                message = inbound.next() => match message {
                    Some(Ok(reports)) => {
                        let received = Instant::now();
                        let handled = self.on_report(reports, &mut outbox).await;
                        let flushed = match handled {
                            Ok(()) => outbox.flush().await.map_err(Ended::from),
                            Err(ended) => Err(ended),
                        };
                        if flushed.is_ok() {
                            self.shared.metrics.quota.report_handled(received.elapsed());
                        }
                        flushed
                    }
                    Some(Err(status)) => Err(Ended::Inbound(status)),
                    None => return,
                },
                _ = tick.tick() => match self.on_tick(Instant::now(), &mut outbox).await {
                    Ok(()) => outbox.flush().await.map_err(Ended::from),
                    Err(ended) => Err(ended),
                },
            };
            if let Err(ended) = step {
                break ended;
            }
        };
        drop(outbox);
        if let Some(status) = self.ended(ended) {
            out.end_with(status);
        }
    }

    /// Counts why the stream ended; the status to end it with, if the client can still
    /// read one.
    fn ended(&self, ended: Ended) -> Option<Status> {
        let metrics = &self.shared.metrics.quota;
        match ended {
            Ended::Fault(fault) => {
                metrics.stream_error(StreamError::invalid_argument);
                Some(Status::invalid_argument(fault.to_string()))
            }
            Ended::TooManyReports => {
                metrics.stream_error(StreamError::too_many_reports);
                Some(Status::resource_exhausted(format!(
                    "more than {} reports per second on one stream (--rlqs-max-reports-per-second)",
                    self.shared.settings.max_reports_per_second
                )))
            }
            Ended::Inbound(status) => {
                let reason = match status.code() {
                    Code::InvalidArgument => StreamError::invalid_argument,
                    Code::ResourceExhausted => StreamError::request_bytes,
                    Code::DeadlineExceeded => StreamError::message_deadline,
                    _ => StreamError::transport,
                };
                tracing::debug!(%status, "RLQS stream ended by its request");
                metrics.stream_error(reason);
                Some(status)
            }
            Ended::Unsent(Unsent::Stalled) => {
                metrics.stream_error(StreamError::stalled);
                tracing::debug!(
                    stream = self.id,
                    "RLQS stream ended: its client read no response for --rlqs-abandon-after"
                );
                None
            }
            Ended::Unsent(Unsent::Gone) => None,
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

    /// The report's domain against the stream's.
    fn check_domain(&mut self, sent: String) -> Result<(), Ended> {
        match &self.domain {
            None if sent.is_empty() => Err(Ended::Fault(StreamFault::MissingDomain)),
            None => {
                self.domain = Some(sent);
                Ok(())
            }
            Some(fixed) if !sent.is_empty() && *fixed != sent => {
                Err(Ended::Fault(StreamFault::DomainChanged {
                    fixed: fixed.clone(),
                    sent,
                }))
            }
            Some(_) => Ok(()),
        }
    }

    async fn on_report(
        &mut self,
        reports: RateLimitQuotaUsageReports,
        outbox: &mut Outbox<'_>,
    ) -> Result<(), Ended> {
        let now = Instant::now();
        if !self.take_report(now) {
            return Err(Ended::TooManyReports);
        }
        self.check_domain(reports.domain)?;
        if plant::drop_one_in_three(Plant::RlqsReportIgnored) {
            // The chaos checker's `rlqs-report-ignored` defect (debug builds only).
            return Ok(());
        }
        let max = self.shared.settings.max_buckets_per_stream;
        if reports.bucket_quota_usages.len() > max {
            return Err(Ended::Fault(StreamFault::TooManyUsages {
                usages: reports.bucket_quota_usages.len(),
                max,
            }));
        }
        let shared = Arc::clone(&self.shared);
        for (n, usage) in reports.bucket_quota_usages.iter().enumerate() {
            if n % REPORT_SLICE == REPORT_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            let key = bucket_key(usage.bucket_id.as_ref(), &shared.request_limits)
                .map_err(Ended::Fault)?;
            let Ok((allowed, denied, _)) = usage_counts(usage) else {
                shared.metrics.quota.usage(UsageOutcome::ignored);
                continue;
            };
            let new = !self.buckets.contains_key(&key);
            if new && let Err(resolution) = self.admit(&key, now) {
                // Past a cap the bucket is not held: what Envoy let through still counts,
                // and Envoy keeps its no-assignment behaviour for it.
                let usage = Usage {
                    allowed,
                    denied,
                    covered: 0,
                };
                count(&shared, &resolution, None, usage, None).await;
                shared.metrics.quota.usage(UsageOutcome::over_capacity);
                continue;
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
            let covered = settle_taken(&shared, bucket, allowed, now).await;
            let member = bucket.member.as_ref().map(|member| (member, bucket.lent));
            let usage = Usage {
                allowed,
                denied,
                covered,
            };
            let outcome = count(&shared, &bucket.resolution, member, usage, interval).await;
            shared.metrics.quota.usage(outcome);
            if let Some(action) = assign(&shared, &key, bucket, now).await {
                outbox.push(action).await?;
            }
        }
        Ok(())
    }

    /// Holds a bucket seen for the first time, if every cap leaves room for it: the
    /// stream's and the service's counts, the bucket bytes, its group's members. Otherwise
    /// its resolution, to count it without holding it.
    fn admit(&mut self, key: &BucketKey, now: Instant) -> Result<(), Resolution> {
        let shared = &self.shared;
        let mut resolution = resolve(
            &self.limits,
            self.domain.as_deref().unwrap_or_default(),
            key.entries(),
            shared.service_shadow,
        );
        let settings = &shared.settings;
        if self.buckets.len() >= settings.max_buckets_per_stream
            || shared.buckets.load(Ordering::Relaxed) >= settings.max_buckets
        {
            return Err(resolution);
        }
        let Some(charge) = shared.memory.try_charge(key.heap_bytes() + BUCKET_OVERHEAD) else {
            return Err(resolution);
        };
        let member = match &mut resolution {
            Resolution::Counted { counters, .. } => match shared.board.join(counters, self.id) {
                Ok(member) => {
                    // The group's copy: the bucket's own goes now.
                    *counters = Arc::clone(member.counters());
                    Some(member)
                }
                Err(_) => return Err(resolution),
            },
            Resolution::Unlimited | Resolution::Unmatched(_) => None,
        };
        shared.bucket_held();
        self.buckets.insert(
            key.clone(),
            StreamBucket {
                resolution,
                member,
                last_report: now,
                last_active: now,
                sent: None,
                lent: 0,
                ledger: None,
                _charge: charge,
            },
        );
        Ok(())
    }

    /// The periodic pass: a changed config resolved again, idle buckets abandoned, changed
    /// shares and renewals sent.
    async fn on_tick(&mut self, now: Instant, outbox: &mut Outbox<'_>) -> Result<(), Ended> {
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
        let shared = Arc::clone(&self.shared);
        for key in idle {
            if self.buckets.remove(&key).is_some() {
                shared.buckets_left(1);
                shared.metrics.quota.assignment(AssignmentKind::abandon);
                outbox.push(action::abandon(key.id())).await?;
            }
        }
        // A tick over thousands of buckets yields like a report does: every stream's tick falls
        // due together after a reload or a burst of new streams, and RLS v3 calls wait behind it.
        for (n, (key, bucket)) in self.buckets.iter_mut().enumerate() {
            if n % REPORT_SLICE == REPORT_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            if let Some(action) = assign(&shared, key, bucket, now).await {
                outbox.push(action).await?;
            }
        }
        Ok(())
    }

    /// Every bucket resolved against the current config; those whose counters changed move
    /// to their new group.
    fn resolve_again(&mut self) {
        let domain = self.domain.clone().unwrap_or_default();
        let shared = Arc::clone(&self.shared);
        for (key, bucket) in &mut self.buckets {
            let mut resolution =
                resolve(&self.limits, &domain, key.entries(), shared.service_shadow);
            if resolution == bucket.resolution {
                continue;
            }
            bucket.member = match &mut resolution {
                Resolution::Counted { counters, .. } => {
                    shared.board.join(counters, self.id).ok().inspect(|member| {
                        *counters = Arc::clone(member.counters());
                    })
                }
                Resolution::Unlimited | Resolution::Unmatched(_) => None,
            };
            bucket.resolution = resolution;
            // What was taken stays on the old counters until their cells end.
            bucket.ledger = None;
        }
    }

    /// On shutdown: every bucket's assignment, expiring at once, so Envoy falls back to its
    /// `expired_assignment_behavior` now rather than when the assignment would have ended.
    /// A client that does not read gets a moment, not the whole drain.
    async fn expire_all(&mut self, out: &Outbound) {
        let metrics = &self.shared.metrics.quota;
        let expire = async {
            let mut outbox = Outbox::new(&out.responses, SHUTDOWN_SEND, None);
            for (key, bucket) in &self.buckets {
                metrics.assignment(AssignmentKind::expire);
                let strategy = bucket.sent.map_or(Strategy::AllowAll, |(s, _)| s);
                let action = action::assignment(key.id(), strategy, Duration::ZERO);
                outbox.push(action).await?;
            }
            outbox.flush().await
        };
        let _ = tokio::time::timeout(SHUTDOWN_SEND, expire).await;
    }
}

/// The action for `bucket` now, if one is due: a new strategy, or the current one renewed
/// when half its time to live has passed.
async fn assign(
    shared: &Shared,
    key: &BucketKey,
    bucket: &mut StreamBucket,
    now: Instant,
) -> Option<BucketAction> {
    let current = bucket.sent.map(|(strategy, _)| strategy);
    let keep = |strategy| Decision { strategy, lent: 0 };
    let decision = match &bucket.resolution {
        Resolution::Counted { shadow: true, .. } | Resolution::Unlimited => {
            keep(Strategy::AllowAll)
        }
        Resolution::Counted {
            never_above: true, ..
        } => return assign_taken(shared, key, bucket, now).await,
        Resolution::Counted { .. } => {
            let member = bucket.member.as_ref()?;
            member.decide(&shared.engine, now, |share| {
                if share.penalized {
                    keep(Strategy::DenyAll)
                } else {
                    Strategy::decide(current, bucket.lent, share.rate, share.burst, share.horizon)
                }
            })
        }
        Resolution::Unmatched(_) => keep(shared.settings.unmatched),
    };
    let wanted = decision.strategy;
    let ttl = shared.settings.assignment_ttl;
    let due = match bucket.sent {
        None => true,
        Some((strategy, at)) => strategy != wanted || now.saturating_duration_since(at) >= ttl / 2,
    };
    if !due {
        return None;
    }
    if Some(wanted) != current {
        bucket.lent = decision.lent;
    }
    bucket.sent = Some((wanted, now));
    shared.metrics.quota.assignment(kind_of(wanted));
    Some(action::assignment(key.id(), wanted, ttl))
}

/// The action for a bucket of a `never_above` limit, if one is due (`reservation`).
async fn assign_taken(
    shared: &Shared,
    key: &BucketKey,
    bucket: &mut StreamBucket,
    now: Instant,
) -> Option<BucketAction> {
    let member = bucket.member.as_ref()?;
    if bucket.ledger.is_none() {
        // Past the bytes cap the bucket is not assigned, as a new bucket past it is not held.
        let charge = shared.memory.try_charge(reservation::LEDGER_BYTES)?;
        bucket.ledger = Some((Box::default(), charge));
    }
    let (ledger, _) = bucket.ledger.as_mut()?;
    let ttl = shared.settings.assignment_ttl;
    let assignment =
        reservation::assign(&shared.engine, member, ledger, bucket.sent, now, ttl).await?;
    bucket.lent = 0;
    bucket.sent = Some((assignment.strategy, now));
    let kind = kind_of(assignment.strategy);
    shared.metrics.quota.assignment(kind);
    Some(action::assignment(
        key.id(),
        assignment.strategy,
        assignment.ttl,
    ))
}

/// For a bucket of a `never_above` limit: how many of a report's `allowed` requests were
/// taken ahead (not to be counted again), and what its takes certainly left unspent given
/// back to the counters.
async fn settle_taken(
    shared: &Shared,
    bucket: &mut StreamBucket,
    allowed: u64,
    now: Instant,
) -> u64 {
    match (&bucket.resolution, bucket.ledger.as_mut()) {
        (Resolution::Counted { counters, .. }, Some((ledger, _))) => {
            let member = bucket.member.as_ref();
            reservation::settle(&shared.engine, counters, member, ledger, allowed, now).await
        }
        _ => 0,
    }
}

fn kind_of(strategy: Strategy) -> AssignmentKind {
    match strategy {
        Strategy::AllowAll => AssignmentKind::allow_all,
        Strategy::DenyAll => AssignmentKind::deny_all,
        Strategy::TokenBucket { .. } => AssignmentKind::token_bucket,
    }
}
