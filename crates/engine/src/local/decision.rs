//! The window decision (docs/design.md): pure arithmetic, no state. Fixed windows are the
//! same arithmetic with no previous cell.

/// What one decision concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// `max(0, limit − effective)`, where `effective` includes this request's cost.
    pub remaining: u64,
    /// `effective` before this request's cost: the count the decision saw (what upstream
    /// calls the limit before increase, for its over- and near-limit stats).
    pub seen: u64,
}

/// Decide one request against the counts of the current and previous cells.
///
/// ```text
/// effective = current + floor(previous × (1 − elapsed_fraction)) + cost
/// deny if effective > limit          (reaching the limit exactly is allowed)
/// ```
///
/// The previous cell's weight is computed in integers (`previous × remaining_ms / duration_ms`)
/// so that the floor is exact: a float would round 10 × 0.01 to 0.0999… on one machine and 0.1
/// on another, and two processes must reach the same answer from the same counts.
pub fn decide(
    current: u64,
    previous: u64,
    elapsed_ms: u64,
    duration_ms: u64,
    cost: u64,
    limit: u64,
) -> Decision {
    let duration_ms = duration_ms.max(1);
    let weight_ms = duration_ms.saturating_sub(elapsed_ms);
    // In 64 bits when the product fits (always, for real limits): a 128-bit division is a
    // call into compiler-builtins, a visible share of a warm decision. Same result.
    let weighted_previous = match previous.checked_mul(weight_ms) {
        Some(product) => product / duration_ms,
        None => (u128::from(previous) * u128::from(weight_ms) / u128::from(duration_ms))
            .min(u128::from(u64::MAX)) as u64,
    };
    let seen = current.saturating_add(weighted_previous);
    let effective = seen.saturating_add(cost);
    Decision {
        allowed: effective <= limit,
        remaining: limit.saturating_sub(effective),
        seen,
    }
}

/// The counts a sliding-window decision reads, and where in the current cell it stands:
/// what [`until_pass_ms`](super::until_pass_ms) takes (the counts as [`decide`] saw them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCounts {
    pub current: u64,
    pub previous: u64,
    pub elapsed_ms: u64,
    pub duration_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (cur, prev, elapsed fraction in ‰ of a 1 s window, cost, limit) → (allowed, remaining)
    /// (cur, prev, elapsed ‰, cost, limit, allowed, remaining)
    type Case = (u64, u64, u64, u64, u64, bool, u64);

    #[test]
    fn the_previous_cells_share_is_the_exact_128_bit_share_on_both_sides_of_overflow() {
        let duration = 60_000u64;
        let previous_counts = [
            0,
            7,
            1_000_003,
            u64::MAX / duration,
            u64::MAX / duration + 1,
            1 << 40,
            u64::MAX / 3,
            u64::MAX,
        ];
        for previous in previous_counts {
            for elapsed in [0, 1, 29_999, 59_999] {
                let weight = duration - elapsed;
                let exact = (u128::from(previous) * u128::from(weight) / u128::from(duration))
                    .min(u128::from(u64::MAX)) as u64;
                // With no current count and no cost, `remaining` is the limit minus the share.
                let d = decide(0, previous, elapsed, duration, 0, u64::MAX);
                assert_eq!(d.remaining, u64::MAX - exact, "{previous} at {elapsed} ms");
            }
        }
    }

    #[test]
    fn sliding_window_table() {
        let cases: &[Case] = &[
            (0, 0, 0, 1, 10, true, 9),
            (9, 0, 0, 1, 10, true, 0),
            (10, 0, 0, 0, 10, true, 0),
            (10, 0, 0, 1, 10, false, 0),
            (5, 10, 500, 1, 10, false, 0),
            (5, 10, 990, 1, 10, true, 4),
            (0, 0, 0, 100, 10, false, 0),
            // a limit of 0 is always over, except for a peek
            (0, 0, 0, 1, 0, false, 0),
            // the previous cell slides out linearly
            (0, 10, 250, 1, 10, true, 2),
            (0, 10, 0, 1, 10, false, 0),
            // huge counts saturate instead of wrapping
            (
                u64::MAX,
                u64::MAX,
                0,
                u64::MAX,
                u64::from(u32::MAX),
                false,
                0,
            ),
        ];
        for &(cur, prev, elapsed, cost, limit, allowed, remaining) in cases {
            let d = decide(cur, prev, elapsed, 1_000, cost, limit);
            assert_eq!(
                d.allowed, allowed,
                "cur={cur} prev={prev} elapsed={elapsed}‰ cost={cost} limit={limit}"
            );
            assert_eq!(
                d.remaining, remaining,
                "remaining for cur={cur} prev={prev}"
            );
        }
    }
}
