//! `PnCount`: one component of a PN-counter, a pair of grow-only counts (hits and refunds).
//!
//! Every layer keeps a window cell as a PN-counter: per component (a process at the regional
//! origin, a region in the global store) a G-Counter of hits and a G-Counter of refunds, each
//! merged with `max`, so every G-Counter invariant (monotonic, idempotent, commutative merges)
//! holds for each half. The cell's value is `hits − refunds`, never below zero.
//!
//! The refund rule that keeps a refund from letting more than the limit through: a component's
//! refunds never exceed that component's own hits ([`PnCount::capped`]); a process refunds
//! only what it consumed itself in that cell. Then every component's value is ≥ 0, and a
//! later hit always counts in full: refunds can give back consumed budget, never create any.

/// A component (or a sum of components) of a cell's PN-counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PnCount {
    pub hits: u64,
    pub refunds: u64,
}

impl PnCount {
    /// Only hits: a G-Counter component (what every layer held before refunds).
    pub const fn hits(hits: u64) -> Self {
        Self { hits, refunds: 0 }
    }

    pub const fn new(hits: u64, refunds: u64) -> Self {
        Self { hits, refunds }
    }

    /// `hits − refunds`, never below zero.
    pub const fn value(self) -> u64 {
        self.hits.saturating_sub(self.refunds)
    }

    /// The merge of two observations of one component: `max` of each half. Commutative,
    /// associative and idempotent, so a resend or an older value never moves it back.
    #[must_use]
    pub fn merge(self, other: Self) -> Self {
        Self {
            hits: self.hits.max(other.hits),
            refunds: self.refunds.max(other.refunds),
        }
    }

    /// The sum of two different components (processes of a region, regions), saturating.
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            hits: self.hits.saturating_add(other.hits),
            refunds: self.refunds.saturating_add(other.refunds),
        }
    }

    /// The refund rule for one component: refunds never above its own hits. Applied by the
    /// engine before publishing and again by every store on what it receives or reads (a
    /// hostile or corrupt value cannot make a component negative).
    #[must_use]
    pub fn capped(self) -> Self {
        Self {
            hits: self.hits,
            refunds: self.refunds.min(self.hits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<PnCount> {
        let mut out = Vec::new();
        for hits in [0, 1, 5, 9] {
            for refunds in [0, 1, 5, 12] {
                out.push(PnCount::new(hits, refunds));
            }
        }
        out
    }

    #[test]
    fn merge_is_commutative_associative_and_idempotent_on_both_halves() {
        let all = samples();
        for &a in &all {
            assert_eq!(a.merge(a), a, "idempotent");
            for &b in &all {
                assert_eq!(a.merge(b), b.merge(a), "commutative");
                let m = a.merge(b);
                assert!(
                    m.hits >= a.hits && m.refunds >= a.refunds,
                    "never backwards"
                );
                assert_eq!(m.merge(b), m, "merging an older value changes nothing");
                for &c in &all {
                    assert_eq!(a.merge(b).merge(c), a.merge(b.merge(c)), "associative");
                }
            }
        }
    }

    #[test]
    fn the_value_is_never_below_zero() {
        for a in samples() {
            assert_eq!(a.value(), a.hits.saturating_sub(a.refunds));
            assert!(a.capped().refunds <= a.capped().hits);
            assert_eq!(a.capped().hits, a.hits, "capping never touches hits");
        }
        assert_eq!(PnCount::new(3, 10).value(), 0);
        assert_eq!(
            PnCount::new(u64::MAX, 0).plus(PnCount::hits(1)).hits,
            u64::MAX
        );
    }

    #[test]
    fn a_later_hit_counts_in_full_once_refunds_are_capped() {
        // Over-refunded (corrupt) component: capping keeps the next hit visible.
        let c = PnCount::new(4, 9).capped();
        assert_eq!(c.value(), 0);
        let after_hit = PnCount::new(c.hits + 1, c.refunds);
        assert_eq!(after_hit.value(), 1);
    }
}
