//! How much of a limit each Envoy may admit next, and the strategy that tells it so.
//!
//! With sliding windows the engine counts a limit as the current window's total plus the
//! previous one's, weighted by what is left of the window. Under sustained demand
//! that count stays at the limit when the counter grows exactly as fast as the previous
//! window's weight falls (`previous ÷ window` per second). So the rate the counter may grow
//! at is that, plus the room left (`limit − count`) spread over [`CONVERGENCE`]; what the
//! counter's other traffic takes (RLS v3 decisions, other processes, other regions) is
//! subtracted, and the rest is split between this process's Envoys by their demand
//! (max-min fair). With fixed windows nothing slides out: the rate is the room left alone,
//! and the boundary gives the whole limit back. Each report corrects the next: counts arrive late by one reporting
//! interval, and the room term pulls the window back to its limit.

use std::time::Duration;

use gcounter_engine::plant::{self, Plant};
use gcounter_engine::{CounterState, Windows};

/// The shortest time over which the room left in a window is handed out.
pub const MIN_CONVERGENCE: Duration = Duration::from_secs(2);
/// The room is handed out over this many reporting intervals: what an Envoy admits is seen
/// only at its next report (every 5 s in Envoy 1.40, whatever `reporting_interval` says), so
/// handing it out faster would overshoot before the service learns of it.
pub const INTERVALS_OF_CONVERGENCE: f64 = 2.0;

/// Over how long the room left is handed out, for reports every `report_interval`.
pub fn convergence(report_interval: Duration) -> Duration {
    report_interval
        .mul_f64(INTERVALS_OF_CONVERGENCE)
        .max(MIN_CONVERGENCE)
}

/// The rate (hits per second) at which `state`'s counter may grow from now on so that its
/// sliding window holds at `limit`, the room left handed out over `convergence` (at most
/// the window).
pub fn counter_rate(limit: u64, state: &CounterState, convergence: Duration) -> f64 {
    let window_s = (state.duration_ms.max(1) as f64) / 1_000.0;
    // With fixed windows nothing frees up before the boundary, where the whole limit does.
    let previous = match state.windows {
        Windows::Sliding => state.previous.map_or(0, |cell| cell.total()) as f64,
        Windows::Fixed => 0.0,
    };
    let freeing = previous / window_s;
    let room = limit as f64 - state.effective() as f64;
    let convergence = convergence.as_secs_f64().clamp(0.001, window_s);
    (freeing + room / convergence).max(0.0)
}

/// How `total` (hits per second) is split between consumers with given demands (hits per
/// second): max-min fair when they want more than there is (no one gets more than it asks
/// while another gets less than its equal share); otherwise each gets its demand and an
/// equal part of what is left over, so demand that grows is not refused until the next
/// assignment. One number says it all, so a member's share is its own demand against it:
/// computed once for a group, read by every member in constant time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Level {
    /// Everyone gets its demand and this much more.
    Spare(f64),
    /// No one gets more than this (the water level).
    Capped(f64),
}

impl Level {
    /// The level that splits `total` between `demands` (sorted here: O(n log n)).
    pub fn of(total: f64, demands: impl Iterator<Item = f64>) -> Self {
        let total = total.max(0.0);
        let mut demands: Vec<f64> = demands.map(|d| d.max(0.0)).collect();
        let n = demands.len();
        if n == 0 {
            return Self::Spare(total);
        }
        let wanted: f64 = demands.iter().sum();
        if wanted <= total {
            return Self::Spare((total - wanted) / n as f64);
        }
        demands.sort_unstable_by(f64::total_cmp);
        let mut left = total;
        for (served, demand) in demands.iter().enumerate() {
            let fair = left / (n - served) as f64;
            if *demand > fair {
                return Self::Capped(fair);
            }
            left -= demand;
        }
        // Only by rounding: every demand fit.
        Self::Spare(left.max(0.0) / n as f64)
    }

    /// A level that splits `less` (hits per second) fewer between `n` consumers, giving no
    /// one more than this one does: `None` where only a new split can say (spare that
    /// `less` overdraws). O(1): lending a burst takes it off every share at once.
    pub fn lessen(self, less: f64, n: usize) -> Option<Self> {
        let less = less.max(0.0);
        match self {
            Self::Spare(spare) if n > 0 && spare >= less / n as f64 => {
                Some(Self::Spare(spare - less / n as f64))
            }
            Self::Spare(_) => None,
            // Every capped consumer loses `less`: the sum loses at least that.
            Self::Capped(level) => Some(Self::Capped((level - less).max(0.0))),
        }
    }

    /// The share of a consumer that demands `demand`.
    pub fn share(&self, demand: f64) -> f64 {
        let demand = demand.max(0.0);
        match *self {
            Self::Spare(spare) => demand + spare,
            Self::Capped(level) => demand.min(level),
        }
    }
}

/// Each consumer's share of `total` (see [`Level`]).
#[cfg(test)]
pub fn split(total: f64, demands: &[f64]) -> Vec<f64> {
    let level = Level::of(total, demands.iter().copied());
    demands.iter().map(|d| level.share(*d)).collect()
}

/// What an Envoy is told to do with a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    AllowAll,
    DenyAll,
    /// Envoy's token bucket: `tokens_per_fill` every `fill_interval_s` whole seconds (Envoy
    /// reads only the seconds of the interval), holding at most `max_tokens`. A new or changed
    /// bucket starts full. The service sends every bucket with the same interval (see
    /// `FILL_INTERVAL_S`).
    TokenBucket {
        max_tokens: u32,
        tokens_per_fill: u32,
        fill_interval_s: u32,
    },
}

/// Below this rate (hits per second) a share is a denial: one token a fill (a minute) is the
/// slowest rate a token bucket states here.
const SLOWEST_RATE: f64 = 1.0 / 60.0;
/// Every token bucket refills over this interval. Envoy tells a changed bucket from the one
/// it holds by `max_tokens`, `tokens_per_fill` and the nanoseconds of `fill_interval`, not
/// its seconds: a bucket that differs only in the whole seconds of its interval is taken as
/// the same one and runs on at the old rate. With one interval for every bucket, another rate
/// is another `tokens_per_fill`, and what Envoy enforces is what was sent.
const FILL_INTERVAL_S: u32 = 60;
/// A token bucket holds at most this long of its rate: Envoy starts a new or changed bucket
/// full, so its size is what an assignment can admit at once beyond its rate.
const BURST: Duration = Duration::from_secs(1);
/// A new rate within this fraction of the one assigned keeps the assigned strategy: Envoy
/// refills a bucket whose strategy changed, so small changes would give away a burst each.
const HYSTERESIS: f64 = 0.1;
/// The most an Envoy sharing its counter is handed at once beyond one second of its rate.
/// Spread over two reporting intervals, a room of a few requests comes at under one a
/// second, and a client that bursts is refused what its limit allows; where the room is
/// larger, one second of rate already holds a tenth of it. A bucket alone on its counter is
/// lent the whole room (see [`Strategy::decide`]).
pub const MAX_BURST: u32 = 10;

/// The room left on a member's counter that it may take at once.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Burst {
    /// The room (`limit − count`) that no Envoy of the group holds as a burst.
    pub pool: f64,
    /// What the member's own Envoy may still hold of the bursts lent to it.
    pub held: f64,
    /// The member is the only one of its group and no other traffic shows on its counters:
    /// nobody else can want the room.
    pub alone: bool,
}

/// What a member is told, and the burst that lends it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub strategy: Strategy,
    /// Requests lent as a burst: the Envoy may admit them at once, before its next report
    /// shows them. Zero when no new token bucket is sent.
    pub lent: u32,
}

impl Strategy {
    /// The token bucket for `rate` hits per second (or a denial below the slowest rate).
    pub fn for_rate(rate: f64) -> Self {
        if !rate.is_finite() || rate < SLOWEST_RATE {
            return Self::DenyAll;
        }
        let tokens = (rate * f64::from(FILL_INTERVAL_S))
            .round()
            .clamp(1.0, f64::from(u32::MAX));
        let burst = (rate * BURST.as_secs_f64())
            .ceil()
            .clamp(1.0, f64::from(u32::MAX));
        // All finite and clamped into u32's range.
        Self::TokenBucket {
            max_tokens: burst as u32,
            tokens_per_fill: tokens as u32,
            fill_interval_s: FILL_INTERVAL_S,
        }
    }

    /// The token bucket for `rate` that starts with `burst` tokens (at least one second of
    /// its rate), at no less than the slowest rate a token bucket states.
    pub fn with_burst(rate: f64, burst: u32) -> Self {
        match Self::for_rate(rate.max(SLOWEST_RATE)) {
            Self::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_s,
            } => Self::TokenBucket {
                max_tokens: max_tokens.max(burst),
                tokens_per_fill,
                fill_interval_s,
            },
            other => other,
        }
    }

    /// What Envoy compares to tell a changed token bucket from the one it holds:
    /// `max_tokens` and `tokens_per_fill` (and the interval's nanoseconds, always 0 here), not
    /// the interval's seconds. `None` for a blanket rule.
    #[cfg(test)]
    pub fn envoy_identity(self) -> Option<(u32, u32)> {
        match self {
            Self::TokenBucket {
                max_tokens,
                tokens_per_fill,
                ..
            } => Some((max_tokens, tokens_per_fill)),
            Self::AllowAll | Self::DenyAll => None,
        }
    }

    /// The rate this strategy admits at, hits per second (`None`: no bound).
    pub fn rate(&self) -> Option<f64> {
        match *self {
            Self::AllowAll => None,
            Self::DenyAll => Some(0.0),
            Self::TokenBucket {
                tokens_per_fill,
                fill_interval_s,
                ..
            } => Some(f64::from(tokens_per_fill) / f64::from(fill_interval_s.max(1))),
        }
    }

    /// The strategy to send for `rate` when `current` is assigned: `current` while the rate is
    /// within `HYSTERESIS` of it, so an unchanged bucket keeps its tokens.
    pub fn next(current: Option<Strategy>, rate: f64) -> Self {
        let wanted = Self::for_rate(rate);
        match current {
            Some(current @ Self::TokenBucket { .. }) if wanted != Self::DenyAll => {
                let assigned = current.rate().unwrap_or(0.0);
                if (rate - assigned).abs() <= HYSTERESIS * assigned {
                    current
                } else {
                    wanted
                }
            }
            _ => wanted,
        }
    }

    /// The strategy to send for a share of `rate` and the room `burst` on the counter, when
    /// `current` is assigned and lent `current_lent` (`horizon`: over how long the group's
    /// room is handed out).
    ///
    /// - Only a bucket's first token bucket is lent a burst. Envoy creates it full, so what
    ///   it is lent it holds; a changed bucket may start with what the old one had left
    ///   instead, and a burst charged on every change was room no Envoy got (three Envoys at
    ///   steady load admitted 0.85 of their limit so).
    /// - A bucket alone on its counter is lent all the room no Envoy holds; one that shares
    ///   it, up to `MAX_BURST`. The tokens come out of the rate (`lent ÷ horizon`), and the
    ///   board charges them until reports show them.
    /// - Once the counter is shared, a bucket lent more than `MAX_BURST` is taken back: it
    ///   is sent the plain token bucket of its share, which Envoy starts anew, so it holds
    ///   no more than one second of that rate. What it may have spent of the old one stays
    ///   charged until its next report shows it.
    /// - While the member's Envoy may still hold the burst it was lent and its rate has not
    ///   moved, the assignment stays: a changed one would refill the bucket.
    /// - An unchanged strategy lends nothing: Envoy keeps the tokens it has.
    pub fn decide(
        current: Option<Strategy>,
        current_lent: u32,
        rate: f64,
        burst: Burst,
        horizon: Duration,
    ) -> Decision {
        let keep = |strategy| Decision { strategy, lent: 0 };
        let cap = if burst.alone && !plant::planted(Plant::RlqsLoneCapped) {
            f64::from(u32::MAX)
        } else {
            f64::from(MAX_BURST)
        };
        if let Some(current @ Self::TokenBucket { .. }) = current
            && current_lent >= 1
            && burst.held >= 1.0
        {
            if current_lent > MAX_BURST && !burst.alone && !plant::planted(Plant::RlqsNoTakeBack) {
                return keep(Self::for_rate(rate));
            }
            let assigned = current.rate().unwrap_or(0.0);
            if (rate.max(SLOWEST_RATE) - assigned).abs() <= HYSTERESIS * assigned {
                return keep(current);
            }
        }
        let plain = Self::next(current, rate);
        if Some(plain) == current || matches!(current, Some(Self::TokenBucket { .. })) {
            return keep(plain);
        }
        let lent = burst.pool.clamp(0.0, cap).floor();
        let rest = (rate - lent / horizon.as_secs_f64().max(0.001)).max(0.0);
        let steady = (rest * BURST.as_secs_f64()).ceil().max(1.0);
        if lent <= steady {
            return keep(plain);
        }
        // At most u32::MAX.
        let lent = lent as u32;
        Decision {
            strategy: Self::with_burst(rest, lent),
            lent,
        }
    }
}

#[cfg(test)]
mod tests;
