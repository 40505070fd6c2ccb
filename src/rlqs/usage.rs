//! A usage report counted: its allowed requests (and its denied ones with `--count-denied`)
//! on the bucket's counters, spread over the time since the bucket's last report so that
//! the part before a window boundary lands on the previous window's cell, and its demand
//! on the board. What a `never_above` bucket's token bucket was taken for ahead
//! (`reservation`) is not counted again.

use std::time::Duration;

use gcounter_engine::Hit;
use gcounter_engine::local::WindowPosition;

use super::Shared;
use super::board::Member;
use super::bucket::Resolution;
use crate::telemetry::UsageOutcome;

/// A new bucket's first report stands for this long of demand (Envoy sends it on the
/// bucket's first request, with a `time_elapsed` of 0).
const FIRST_INTERVAL: Duration = Duration::from_secs(1);

/// One report of one bucket: `covered` of its `allowed` requests were taken ahead.
pub struct Usage {
    pub allowed: u64,
    pub denied: u64,
    pub covered: u64,
}

/// Counts a usage's allowed requests (and its denied ones with `--count-denied`) on the
/// bucket's counters (the part that happened before the current window began on the
/// previous window's cell) and its demand on the board. What was taken ahead is not
/// counted again.
pub async fn count(
    shared: &Shared,
    resolution: &Resolution,
    member: Option<(&Member, u32)>,
    usage: Usage,
    interval: Option<Duration>,
) -> UsageOutcome {
    let Usage {
        allowed,
        denied,
        covered,
    } = usage;
    let Resolution::Counted { counters, .. } = resolution else {
        return UsageOutcome::not_counted;
    };
    let now_ms = shared.engine.now_ms();
    let measured = interval.unwrap_or(FIRST_INTERVAL);
    let interval_ms = u64::try_from(measured.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    // With counted denials (upstream's semantics) what Envoy denied counts as RLS v3's
    // denials do.
    let uncovered = allowed.saturating_sub(covered);
    let counted = if shared.engine.counts_denied() {
        uncovered.saturating_add(denied)
    } else {
        uncovered
    };
    let mut in_current = Vec::with_capacity(counters.len());
    for counter in counters.iter() {
        let position = WindowPosition::at(now_ms, counter.counter.duration_ms);
        let before = interval_ms.saturating_sub(position.elapsed_ms);
        // Requests spread evenly over the interval: the share before the boundary.
        let in_previous =
            (u128::from(counted) * u128::from(before) / u128::from(interval_ms)) as u64;
        let hit = Hit {
            counter: counter.counter.borrowed(),
            limit: counter.limit,
            cost: counted,
            exact: false,
        };
        shared.engine.count_admitted(hit, in_previous).await;
        in_current.push(counted - in_previous.min(counted));
    }
    let Some((member, lent)) = member else {
        return UsageOutcome::over_capacity;
    };
    let demand = (allowed + denied) as f64 / measured.as_secs_f64();
    member.report(demand, &in_current, interval, allowed, lent);
    UsageOutcome::counted
}
