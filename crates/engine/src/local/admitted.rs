//! Hits admitted outside the engine and counted afterwards: an Envoy that enforces a quota
//! assignment itself (RLQS) reports what it let through, and those hits must weigh on the same
//! sliding window as the hits the engine decides, or one limit would hold twice.

use super::{Engine, Hit, WindowPosition};
use crate::recorder::DecisionSource;

impl Engine {
    /// Count `hit.cost` hits that were already admitted, whatever the limit says; of them,
    /// `in_previous` happened before the current window began (a report whose interval
    /// straddles the boundary) and count on the previous window's cell. Never fails: a cell
    /// the origin cannot read is counted locally, and replay carries it on like any accept.
    pub async fn count_admitted(&self, hit: Hit<'_>, in_previous: u64) {
        let now_ms = self.clock.now_ms();
        let position = WindowPosition::at(now_ms, hit.counter.duration_ms);
        let key = super::decide::current_key(&hit, &position);
        let mut source = DecisionSource::Local;
        let in_previous = in_previous.min(hit.cost);
        let current = self.cell(key, now_ms, &mut source).await;
        let need = current.add_admitted(hit.cost - in_previous, self.table.changes());
        self.queue_replay(need, &key, &current);
        if in_previous > 0
            && let Some(sequence) = position.previous_sequence()
        {
            let previous_key = key.with_sequence(sequence);
            let previous = self.cell(previous_key, now_ms, &mut source).await;
            let need = previous.add_admitted(in_previous, self.table.changes());
            self.queue_replay(need, &previous_key, &previous);
        }
    }
}
