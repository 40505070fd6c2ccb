//! One usage of a report counted: the allowed requests on the bucket's counters (the part
//! that happened before the current window began on the previous window's cell, the requests
//! taken as spread evenly over the interval), and the demand on the board.

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

/// Counts a usage's allowed requests on the bucket's counters (the part that happened before
/// the current window began on the previous window's cell) and its demand on the board.
pub async fn count(
    shared: &Shared,
    resolution: &Resolution,
    member: Option<&Member>,
    allowed: u64,
    denied: u64,
    interval: Option<Duration>,
) -> UsageOutcome {
    let Resolution::Counted { counters, .. } = resolution else {
        return UsageOutcome::not_counted;
    };
    let now_ms = shared.engine.now_ms();
    let measured = interval.unwrap_or(FIRST_INTERVAL);
    let interval_ms = u64::try_from(measured.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut in_current = Vec::with_capacity(counters.len());
    for counter in counters.iter() {
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
    let Some(member) = member else {
        return UsageOutcome::over_capacity;
    };
    let demand = (allowed + denied) as f64 / measured.as_secs_f64();
    member.report(demand, &in_current, interval, now_ms);
    UsageOutcome::counted
}
