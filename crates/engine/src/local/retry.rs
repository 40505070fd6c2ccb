//! When a denied request would pass: the exact `Retry-After` of the sliding window.
//!
//! The end of the current cell is not it: at the rollover the current count becomes the
//! previous cell's, still weighted almost fully, and the request may be denied for most of
//! the next cell too. Assuming no further hits, the decision of [`decide`](super::decide)
//! changes only through the previous cell's weight, which falls linearly, so the first
//! moment it passes has a closed form.

use super::decision::WindowCounts;

/// Milliseconds from the decision's moment until a request of `cost` passes, assuming no
/// more hits; `None` when it never does (`cost > limit`: no window can hold it).
///
/// With `w = duration − elapsed` (the previous cell's weight in ms, `1..=duration`), the
/// decision passes when `current + floor(previous × w / duration) + cost ≤ limit`. For a
/// budget `b = limit − cost − current ≥ 0`, `floor(previous × w / duration) ≤ b` holds
/// exactly when `previous × w < (b + 1) × duration`, i.e. `w ≤ ceil((b + 1) × duration /
/// previous) − 1`. Inside the current cell the request passes from `elapsed = duration −
/// w_max`; otherwise in the next cell, where the current count has become the previous
/// (`current' = 0`, `previous' = current`), by the same formula; at the latest at the start
/// of the cell after (both counts out of the window).
pub fn until_pass_ms(counts: WindowCounts, cost: u64, limit: u64) -> Option<u64> {
    let WindowCounts {
        current,
        previous,
        elapsed_ms,
        duration_ms,
    } = counts;
    let duration_ms = duration_ms.max(1);
    let elapsed_ms = elapsed_ms.min(duration_ms - 1);
    let budget = limit.checked_sub(cost)?;
    // In the current cell, if the current count leaves room at all.
    if let Some(room) = budget.checked_sub(current)
        && let Some(at) = first_passing_elapsed(previous, room, duration_ms)
    {
        // `at < duration`: inside this cell.
        return Some(at.saturating_sub(elapsed_ms));
    }
    // In the next cell: the current count is the previous one now; the next cell's own
    // count is 0. `first_passing_elapsed` may answer `duration`: the start of the cell after.
    let into_next = first_passing_elapsed(current, budget, duration_ms).unwrap_or(duration_ms);
    Some((duration_ms - elapsed_ms).saturating_add(into_next))
}

/// The first elapsed ms in a cell (`0..duration`) at which `floor(previous × (duration −
/// elapsed) / duration) ≤ room`; `None` if none in the cell.
fn first_passing_elapsed(previous: u64, room: u64, duration_ms: u64) -> Option<u64> {
    if previous == 0 {
        return Some(0);
    }
    let (previous, room, duration) = (
        u128::from(previous),
        u128::from(room),
        u128::from(duration_ms),
    );
    // The largest weight that passes: ceil((room + 1) × duration / previous) − 1 (≥ 0).
    let max_weight = ((room + 1) * duration).div_ceil(previous) - 1;
    // weight = duration − elapsed, so elapsed ≥ duration − max_weight.
    let at = duration.saturating_sub(max_weight);
    // `at == duration` is the start of the next cell, not this one.
    (at < duration).then_some(at as u64)
}

#[cfg(test)]
mod tests {
    use super::super::decide;
    use super::*;

    fn counts(current: u64, previous: u64, elapsed_ms: u64, duration_ms: u64) -> WindowCounts {
        WindowCounts {
            current,
            previous,
            elapsed_ms,
            duration_ms,
        }
    }

    /// Walk time forward one ms at a time on the same counts (moving them into the previous
    /// cell at the rollover) and find the first moment `decide` passes.
    fn brute_force(counts: WindowCounts, cost: u64, limit: u64) -> Option<u64> {
        let (current, previous, duration_ms) =
            (counts.current, counts.previous, counts.duration_ms);
        for wait in 0..=2 * duration_ms {
            let at = counts.elapsed_ms + wait;
            let (cur, prev, elapsed) = match at / duration_ms {
                0 => (current, previous, at),
                1 => (0, current, at - duration_ms),
                _ => (0, 0, at % duration_ms),
            };
            if decide(cur, prev, elapsed, duration_ms, cost, limit).allowed {
                return Some(wait);
            }
        }
        None
    }

    #[test]
    fn matches_a_brute_force_search_over_time() {
        let mut checked = 0;
        for duration in [1, 7, 100, 1_000] {
            for limit in [0, 1, 3, 10] {
                for cost in [0, 1, 2, 11] {
                    for current in [0, 1, 2, 5, 10, 13] {
                        for previous in [0, 1, 4, 10, 25, 1_000] {
                            for elapsed in [0, duration / 3, duration / 2, duration - 1] {
                                let window = counts(current, previous, elapsed, duration);
                                let exact = until_pass_ms(window, cost, limit);
                                let searched = brute_force(window, cost, limit);
                                assert_eq!(
                                    exact, searched,
                                    "cur={current} prev={previous} elapsed={elapsed}/{duration} cost={cost} limit={limit}"
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 5_000);
    }

    #[test]
    fn a_full_cell_waits_into_the_next_one() {
        // 10 of 10 used, no previous, 200 ms into a 1 s cell: at the rollover the 10 still
        // weigh 10 × (1 − 0) = 10; one more passes once floor(10 × w / 1000) ≤ 9, w ≤ 999.
        assert_eq!(until_pass_ms(counts(10, 0, 200, 1_000), 1, 10), Some(801));
        // The end of the cell (800 ms) would still be denied:
        assert!(!decide(0, 10, 0, 1_000, 1, 10).allowed);
        assert!(decide(0, 10, 1, 1_000, 1, 10).allowed);
    }

    #[test]
    fn an_allowed_request_waits_nothing_and_an_impossible_one_never_passes() {
        assert_eq!(until_pass_ms(counts(0, 0, 500, 1_000), 1, 10), Some(0));
        assert_eq!(until_pass_ms(counts(0, 0, 500, 1_000), 11, 10), None);
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let wait = until_pass_ms(counts(u64::MAX, u64::MAX, 0, 86_400_000), 1, u64::MAX - 1);
        assert!(wait.is_some_and(|w| w <= 2 * 86_400_000));
    }
}
