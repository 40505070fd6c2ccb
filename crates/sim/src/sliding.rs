//! The worst sliding interval: the most admissions in any interval of one window's length,
//! wherever it starts (not only at window boundaries).

/// The most of `times` (instants in ms, sorted ascending) that fall in one half-open interval
/// `[t, t + window_ms)`, over every `t`; 0 when `times` is empty.
///
/// The busiest interval can always be moved to start at an admission without losing one, so
/// only intervals starting at an admission are counted: two pointers, linear time.
pub fn most_in_any_window(times: &[u64], window_ms: u64) -> usize {
    most_in_a_window_starting_before(times, window_ms, u64::MAX)
}

/// [`most_in_any_window`] over the intervals that start before `before`: with `before` the
/// end of the window a surge began in, the worst interval that holds some of its onset.
pub fn most_in_a_window_starting_before(times: &[u64], window_ms: u64, before: u64) -> usize {
    debug_assert!(times.is_sorted(), "admission instants come in time order");
    let mut most = 0;
    let mut tail = 0;
    for (head, &start) in times.iter().enumerate() {
        if start >= before {
            break;
        }
        let end = start.saturating_add(window_ms);
        tail = tail.max(head);
        while times.get(tail).is_some_and(|&t| t < end) {
            tail += 1;
        }
        most = most.max(tail - head);
    }
    most
}

#[cfg(test)]
mod tests;
