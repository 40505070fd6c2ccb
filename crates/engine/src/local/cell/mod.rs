//! One counter cell: the counts of a fixed window of one limit.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use super::decision::{Decision, decide};
use crate::pn::PnCount;

mod departure;
mod replay_state;
mod sealed;

use replay_state::ReplayState;

use sealed::PRIOR_NONE;
pub use sealed::SealedChanges;

/// The counts of one cell, shared by the hot path and the background tasks through atomics.
///
/// Every count is one half of a PN-counter ([`PnCount`]): hits and refunds, each a G-Counter
/// that only grows inside the cell and merges with `max`; the value is `hits − refunds`,
/// never below zero. `regional` holds this region's count: local accepts add to its hits with
/// compare-and-swap, local refunds to its refunds, and totals read back from the regional
/// origin are merged into each half with `max`, so a late merge never subtracts accepted work
/// nor undoes a refund. `global` holds the other regions' sum, merged with `max` per half by
/// the global sync; own and foreign stay separate so a region never counts its own traffic
/// twice.
#[derive(Debug)]
pub struct WindowCell {
    regional: PnAtomic,
    global: PnAtomic,
    /// The previous window's total as a decision in this (current) cell's window last saw it,
    /// with the [`SealedChanges`] count it is valid for ([`WindowCell::remember_previous`]):
    /// while no sealed cell changed since, a decision reads it here instead of looking the
    /// previous cell up (one table lookup per decision instead of two). [`PRIOR_NONE`]: none.
    prior: AtomicU64,
    /// Everything this process accepted in the cell (its component's hits at the origin).
    /// Replay publishes this cumulative value, so a resend is harmless.
    own: AtomicU64,
    /// Everything this process refunded in the cell, never above `own` (the refund rule).
    own_refunds: AtomicU64,
    /// Until when (ms since the epoch) `regional` may be trusted without reading the origin.
    /// 0 = stale. Only a successful read or replay moves it forward.
    fresh_until_ms: AtomicU64,
    /// Where the cell's accepted work stands with the replay queue ([`ReplayState`]): queued
    /// once per cycle, not per request; or overflowed, waiting to be recovered.
    replay: AtomicU8,
    /// [`PROTECTED`], [`HELD`], [`REFRESHING`], `LEFT` and `UNSEEDED` (module `departure`),
    /// in one byte so the cell stays 80 bytes.
    marks: AtomicU8,
    /// Denials since the global counters last took them ([`WindowCell::take_denied`]),
    /// saturating: counted only on cells another region also counts, for the per-cell
    /// overload of the fast cadence.
    denied: AtomicU8,
    /// A later window's cell remembers this cell's total ([`WindowCell::remember_previous`]):
    /// every change of its count from then on is counted in [`SealedChanges`], which makes
    /// every remembered total stale. Set once, never cleared.
    sealed: AtomicBool,
    /// The limit of the most recent decision (limits are `u32`; larger ones saturate): the
    /// global flush publishes a cell only once its count reaches a fraction of it (counts far
    /// below a limit matter to no other region). 32 bits, beside the flags: the cell stays
    /// within one allocator size class more.
    limit: AtomicU32,
    /// `hits + refunds` of the regional count last written to the global counters
    /// successfully. Both halves only grow, so the sum grows whenever either does: one word
    /// tells "changed since" for both.
    published: AtomicU64,
}

/// Both halves of a PN-counter in atomics, merged with `max` per half.
#[derive(Debug, Default)]
struct PnAtomic {
    hits: AtomicU64,
    refunds: AtomicU64,
}

impl PnAtomic {
    fn new(count: PnCount) -> Self {
        Self {
            hits: AtomicU64::new(count.hits),
            refunds: AtomicU64::new(count.refunds),
        }
    }

    fn load(&self, order: Ordering) -> PnCount {
        PnCount::new(self.hits.load(order), self.refunds.load(order))
    }

    /// `max` per half (sequentially consistent: see [`SealedChanges`]); whether either grew.
    fn merge(&self, total: PnCount) -> bool {
        let hits = self.hits.fetch_max(total.hits, Ordering::SeqCst);
        let refunds = self.refunds.fetch_max(total.refunds, Ordering::SeqCst);
        hits < total.hits || refunds < total.refunds
    }
}

/// What `published` remembers of a count: `hits + refunds`, which grows whenever either half
/// does (both only grow), so comparing it tells whether anything changed.
fn published_mark(count: PnCount) -> u64 {
    count.hits.saturating_add(count.refunds)
}

/// A cell as the table, the replay queue and the global flush share it. `triomphe`'s `Arc`
/// has no weak count: with it the cell's allocation (88 B) stays in the 96 B size class that
/// std's `Arc` (two counts) filled before the cell remembered its previous total.
pub type SharedCell = triomphe::Arc<WindowCell>;

/// What an accept asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayNeed {
    /// Nothing consumed, or the cell is already queued.
    None,
    /// Consumed work waits in the cell: put the cell in the replay queue.
    Enqueue,
}

/// A bit of [`WindowCell::marks`]: taken out of eviction (see `table::Protection`): at or
/// near its limit, or holding work the replay queue had no room for. Set once, by the table,
/// and never cleared: the cell leaves memory only when the reaper drops it at the end of its
/// window.
const PROTECTED: u8 = 1;
/// A bit of [`WindowCell::marks`]: queued for, or held at, the global counters' fast cadence
/// of contended cells since its last fast tick (`OnsetWatch::note_contended`).
const HELD: u8 = 2;
/// A bit of [`WindowCell::marks`]: a synchronous origin read of this cell is in flight
/// (single flight).
const REFRESHING: u8 = 4;

impl Default for WindowCell {
    fn default() -> Self {
        Self {
            regional: PnAtomic::default(),
            global: PnAtomic::default(),
            prior: AtomicU64::new(PRIOR_NONE),
            own: AtomicU64::new(0),
            own_refunds: AtomicU64::new(0),
            fresh_until_ms: AtomicU64::new(0),
            replay: AtomicU8::new(ReplayState::Idle as u8),
            marks: AtomicU8::new(0),
            denied: AtomicU8::new(0),
            sealed: AtomicBool::new(false),
            limit: AtomicU32::new(0),
            published: AtomicU64::new(0),
        }
    }
}

impl WindowCell {
    /// A cell seeded from the origin: the region's total and this process's component.
    pub fn seeded(regional: PnCount, own: PnCount) -> Self {
        let own = own.capped();
        Self {
            regional: PnAtomic::new(PnCount::new(
                regional.hits.max(own.hits),
                regional.refunds.max(own.refunds),
            )),
            own: AtomicU64::new(own.hits),
            own_refunds: AtomicU64::new(own.refunds),
            ..Self::default()
        }
    }

    /// `regional + global` (each `hits − refunds`): the count a decision sees for this cell.
    pub fn total(&self) -> u64 {
        self.regional_count()
            .value()
            .saturating_add(self.global_count().value())
    }

    /// This region's hits (the hits half of `regional`).
    pub fn regional(&self) -> u64 {
        self.regional.hits.load(Ordering::Acquire)
    }

    /// This region's count, both halves.
    pub fn regional_count(&self) -> PnCount {
        self.regional.load(Ordering::Acquire)
    }

    /// The other regions' hits (the hits half of `global`).
    pub fn global(&self) -> u64 {
        self.global.hits.load(Ordering::Acquire)
    }

    /// The other regions' count, both halves.
    pub fn global_count(&self) -> PnCount {
        self.global.load(Ordering::Acquire)
    }

    /// Decide and, when allowed with a cost, consume `cost` atomically.
    ///
    /// The compare-and-swap makes the check and the increment one step: concurrent requests
    /// on one cell never admit more than the limit. Peeks consume nothing; denials consume
    /// nothing unless `count_denied` (upstream's counter grows on every request), and then
    /// never turn an accept into a denial of a request that raced them: they add after the
    /// decision, as the accept's CAS does.
    #[allow(
        clippy::too_many_arguments,
        reason = "the hot path: no struct built per decision"
    )]
    pub fn try_consume(
        &self,
        previous_total: u64,
        elapsed_ms: u64,
        duration_ms: u64,
        cost: u64,
        limit: u64,
        count_denied: bool,
        changes: &SealedChanges,
    ) -> (Decision, ReplayNeed) {
        // Written only when it changes, so a hot cell's cache line is not dirtied per request.
        let limit32 = u32::try_from(limit).unwrap_or(u32::MAX);
        if self.limit.load(Ordering::Relaxed) != limit32 {
            self.limit.store(limit32, Ordering::Relaxed);
        }
        let global = self.global_count().value();
        let mut regional = self.regional.hits.load(Ordering::Acquire);
        loop {
            // Refunds read inside the loop: one racing with this accept only makes it stricter.
            let refunds = self.regional.refunds.load(Ordering::Acquire);
            let current = regional.saturating_sub(refunds).saturating_add(global);
            let decision = decide(
                current,
                previous_total,
                elapsed_ms,
                duration_ms,
                cost,
                limit,
            );
            if cost == 0 {
                return (decision, ReplayNeed::None);
            }
            if !decision.allowed {
                if !count_denied {
                    return (decision, ReplayNeed::None);
                }
                return (decision, self.add_admitted(cost, changes));
            }
            // Sequentially consistent: see `SealedChanges` (on x86 a locked CAS costs the
            // same either way).
            match self.regional.hits.compare_exchange_weak(
                regional,
                regional.saturating_add(cost),
                Ordering::SeqCst,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.own.fetch_add(cost, Ordering::SeqCst);
                    // An accept delayed across the window's end, into a cell a later window
                    // already remembers.
                    self.after_change(changes);
                    return (decision, self.claim_queue_slot());
                }
                Err(actual) => regional = actual,
            }
        }
    }

    /// Add `count` hits that were admitted elsewhere (an Envoy deciding from its own quota
    /// assignment reports them afterwards), whatever the limit says: they happened, so the
    /// sliding window must see them. Returns whether the caller must queue the cell for replay.
    pub fn add_admitted(&self, count: u64, changes: &SealedChanges) -> ReplayNeed {
        if count == 0 {
            return ReplayNeed::None;
        }
        let add = |n: u64| Some(n.saturating_add(count));
        // Both closures return `Some`: the updates cannot fail.
        let _ = self
            .regional
            .hits
            .fetch_update(Ordering::SeqCst, Ordering::Acquire, add);
        let _ = self
            .own
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, add);
        self.after_change(changes);
        self.claim_queue_slot()
    }

    /// Give back up to `amount` of what this process consumed in the cell (the refund rule:
    /// never more than its own hits minus its own refunds so far). Returns what was refunded
    /// and whether the caller must queue the cell for replay.
    ///
    /// Both halves only grow: the refund adds to `own_refunds` and to `regional`'s refunds, so the
    /// replay of a refund is as idempotent as the replay of a hit.
    pub fn refund(&self, amount: u64, changes: &SealedChanges) -> (u64, ReplayNeed) {
        let mut refunded = self.own_refunds.load(Ordering::Acquire);
        let given = loop {
            let headroom = self.own.load(Ordering::Acquire).saturating_sub(refunded);
            let give = amount.min(headroom);
            if give == 0 {
                return (0, ReplayNeed::None);
            }
            match self.own_refunds.compare_exchange_weak(
                refunded,
                refunded + give,
                Ordering::SeqCst,
                Ordering::Acquire,
            ) {
                Ok(_) => break give,
                Err(actual) => refunded = actual,
            }
        };
        self.regional.refunds.fetch_add(given, Ordering::SeqCst);
        self.after_change(changes);
        (given, self.claim_queue_slot())
    }

    /// Whether forgetting this cell would cost more than forgetting an idle one: its count is
    /// at or near its limit (forgetting it would let the same client through again in the
    /// same window), or it holds accepted work no replay carries.
    pub fn deserves_protection(&self) -> bool {
        let limit = u64::from(self.limit.load(Ordering::Relaxed));
        let near = limit.saturating_sub(limit / 4);
        (limit > 0 && self.total() >= near) || self.is_overflowed()
    }

    /// Take the cell out of eviction for the rest of its life (see `table::Protection`).
    pub fn protect(&self) {
        self.marks.fetch_or(PROTECTED, Ordering::Release);
    }

    pub fn is_protected(&self) -> bool {
        self.marks.load(Ordering::Acquire) & PROTECTED != 0
    }

    /// Mark the cell as handed to the fast cadence of contended cells; true only for the
    /// call that marked it, so a cell is queued once however many decisions race on it.
    pub fn hold(&self) -> bool {
        self.marks.load(Ordering::Relaxed) & HELD == 0
            && self.marks.fetch_or(HELD, Ordering::AcqRel) & HELD == 0
    }

    /// The limit of the most recent decision (saturated at `u32::MAX`; 0 before any).
    pub fn limit(&self) -> u64 {
        u64::from(self.limit.load(Ordering::Relaxed))
    }

    /// Count a denial (saturating, about 240 until taken: a margin below `u8::MAX` for
    /// the adds that race past the check).
    pub fn note_denied(&self) {
        if self.denied.load(Ordering::Relaxed) < 240 {
            self.denied.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The denials counted since the last call.
    pub fn take_denied(&self) -> u64 {
        u64::from(self.denied.swap(0, Ordering::Relaxed))
    }

    /// Let the next decision that contends on the cell queue it again.
    pub fn release_hold(&self) {
        self.marks.fetch_and(!HELD, Ordering::AcqRel);
    }

    /// Merge a regional total read from the origin: `max` per half, never backwards.
    pub fn merge_regional(&self, total: PnCount, changes: &SealedChanges) {
        if self.regional.merge(total) {
            self.after_change(changes);
        }
    }

    /// Merge this process's component as the origin holds it (after a re-read).
    pub fn merge_own(&self, own: PnCount, changes: &SealedChanges) {
        let own = own.capped();
        self.own.fetch_max(own.hits, Ordering::AcqRel);
        self.own_refunds.fetch_max(own.refunds, Ordering::AcqRel);
        self.merge_regional(own, changes);
    }

    /// This process's hits in the cell.
    pub fn own(&self) -> u64 {
        self.own.load(Ordering::Acquire)
    }

    /// This process's component, both halves.
    pub fn own_count(&self) -> PnCount {
        PnCount::new(self.own(), self.own_refunds.load(Ordering::Acquire))
    }

    /// Merge the other regions' sum: `max` per half, never backwards.
    pub fn merge_global(&self, total: PnCount, changes: &SealedChanges) {
        if self.global.merge(total) {
            self.after_change(changes);
        }
    }

    /// The regional count to publish to the global counters, if its hits are at or above
    /// `floor × limit` and either half changed since the last successful publication.
    pub fn to_publish(&self, floor: f64) -> Option<PnCount> {
        let regional = self.regional_count();
        let changed = published_mark(regional) > self.published.load(Ordering::Acquire);
        (self.reaches(regional, floor) && changed).then_some(regional)
    }

    /// Whether the region's hits reach `floor × limit`: the cell is one the global counters
    /// hold a row of.
    pub fn at_floor(&self, floor: f64) -> bool {
        self.reaches(self.regional_count(), floor)
    }

    fn reaches(&self, regional: PnCount, floor: f64) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        let threshold = (f64::from(limit) * floor).ceil() as u64;
        regional.hits > 0 && regional.hits >= threshold
    }

    /// `hits + refunds` of the regional count not yet written to the global counters.
    pub fn unpublished(&self) -> u64 {
        published_mark(self.regional_count()).saturating_sub(self.published.load(Ordering::Acquire))
    }

    /// Record a successful publication (never moves back).
    pub fn mark_published(&self, count: PnCount) {
        self.published
            .fetch_max(published_mark(count), Ordering::AcqRel);
    }

    pub fn is_stale(&self, now_ms: u64) -> bool {
        now_ms >= self.fresh_until_ms.load(Ordering::Acquire)
    }

    /// Called after a successful read or replay only: a failure never makes a cell fresh.
    pub fn mark_fresh_until(&self, until_ms: u64) {
        self.fresh_until_ms.fetch_max(until_ms, Ordering::AcqRel);
    }

    /// Claim the right to read this cell from the origin; `false` if a read is in flight.
    pub fn begin_refresh(&self) -> bool {
        self.marks.fetch_or(REFRESHING, Ordering::AcqRel) & REFRESHING == 0
    }

    pub fn end_refresh(&self) {
        self.marks.fetch_and(!REFRESHING, Ordering::Release);
    }

    pub fn is_refreshing(&self) -> bool {
        self.marks.load(Ordering::Acquire) & REFRESHING != 0
    }
}

#[cfg(test)]
mod tests;
