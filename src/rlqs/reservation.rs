//! Exact shares for buckets of `never_above` limits: everything Envoy could admit under a
//! token bucket is taken from the bucket's counters (as one hit of that cost, exact) before
//! the assignment is sent, and what it certainly did not spend is given back.
//!
//! Envoy spends a token bucket on its own and reports only afterwards, so counting its
//! reports (as for `never_below` limits) always comes late. Here the count comes first:
//!
//! - **Taken ahead.** A token bucket Envoy starts anew (a new or changed bucket, or one
//!   whose assignment ended) can admit at most `max_tokens` plus its fills over its time to
//!   live; that much is taken when it is sent. A renewal of an unchanged bucket (Envoy keeps
//!   its tokens) takes the fills of the time it adds. The take is the engine's `never_above`
//!   hit: denied unless the counter has the room (from the rights this process holds, where
//!   other processes or regions share the counter), so the sum of what every Envoy may admit
//!   never exceeds what the limit allows.
//! - **Inside one cell.** An assignment ends before its counters' current cells do, by the
//!   clock margin and [`DELIVERY_BOUND`]: what it admits falls in the cell it was taken in.
//!   The next cell's assignment is taken and sent afresh; between the two, Envoy's bucket
//!   is without an assignment for about as long as the margins.
//! - **Given back.** Once a report shows what Envoy admitted, Envoy may still admit at most
//!   its bucket's `max_tokens` and the fills up to the assignment's end (the report's send
//!   and the assignment's end both widened by [`DELIVERY_BOUND`]): what was taken beyond
//!   that and the reports since the cell began is given back, a refund in the same cell.
//! - **Not counted twice.** A report's allowed requests were taken ahead; only what goes
//!   beyond everything taken (an Envoy that admits with no assignment) is counted as a
//!   report of a `never_below` limit is.
//!
//! Assumption: an assignment reaches Envoy, and a report reaches the service, within
//! [`DELIVERY_BOUND`] of being sent.

use std::time::{Duration, Instant};

use gcounter_engine::local::WindowPosition;
use gcounter_engine::plant::{self, Plant};
use gcounter_engine::{Engine, Hit};

use super::board::Member;
use super::bucket::BucketCounter;
use super::share::{Decision, Strategy};

/// What a bucket's [`Ledger`] holds, its allocation and its cells' sequences (a few windows)
/// included: charged against `--rlqs-max-bucket-bytes` beside the bucket.
pub const LEDGER_BYTES: usize = std::mem::size_of::<Ledger>() + 64;
/// The longest an assignment or a report takes from one end of a stream to the other.
pub const DELIVERY_BOUND: Duration = Duration::from_secs(1);
/// A token bucket is assigned for at least this long; closer to a cell's end the bucket is
/// denied until the next cell.
const SHORTEST_TTL: Duration = Duration::from_secs(2);
/// A token bucket states at most this many times the bucket's demand (at least one hit a
/// second).
const DEMAND_HEADROOM: f64 = 2.0;
/// Attempts at a smaller token bucket when the counter has no room for the one wanted.
const FIT_ATTEMPTS: usize = 3;
/// A give-back is made only while the cells have at least this long left, so that the
/// refund certainly lands in the cell the rights were taken in.
const GIVE_BACK_MARGIN: Duration = Duration::from_secs(1);

/// What a token bucket refills over `period`, rounded up: Envoy's bucket refills
/// continuously at `tokens_per_fill ÷ fill_interval` a second (its `AtomicTokenBucketImpl`,
/// not a fill at a time), so over `period` it admits at most its tokens and this.
pub fn fills(strategy: Strategy, period: Duration) -> u64 {
    refill(strategy, period, u128::div_ceil)
}

/// What a token bucket refills over `period` at least, rounded down: what of its [`fills`]
/// it certainly does not get when it is replaced `period` before its end.
fn refill_at_least(strategy: Strategy, period: Duration) -> u64 {
    refill(strategy, period, |refilled, interval| refilled / interval)
}

/// `tokens_per_fill × period ÷ fill_interval`, rounded by `round`.
fn refill(strategy: Strategy, period: Duration, round: impl Fn(u128, u128) -> u128) -> u64 {
    match strategy {
        Strategy::TokenBucket {
            tokens_per_fill,
            fill_interval_s,
            ..
        } => {
            let refilled = u128::from(tokens_per_fill) * period.as_nanos();
            let interval_ns = u128::from(fill_interval_s.max(1)) * 1_000_000_000;
            u64::try_from(round(refilled, interval_ns)).unwrap_or(u64::MAX)
        }
        Strategy::AllowAll | Strategy::DenyAll => 0,
    }
}

fn max_tokens(strategy: Strategy) -> u64 {
    match strategy {
        Strategy::TokenBucket { max_tokens, .. } => u64::from(max_tokens),
        Strategy::AllowAll | Strategy::DenyAll => 0,
    }
}

/// The counters' current cells by the engine's clock, and how long until the first of them
/// ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cells {
    sequences: Vec<u64>,
    until_end: Duration,
}

impl Cells {
    pub fn now(engine: &Engine, counters: &[BucketCounter]) -> Self {
        let now_ms = engine.now_ms();
        let mut until_end_ms = u64::MAX;
        let sequences = counters
            .iter()
            .map(|counter| {
                let position = WindowPosition::at(now_ms, counter.counter.duration_ms);
                until_end_ms = until_end_ms.min(position.until_reset_ms());
                position.sequence
            })
            .collect();
        Self {
            sequences,
            until_end: Duration::from_millis(until_end_ms),
        }
    }
}

/// The token bucket Envoy holds, as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    strategy: Strategy,
    /// When it was sent as a new bucket (Envoy starts it full).
    started: Instant,
    /// When its assignment ends by the service's clock (Envoy's ends within
    /// [`DELIVERY_BOUND`] after).
    ends: Instant,
}

/// One bucket's takes and reports in its counters' current cells.
#[derive(Debug, Default)]
pub struct Ledger {
    cells: Option<Vec<u64>>,
    /// Taken in these cells.
    taken: u64,
    /// Given back of it.
    given_back: u64,
    /// Allowed requests reported since these cells began.
    reported: u64,
    /// Of them, those no take covered (counted as reports of other limits are).
    uncovered: u64,
    /// What was taken in earlier cells and not reported yet: Envoy's reports of what it
    /// admitted there, arriving now, are covered by it.
    carried: u64,
    held: Option<Held>,
}

/// What to send a bucket: the strategy and its time to live, and what was taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assignment {
    pub strategy: Strategy,
    pub ttl: Duration,
    pub taken: u64,
}

impl Ledger {
    /// Moves the ledger to `cells`: a new cell starts with nothing taken; what the old one
    /// took and was not reported still covers reports, and Envoy holds no bucket of it (its
    /// assignment ended before the cell did).
    fn roll_to(&mut self, cells: &Cells) {
        if self.cells.as_ref() == Some(&cells.sequences) {
            return;
        }
        if self.cells.is_some() {
            *self = Self {
                carried: self.cover_left(),
                ..Self::default()
            };
        }
        self.cells = Some(cells.sequences.clone());
    }

    /// What was taken and neither given back nor shown by a report yet.
    fn cover_left(&self) -> u64 {
        let covered_reports = self.reported.saturating_sub(self.uncovered);
        self.carried
            .saturating_add(self.taken)
            .saturating_sub(self.given_back)
            .saturating_sub(covered_reports)
    }

    /// Taken in these cells and neither given back nor shown by a report yet.
    pub fn outstanding(&self) -> u64 {
        let covered_reports = self.reported.saturating_sub(self.uncovered);
        self.taken
            .saturating_sub(self.given_back)
            .saturating_sub(covered_reports)
    }

    /// The strategy held now, if its assignment has not ended.
    fn holding(&self, now: Instant) -> Option<Held> {
        self.held.filter(|held| held.ends > now)
    }

    /// Whether `wanted` should be taken and sent now, against what was `sent`: a change, a
    /// token bucket half through its assignment or past it, anything else half through
    /// `ttl`.
    pub fn due(
        &self,
        wanted: Strategy,
        sent: Option<(Strategy, Instant)>,
        now: Instant,
        ttl: Duration,
    ) -> bool {
        match sent {
            None => true,
            Some((strategy, _)) if strategy != wanted => true,
            Some((_, at)) => match (wanted, self.holding(now)) {
                (Strategy::TokenBucket { .. }, Some(held)) => {
                    now.saturating_duration_since(at) >= held.ends.saturating_duration_since(at) / 2
                }
                (Strategy::TokenBucket { .. }, None) => true,
                _ => now.saturating_duration_since(at) >= ttl / 2,
            },
        }
    }

    /// The assignment for `wanted` now, taken from the counters first: the strategy itself
    /// when they have the room, a smaller token bucket that fits, or a denial (also in a
    /// cell's last seconds, until the next cell). `None`: nothing to send, the bucket held
    /// running to its end (it can be renewed no further in this cell, or the counters have
    /// no room for what would replace it).
    pub async fn assign(
        &mut self,
        engine: &Engine,
        counters: &[BucketCounter],
        wanted: Strategy,
        now: Instant,
        ttl: Duration,
    ) -> Option<Assignment> {
        let cells = Cells::now(engine, counters);
        self.roll_to(&cells);
        if !matches!(wanted, Strategy::TokenBucket { .. }) {
            return Some(self.end_held(wanted, now, ttl));
        }
        let margin = engine.clock_skew().saturating_add(DELIVERY_BOUND);
        let room = cells.until_end.saturating_sub(margin).min(ttl);
        // Envoy reads whole seconds of a time to live.
        let bucket_ttl = Duration::from_secs(room.as_secs());
        let ends = now + bucket_ttl;
        let held = self.holding(now);
        if held.is_some_and(|held| held.strategy == wanted && held.ends >= ends) {
            return None;
        }
        if bucket_ttl < SHORTEST_TTL {
            return Some(self.end_held(Strategy::DenyAll, now, ttl));
        }
        let mut strategy = wanted;
        for _ in 0..FIT_ATTEMPTS {
            let cost = self.cost(strategy, now, ends);
            match take(engine, counters, cost).await {
                Ok(()) => {
                    self.taken = self.taken.saturating_add(cost);
                    let started = match held {
                        Some(held) if held.strategy == strategy => held.started,
                        _ => now,
                    };
                    self.held = Some(Held {
                        strategy,
                        started,
                        ends,
                    });
                    return Some(Assignment {
                        strategy,
                        ttl: bucket_ttl,
                        taken: cost,
                    });
                }
                // A smaller bucket replaces the one Envoy holds only if it is faster than
                // that one: trading a running bucket for a slower one refuses what was taken.
                Err(room) => match smaller(strategy, room, bucket_ttl) {
                    Some(smaller) if held.is_none_or(|held| faster(smaller, held.strategy)) => {
                        strategy = smaller;
                    }
                    _ => break,
                },
            }
        }
        // A bucket held runs to its end: what it may still admit was taken already.
        if held.is_some() {
            return None;
        }
        Some(self.end_held(Strategy::DenyAll, now, ttl))
    }

    /// `strategy` (a blanket rule) replaces the bucket held: Envoy's ends once it arrives.
    fn end_held(&mut self, strategy: Strategy, now: Instant, ttl: Duration) -> Assignment {
        if let Some(held) = self.held.as_mut() {
            held.ends = held.ends.min(now);
        }
        Assignment {
            strategy,
            ttl,
            taken: 0,
        }
    }

    /// What sending `strategy` until `ends` may let Envoy admit beyond what was taken: all
    /// of a new bucket less what the bucket it replaces can no longer refill, the added
    /// fills of a renewal.
    fn cost(&self, strategy: Strategy, now: Instant, ends: Instant) -> u64 {
        if plant::planted(Plant::RlqsTakeShort) {
            return max_tokens(strategy);
        }
        match self.holding(now) {
            Some(held) if held.strategy == strategy => {
                // Envoy's end moves from after `held.ends` to at most `ends` + the delivery.
                fills(
                    strategy,
                    ends.saturating_duration_since(held.ends) + DELIVERY_BOUND,
                )
            }
            held => {
                let whole = max_tokens(strategy)
                    .saturating_add(fills(strategy, ends.saturating_duration_since(now)));
                // A bucket replaced admits nothing once the new one reaches Envoy: its refill
                // from then to its end was taken and can never be spent.
                let unspendable = held.map_or(0, |held| {
                    let replaced = now + DELIVERY_BOUND;
                    refill_at_least(held.strategy, held.ends.saturating_duration_since(replaced))
                });
                whole.saturating_sub(unspendable)
            }
        }
    }

    /// A report of `allowed` requests received `now`: the part of them nothing taken covers
    /// (to be counted as any report is), and what can be given back.
    pub fn report(
        &mut self,
        engine: &Engine,
        counters: &[BucketCounter],
        allowed: u64,
        now: Instant,
    ) -> Report {
        let cells = Cells::now(engine, counters);
        self.roll_to(&cells);
        let uncovered = allowed.saturating_sub(self.cover_left());
        self.reported = self.reported.saturating_add(allowed);
        self.uncovered = self.uncovered.saturating_add(uncovered);
        let give_back = match self.may_still_admit(now) {
            Some(future) if cells.until_end >= GIVE_BACK_MARGIN + engine.clock_skew() => {
                let kept = self.taken.saturating_sub(self.given_back);
                kept.saturating_sub(self.reported.saturating_add(future))
            }
            _ => 0,
        };
        self.given_back = self.given_back.saturating_add(give_back);
        Report {
            uncovered,
            give_back,
        }
    }

    /// The most Envoy may still admit under what it holds, after a report received `now`
    /// (sent no earlier than a [`DELIVERY_BOUND`] ago); `None` when the report may have been
    /// sent before Envoy had its current bucket.
    fn may_still_admit(&self, now: Instant) -> Option<u64> {
        let Some(held) = self.held else {
            return Some(0);
        };
        if now < held.started + 2 * DELIVERY_BOUND {
            return None;
        }
        let sent = now - DELIVERY_BOUND;
        let envoy_ends = held.ends + DELIVERY_BOUND;
        if sent >= envoy_ends {
            return Some(0);
        }
        Some(max_tokens(held.strategy).saturating_add(fills(held.strategy, envoy_ends - sent)))
    }
}

/// The assignment for a bucket of a `never_above` limit now, if one is due against what was
/// `sent`: its share as a token bucket whose every admission is taken from the counters
/// before it is sent, or a denial where they have no room for one.
pub async fn assign(
    engine: &Engine,
    member: &Member,
    ledger: &mut Ledger,
    sent: Option<(Strategy, Instant)>,
    now: Instant,
    ttl: Duration,
) -> Option<Assignment> {
    let current = sent.map(|(strategy, _)| strategy);
    let wanted = member
        .decide(engine, now, |share| {
            let strategy = if share.penalized {
                Strategy::DenyAll
            } else {
                // What is taken ahead is held from every other Envoy until a report shows it
                // unspent: a share follows the bucket's demand, not the counter's spare.
                let rate = share.rate.min((DEMAND_HEADROOM * share.demand).max(1.0));
                Strategy::next(current, rate)
            };
            Decision { strategy, lent: 0 }
        })
        .strategy;
    if !ledger.due(wanted, sent, now, ttl) {
        return None;
    }
    let assignment = ledger
        .assign(engine, member.counters(), wanted, now, ttl)
        .await?;
    member.took(assignment.taken, ledger.outstanding());
    // A blanket rule decided again (no room yet) is sent only as any renewal is.
    let renewal_early = sent.is_some_and(|(strategy, at)| {
        strategy == assignment.strategy
            && assignment.taken == 0
            && now.saturating_duration_since(at) < ttl / 2
    });
    (!renewal_early).then_some(assignment)
}

/// For a report of `allowed` requests of a bucket on `counters`: how many were taken ahead
/// (not to be counted again); what its takes certainly left unspent goes back to the
/// counters.
pub async fn settle(
    engine: &Engine,
    counters: &[BucketCounter],
    member: Option<&Member>,
    ledger: &mut Ledger,
    allowed: u64,
    now: Instant,
) -> u64 {
    let report = ledger.report(engine, counters, allowed, now);
    give_back(engine, counters, report.give_back).await;
    if let Some(member) = member {
        member.took(0, ledger.outstanding());
    }
    allowed - report.uncovered
}

/// What a report of a bucket on a `never_above` counter comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// Allowed requests no take covers: counted as a report's are.
    pub uncovered: u64,
    /// Taken and certainly not spent: to give back.
    pub give_back: u64,
}

/// A token bucket smaller than `strategy` to try when the counters had only `room` left
/// (0 where the engine does not say: rights are taken from a shared store), if one states
/// at least the slowest rate.
fn smaller(strategy: Strategy, room: u64, ttl: Duration) -> Option<Strategy> {
    let rate = strategy.rate().unwrap_or(0.0);
    let fitting = if room > 0 {
        // A bucket of rate r may admit its second of tokens and r × ttl; two seconds of
        // slack for the rounding of its stated rate.
        (room as f64 / (ttl.as_secs_f64() + 2.0)).min(rate / 2.0)
    } else {
        rate / 4.0
    };
    let smaller = Strategy::for_rate(fitting);
    (matches!(smaller, Strategy::TokenBucket { .. }) && smaller != strategy).then_some(smaller)
}

/// Whether `strategy` admits faster than `than`.
fn faster(strategy: Strategy, than: Strategy) -> bool {
    strategy.rate().unwrap_or(0.0) > than.rate().unwrap_or(0.0)
}

fn hit(counter: &BucketCounter, cost: u64) -> Hit<'_> {
    Hit {
        counter: counter.counter.borrowed(),
        limit: counter.limit,
        cost,
        exact: true,
    }
}

/// Takes `cost` on every counter, or none: `Err` with the least room a counter had.
///
/// The counters' room is looked at first (a hit of cost 0 counts nothing): with
/// `--count-denied` a denied hit counts its cost, and a take that does not fit must not.
async fn take(engine: &Engine, counters: &[BucketCounter], cost: u64) -> Result<(), u64> {
    let mut room = u64::MAX;
    for counter in counters {
        room = room.min(engine.check(hit(counter, 0)).await.remaining);
    }
    if room < cost {
        return Err(room);
    }
    for (n, counter) in counters.iter().enumerate() {
        let verdict = engine.check(hit(counter, cost)).await;
        if !verdict.allowed {
            give_back(engine, counters.get(..n).unwrap_or_default(), cost).await;
            return Err(verdict.remaining);
        }
    }
    Ok(())
}

/// Gives `amount` back on every counter (a refund of this process's own count).
pub async fn give_back(engine: &Engine, counters: &[BucketCounter], amount: u64) {
    if amount == 0 {
        return;
    }
    for counter in counters {
        engine.refund(hit(counter, amount)).await;
    }
}

#[cfg(test)]
mod simulated;
#[cfg(test)]
mod tests;
