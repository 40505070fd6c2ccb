//! The quota board: every bucket that open streams report, grouped by the counter it counts
//! on, with each Envoy's demand, so that a counter's rate is split between all the Envoys of
//! this process that share it (several buckets can share a counter: `share_threshold`).
//!
//! Lock order: the board's map, then a group's state; nothing is awaited under either.
//!
//! A group has at most `--rlqs-max-group-members` members; a bucket past it is counted and
//! not assigned, as past the bucket caps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use gcounter_engine::Engine;
use gcounter_engine::cell_key::CounterKey;
use gcounter_engine::local::WindowPosition;
use gcounter_engine::plant::{self, Plant};

use super::bucket::BucketCounter;
use super::memory::{BucketBytes, Charge};
use super::share::{Burst, Decision, Level, convergence, counter_rate};

/// A split younger than this is reused: every stream of a group asks for its share on each
/// report and tick, and one computation serves them all.
const SPLIT_REUSE: Duration = Duration::from_millis(200);
/// A group's split is computed again sooner once its members made this fraction of its
/// size in changes (reports, joins, leaves): a small group's shares follow every report, a
/// large one's cost O(log n) a change, amortized, not O(n) (a report of k usages on a group
/// of n members cost O(k × n) when every usage computed the split again).
const CHANGES_PER_SPLIT: usize = 16;
/// Each new demand sample weighs this much against the history: a shift of demand between
/// Envoys shows in their shares at the next report and is mostly done at the second.
const DEMAND_WEIGHT: f64 = 0.8;
/// Until a member's second report shows how often they come: Envoy 1.40's interval.
const FIRST_REPORT_INTERVAL: Duration = Duration::from_secs(5);
/// The rate of the counter's other traffic is measured over at least this long.
const MIN_SAMPLE: Duration = Duration::from_millis(200);
/// Other traffic on a counter slower than this (one hit a minute) leaves its bucket alone.
const QUIET: f64 = 1.0 / 60.0;
/// What a group holds beside its counters' strings: the board's entry, the group, its state
/// and one track.
const GROUP_OVERHEAD: usize = 640;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every group, by its first counter.
#[derive(Debug)]
pub struct QuotaBoard {
    groups: Mutex<HashMap<CounterKey, Arc<Group>>>,
    next_member: AtomicU64,
    /// Members one group may have (`--rlqs-max-group-members`).
    max_members: usize,
    /// Where groups charge their bytes (the buckets' budget).
    memory: Arc<BucketBytes>,
    /// No other process counts on these counters ([`super::QuotaSettings::sole_process`]).
    sole_process: bool,
}

/// The Envoys (streams and buckets) counting on one counter.
#[derive(Debug)]
pub struct Group {
    counters: Arc<[BucketCounter]>,
    state: Mutex<GroupState>,
    _charge: Charge,
}

#[derive(Debug, Default)]
struct GroupState {
    /// Each member's stream and demand (hits per second), by member.
    demands: HashMap<u64, (u64, f64)>,
    tracks: Vec<Track>,
    /// The last split; `None` until the first share is asked for.
    split: Option<Split>,
    /// Reports, joins and leaves since the split was computed.
    changes: usize,
    /// The members' time between reports, smoothed; `None` until a second report.
    report_interval: Option<Duration>,
    /// What each member's Envoy may still hold of the bursts lent to it (requests), by
    /// member: lent room that no report has shown yet.
    held: HashMap<u64, f64>,
    /// The sum of `held`.
    held_total: f64,
    /// What each member of a `never_above` counter has taken ahead for its Envoy and no
    /// report has shown yet (`rlqs::reservation`), by member.
    taken: HashMap<u64, u64>,
    /// The sum of `taken`: counted on the counters, yet the members' to share.
    taken_total: u64,
}

/// How the group's rate was last shared, and when.
#[derive(Debug, Clone, Copy)]
struct Split {
    at: Instant,
    level: Level,
    /// The counter is in a penalty box (an RLS v3 denial started it).
    penalized: bool,
    /// The room no Envoy holds as a burst (the tightest counter's).
    pool: f64,
    /// One member and no other traffic on the counters: see [`Burst::alone`].
    alone: bool,
}

/// What the counter's other traffic (not this process's RLQS reports) adds per second.
#[derive(Debug, Default, Clone, Copy)]
struct Track {
    sequence: u64,
    total: u64,
    at: Option<Instant>,
    /// Reported hits of this group counted on the current cell since `at`.
    ours: u64,
    others_rate: f64,
}

/// One bucket of one stream on the board; leaves it when dropped.
#[derive(Debug)]
pub struct Member {
    board: Arc<QuotaBoard>,
    group: Arc<Group>,
    id: u64,
}

/// One member's share of its counter, and what it was made from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Hits per second this member may admit.
    pub rate: f64,
    /// The counter is in a penalty box (an RLS v3 denial started it).
    pub penalized: bool,
    /// The room this member may take at once.
    pub burst: Burst,
    /// Over how long the group's room is handed out.
    pub horizon: Duration,
    /// The member's demand, hits per second (allowed and denied, averaged over reports).
    pub demand: f64,
}

/// Why a bucket did not join its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRefused {
    /// The group has `--rlqs-max-group-members` members.
    GroupFull,
    /// No counter to group by.
    NoCounter,
}

impl QuotaBoard {
    pub fn new(max_members: usize, sole_process: bool, memory: Arc<BucketBytes>) -> Self {
        Self {
            groups: Mutex::new(HashMap::new()),
            next_member: AtomicU64::new(1),
            max_members,
            memory,
            sole_process,
        }
    }

    /// Adds a member for a bucket of stream `stream` counting on `counters`; the member's
    /// group holds the counters once (`Member::counters`).
    pub fn join(
        self: &Arc<Self>,
        counters: &Arc<[BucketCounter]>,
        stream: u64,
    ) -> Result<Member, JoinRefused> {
        let first = counters.first().ok_or(JoinRefused::NoCounter)?;
        let id = self.next_member.fetch_add(1, Ordering::Relaxed);
        let mut groups = lock(&self.groups);
        let group = groups
            .entry(first.counter.clone())
            .or_insert_with(|| {
                let bytes = GROUP_OVERHEAD
                    + counters
                        .iter()
                        .map(|c| c.counter.heap_bytes() + size_of::<BucketCounter>())
                        .sum::<usize>();
                Arc::new(Group {
                    counters: Arc::clone(counters),
                    state: Mutex::new(GroupState {
                        tracks: vec![Track::default(); counters.len()],
                        ..GroupState::default()
                    }),
                    _charge: self.memory.charge(bytes),
                })
            })
            .clone();
        let mut state = lock(&group.state);
        if state.demands.len() >= self.max_members {
            return Err(JoinRefused::GroupFull);
        }
        state.demands.insert(id, (stream, 0.0));
        state.changes += 1;
        drop(state);
        Ok(Member {
            board: Arc::clone(self),
            group,
            id,
        })
    }
}

impl crate::admin::QuotaShares for QuotaBoard {
    /// Every member of the group counting on `counter`, with its demand and last share, by
    /// stream.
    fn shares(&self, counter: &CounterKey) -> Vec<crate::admin::EnvoyShare> {
        let Some(group) = lock(&self.groups).get(counter).cloned() else {
            return Vec::new();
        };
        let state = lock(&group.state);
        let mut shares: Vec<crate::admin::EnvoyShare> = state
            .demands
            .values()
            .map(|(stream, demand)| crate::admin::EnvoyShare {
                stream: *stream,
                demand: *demand,
                share: state.split.map_or(0.0, |split| split.level.share(*demand)),
            })
            .collect();
        shares.sort_by_key(|share| share.stream);
        shares
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut groups = lock(&self.board.groups);
        let empty = {
            let mut state = lock(&self.group.state);
            state.demands.remove(&self.id);
            state.release(self.id);
            state.changes += 1;
            state.demands.is_empty()
        };
        if empty
            && let Some(first) = self.group.counters.first()
            && groups
                .get(&first.counter)
                .is_some_and(|group| Arc::ptr_eq(group, &self.group))
        {
            groups.remove(&first.counter);
        }
    }
}

impl Member {
    /// The counters of the member's group.
    pub fn counters(&self) -> &Arc<[BucketCounter]> {
        &self.group.counters
    }

    /// A report: `demand` hits per second wanted (allowed and denied), `counted` hits of it
    /// counted on each counter's current cell (in counter order), `interval` since the
    /// member's previous report (`None` for its first). Constant time: the split is not
    /// computed here.
    ///
    /// `allowed` requests of the report were admitted by the Envoy, which now holds at most
    /// `in_bucket` of its burst (the burst its current token bucket was lent): what it was
    /// lent and has not shown is still held.
    pub fn report(
        &self,
        demand: f64,
        counted: &[u64],
        interval: Option<Duration>,
        allowed: u64,
        in_bucket: u32,
    ) {
        let mut state = lock(&self.group.state);
        let held = state.held.get(&self.id).copied().unwrap_or(0.0);
        let left = (held - allowed as f64).max(0.0).min(f64::from(in_bucket));
        state.set_held(self.id, left);
        if let Some(interval) = interval {
            state.report_interval = Some(match state.report_interval {
                Some(old) => old.mul_f64(0.5) + interval.mul_f64(0.5),
                None => interval,
            });
        }
        if let Some((_, old)) = state.demands.get_mut(&self.id) {
            *old = if *old == 0.0 {
                demand
            } else {
                DEMAND_WEIGHT * demand + (1.0 - DEMAND_WEIGHT) * *old
            };
        }
        for (track, counted) in state.tracks.iter_mut().zip(counted) {
            track.ours = track.ours.saturating_add(*counted);
        }
        state.changes += 1;
    }

    /// `taken` hits this member's Envoy may admit were counted ahead on each of the group's
    /// counters (a `never_above` bucket's take), of which `outstanding` no report has shown
    /// yet. The counters' growth by a take is this group's own, not other traffic; what is
    /// outstanding is room the members hold, shared among them as if it were free, so that a
    /// take does not shrink the share it was made for.
    pub fn took(&self, taken: u64, outstanding: u64) {
        let mut state = lock(&self.group.state);
        for track in &mut state.tracks {
            track.ours = track.ours.saturating_add(taken);
        }
        state.set_taken(self.id, outstanding);
    }

    /// This member's share now: its demand against the group's split, which is computed
    /// again when it is old or enough changed since (see [`CHANGES_PER_SPLIT`]).
    #[cfg(test)]
    pub fn share(&self, engine: &Engine, now: Instant) -> Share {
        let mut state = lock(&self.group.state);
        self.share_locked(&mut state, engine, now)
    }

    /// The strategy `decide` makes of this member's share, and what it lends charged against
    /// the group's room under the same lock, so two Envoys joining at once cannot both be
    /// lent the same room. Charged in full even if the Envoy still held an earlier burst: it
    /// may have spent that just before the new token bucket started full.
    pub fn decide(
        &self,
        engine: &Engine,
        now: Instant,
        decide: impl FnOnce(&Share) -> Decision,
    ) -> Decision {
        let mut state = lock(&self.group.state);
        let share = self.share_locked(&mut state, engine, now);
        let decision = decide(&share);
        if decision.lent > 0 && !plant::planted(Plant::RlqsLendUncharged) {
            let lent = f64::from(decision.lent);
            let held = state.held.get(&self.id).copied().unwrap_or(0.0);
            state.set_held(self.id, held + lent);
            // What is lent leaves the pool and the rates at once; the split is not computed
            // again for it (O(n log n) a lend in a large group).
            let members = state.demands.len();
            let less = lent / share.horizon.as_secs_f64().max(0.001);
            state.split = state.split.and_then(|split| {
                Some(Split {
                    level: split.level.lessen(less, members)?,
                    pool: (split.pool - lent).max(0.0),
                    ..split
                })
            });
        }
        decision
    }

    fn share_locked(&self, state: &mut GroupState, engine: &Engine, now: Instant) -> Share {
        let members = state.demands.len();
        let current = state.split.filter(|split| {
            now.saturating_duration_since(split.at) < SPLIT_REUSE
                && state.changes.saturating_mul(CHANGES_PER_SPLIT) < members.max(1)
        });
        let split = match current {
            Some(split) => split,
            None => {
                let split =
                    state.compute_split(&self.group.counters, engine, now, self.board.sole_process);
                state.split = Some(split);
                state.changes = 0;
                split
            }
        };
        let demand = state.demands.get(&self.id).map_or(0.0, |(_, d)| *d);
        Share {
            rate: if split.penalized {
                0.0
            } else {
                split.level.share(demand)
            },
            penalized: split.penalized,
            burst: Burst {
                pool: split.pool,
                held: state.held.get(&self.id).copied().unwrap_or(0.0),
                alone: split.alone,
            },
            horizon: state.horizon(),
            demand,
        }
    }
}

impl GroupState {
    /// The counters' rate now and its split between the members' demands: O(n log n).
    /// `sole_process`: no other process counts on the counters, so a lone member here is
    /// alone in the fleet.
    fn compute_split(
        &mut self,
        counters: &[BucketCounter],
        engine: &Engine,
        now: Instant,
        sole_process: bool,
    ) -> Split {
        let mut penalized = false;
        let mut others = false;
        let mut rate = f64::INFINITY;
        let mut room = f64::INFINITY;
        let horizon = self.horizon();
        for (track, counter) in self.tracks.iter_mut().zip(counters) {
            let counter_state = engine.inspection().inspect(&counter.counter.borrowed());
            penalized |= counter_state
                .penalty_until_ms
                .is_some_and(|until| until > counter_state.now_ms);
            track.observe(&counter_state, now);
            others |= track.others_rate >= QUIET;
            // What the members took ahead is theirs to share again.
            let taken = self.taken_total as f64;
            let free = counter_rate(counter.limit, &counter_state, horizon)
                + taken / horizon.as_secs_f64().max(0.001)
                - track.others_rate;
            rate = rate.min(free.max(0.0));
            room = room.min(counter.limit as f64 - counter_state.effective() as f64 + taken);
        }
        // What the Envoys hold as bursts is room handed out already.
        let rate = (rate - self.held_total / horizon.as_secs_f64()).max(0.0);
        Split {
            at: now,
            level: Level::of(rate, self.demands.values().map(|(_, demand)| *demand)),
            penalized,
            pool: (room - self.held_total).max(0.0),
            alone: sole_process && self.demands.len() == 1 && !others,
        }
    }

    /// Over how long the room is handed out, for the members' reporting interval.
    fn horizon(&self) -> Duration {
        convergence(self.report_interval.unwrap_or(FIRST_REPORT_INTERVAL))
    }

    /// `member` now holds `held` requests of bursts.
    fn set_held(&mut self, member: u64, held: f64) {
        let old = if held > 0.0 {
            self.held.insert(member, held)
        } else {
            self.held.remove(&member)
        };
        self.held_total = (self.held_total - old.unwrap_or(0.0) + held).max(0.0);
        if self.held.is_empty() {
            // No drift from sums of floats once nothing is held.
            self.held_total = 0.0;
        }
    }

    /// `member` has `outstanding` taken ahead (see [`Member::took`]).
    fn set_taken(&mut self, member: u64, outstanding: u64) {
        let old = if outstanding > 0 {
            self.taken.insert(member, outstanding)
        } else {
            self.taken.remove(&member)
        };
        self.taken_total = (self.taken_total - old.unwrap_or(0)).saturating_add(outstanding);
    }

    /// `member` left: what it held is no one's, and the others' shares grow by it.
    fn release(&mut self, member: u64) {
        // What it took stays counted until its cells end; no member holds it.
        self.set_taken(member, 0);
        if self.held.contains_key(&member) {
            self.set_held(member, 0.0);
            self.split = None;
        }
    }
}

impl Track {
    /// Takes a new look at the counter's current cell: what grew beyond this group's own
    /// reports is the other traffic's.
    fn observe(&mut self, state: &gcounter_engine::CounterState, now: Instant) {
        let sequence = WindowPosition::at(state.now_ms, state.duration_ms).sequence;
        let total = state.current.map_or(0, |cell| cell.total());
        match self.at {
            Some(at) if self.sequence == sequence => {
                let elapsed = now.saturating_duration_since(at);
                if elapsed < MIN_SAMPLE {
                    return;
                }
                let others = total.saturating_sub(self.total).saturating_sub(self.ours);
                let sample = others as f64 / elapsed.as_secs_f64();
                self.others_rate = 0.5 * self.others_rate + 0.5 * sample;
            }
            // A new window: its first look only sets the baseline.
            _ => self.sequence = sequence,
        }
        self.total = total;
        self.ours = 0;
        self.at = Some(now);
    }
}

#[cfg(test)]
mod tests;
