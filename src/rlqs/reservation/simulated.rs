//! The ledger against a simulated Envoy: token buckets applied as Envoy 1.40 applies them
//! (a new or changed bucket starts full, one Envoy takes as the same keeps its tokens and
//! rate and extends its time to live, the refill continuous), assignments and reports each
//! delayed by up to [`DELIVERY_BOUND`] and kept in order (one HTTP/2 stream each way),
//! reports every 5 s or so, the strategy the service wants moving at random. At every step
//! of 10 ms, what the Envoy admitted in the current window must be covered by what the
//! counter holds of it: taken ahead, less what was given back. Seeded, so a failure replays.

use std::collections::HashMap;
use std::sync::Arc;

use gcounter_engine::cell_key::{CounterKey, Scope};
use gcounter_engine::recorder::NoRecorder;
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{EngineSettings, ManualClock, Windows};

use super::*;

const START_MS: u64 = 600_000 + 5_000;
const WINDOW_MS: u64 = 60_000;
const LIMIT: u64 = 200;
const STEP_MS: u64 = 10;
const RUN_MS: u64 = 150_000;
const TTL: Duration = Duration::from_secs(10);

/// xorshift64*: enough randomness for timings, and the same for a seed everywhere.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The Envoy's bucket, as its filter holds it.
struct EnvoyBucket {
    strategy: Strategy,
    tokens: f64,
    at_ms: u64,
    expires_ms: u64,
}

/// Whether Envoy keeps the token bucket it holds (`held`, its rate and tokens) when `sent`
/// arrives: its filter compares `max_tokens`, `tokens_per_fill` and the fill interval's
/// nanoseconds, not its seconds, so a bucket that differs only in the whole seconds of its
/// interval runs on at the old rate.
fn envoy_keeps(held: Strategy, sent: Strategy) -> bool {
    held.envoy_identity().is_some() && held.envoy_identity() == sent.envoy_identity()
}

/// How the simulated Envoy may misbehave, to show that the check catches it.
#[derive(Clone, Copy, PartialEq)]
enum Envoy {
    AsEnvoy,
    /// Refills twice as fast as its bucket states.
    Overdraws,
}

/// When a message sent on a stream with `in_flight` arrives at the earliest `arrives`: not
/// before those sent ahead of it.
fn in_order<T>(in_flight: &[(u64, T)], arrives: u64) -> u64 {
    in_flight.iter().map(|(at, _)| *at).fold(arrives, u64::max)
}

/// Runs one seed; the first step at which the Envoy's admissions in a window exceeded what
/// the counter held of them, if any: `(ms, admitted, held)` (or a report beyond every take:
/// `(ms, reported, covered)`).
async fn run(seed: u64, envoy: Envoy) -> Option<(u64, u64, u64)> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let settings = EngineSettings {
        windows: Windows::Fixed,
        ..EngineSettings::default()
    };
    let engine = Engine::new(
        settings,
        Arc::new(InProcessOrigin::new(1_000)),
        Arc::clone(&clock) as Arc<dyn gcounter_engine::Clock>,
        Arc::new(NoRecorder),
    );
    let counters = vec![BucketCounter {
        counter: CounterKey {
            scope: Scope::new("quota", "7:api_key/"),
            identifier: "3:sim".into(),
            duration_ms: WINDOW_MS,
        },
        limit: LIMIT,
    }];
    let mut random = Random(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let base = Instant::now();
    let delivery_ms = DELIVERY_BOUND.as_millis() as u64;
    let rates = [0.25, 0.5, 1.0, 3.0, 7.0, 15.0];

    let mut ledger = Ledger::default();
    let mut sent: Option<(Strategy, Instant)> = None;
    let mut wanted = Strategy::for_rate(3.0);
    let mut assignments: Vec<(u64, (Strategy, u64))> = Vec::new();
    let mut reports: Vec<(u64, u64)> = Vec::new();
    let mut bucket: Option<EnvoyBucket> = None;
    let mut unreported = 0;
    let mut next_report_ms = 0;
    let mut next_tick_ms = 0;
    let mut admitted: HashMap<u64, u64> = HashMap::new();

    let mut t = 0;
    while t < RUN_MS {
        clock.set(START_MS + t);
        let now = base + Duration::from_millis(t);
        // Assignments reaching the Envoy.
        while assignments
            .first()
            .is_some_and(|(arrives, _)| *arrives <= t)
        {
            let (_, (strategy, ttl_ms)) = assignments.remove(0);
            bucket = match (strategy, bucket.take()) {
                (Strategy::TokenBucket { .. }, Some(mut same))
                    if envoy_keeps(same.strategy, strategy) && t < same.expires_ms =>
                {
                    same.expires_ms = t + ttl_ms;
                    Some(same)
                }
                (Strategy::TokenBucket { .. }, _) => {
                    let full = max_tokens(strategy) as f64;
                    Some(EnvoyBucket {
                        strategy,
                        tokens: full,
                        at_ms: t,
                        expires_ms: t + ttl_ms,
                    })
                }
                _ => None,
            };
        }
        // The Envoy admits whatever its bucket allows (its clients always want more).
        if let Some(held) = bucket.as_mut().filter(|b| t < b.expires_ms) {
            let stated = held.strategy.rate().unwrap_or(0.0);
            let rate = match envoy {
                Envoy::AsEnvoy => stated,
                Envoy::Overdraws => 2.0 * stated,
            };
            let full = max_tokens(held.strategy) as f64;
            held.tokens = (held.tokens + rate * (t - held.at_ms) as f64 / 1_000.0).min(full);
            held.at_ms = t;
            if held.tokens >= 1.0 {
                held.tokens -= 1.0;
                unreported += 1;
                *admitted.entry((START_MS + t) / WINDOW_MS).or_default() += 1;
            }
        }
        if t >= next_report_ms {
            let arrives = in_order(&reports, t + random.below(delivery_ms + 1));
            reports.push((arrives, unreported));
            unreported = 0;
            next_report_ms = t + 4_500 + random.below(1_001);
        }
        // The service: reports received, then a report's or a tick's assignment.
        let mut decide = t >= next_tick_ms;
        while reports.first().is_some_and(|(arrives, _)| *arrives <= t) {
            let (_, allowed) = reports.remove(0);
            let report = ledger.report(&engine, &counters, allowed, now);
            if report.uncovered > 0 {
                // Reported beyond every take: admitted with nothing taken for it.
                return Some((t, allowed, allowed - report.uncovered));
            }
            give_back(&engine, &counters, report.give_back).await;
            decide = true;
        }
        if decide {
            next_tick_ms = t + 1_000;
            if random.below(4) == 0 {
                let pick = random.below(rates.len() as u64 + 1) as usize;
                wanted = rates
                    .get(pick)
                    .map_or(Strategy::DenyAll, |rate| Strategy::for_rate(*rate));
            }
            if ledger.due(wanted, sent, now, TTL)
                && let Some(assignment) = ledger.assign(&engine, &counters, wanted, now, TTL).await
            {
                sent = Some((assignment.strategy, now));
                let arrives = in_order(&assignments, t + random.below(delivery_ms + 1));
                let ttl_ms = assignment.ttl.as_millis() as u64;
                assignments.push((arrives, (assignment.strategy, ttl_ms)));
            }
        }
        // What the counter holds of this window against what the Envoy admitted in it.
        let peek = engine.check(hit(&counters[0], 0)).await;
        let held = LIMIT - peek.remaining;
        let spent = admitted
            .get(&((START_MS + t) / WINDOW_MS))
            .copied()
            .unwrap_or(0);
        if spent > held {
            return Some((t, spent, held));
        }
        t += STEP_MS;
    }
    None
}

#[tokio::test]
async fn a_simulated_envoy_never_admits_more_than_was_taken_for_it() {
    for seed in 1..=40 {
        assert_eq!(run(seed, Envoy::AsEnvoy).await, None, "seed {seed}");
    }
}

#[tokio::test]
async fn the_check_catches_an_envoy_that_admits_beyond_its_bucket() {
    let mut caught = 0;
    for seed in 1..=12 {
        if run(seed, Envoy::Overdraws).await.is_some() {
            caught += 1;
        }
    }
    // Seeded: all 12.
    assert_eq!(
        caught, 12,
        "an overdrawing Envoy caught on {caught} of 12 seeds"
    );
}
