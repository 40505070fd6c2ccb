//! The all-or-nothing decision of one descriptor's limits, and the refund of what an
//! accepted descriptor consumed, for a request that must give it back (`all_or_nothing`,
//! over the limit).

use super::*;

impl RateLimiter {
    /// The engine's answer for one limited descriptor and the limit it is about: for several
    /// limits (`rate_limits`), the most constrained one.
    ///
    /// Several limits are all-or-nothing: they are consumed one by one in config order, and
    /// when one denies, what the earlier ones consumed is refunded, so a denied request
    /// consumes from none of them (as "denied consumes nothing" for one limit). The residual
    /// race, documented: between a consume and its refund, another request may see the
    /// earlier limits' counts higher by this request's cost and be denied by them (never
    /// admitted past a limit: counts are only ever too high, for that moment).
    ///
    /// With `is_negative_hits`, every limit of the descriptor is refunded `cost` (each within
    /// what this process consumed of it: `Engine::refund`). When denied hits are counted,
    /// nothing is refunded and every limit counts the hit (`decide_counting_all`).
    pub(super) async fn decide(&self, limited: &plan::Limited<'_>) -> (Verdict, plan::LimitWindow) {
        let hit = |window: plan::LimitWindow| limited.hit(window);
        // `penalty` (our extension) lives on the rule; an override has none.
        let penalty_ms = limited.rule.as_ref().map_or(0, |rule| rule.penalty_ms);
        let first = limited.window();
        if !limited.has_more_limits() {
            let verdict = if limited.refund {
                self.engine.refund(hit(first)).await
            } else {
                self.engine.check_with_penalty(hit(first), penalty_ms).await
            };
            return (verdict, first);
        }
        if self.engine.counts_denied() && !limited.refund {
            return self.decide_counting_all(limited, penalty_ms).await;
        }
        let mut constrained: Option<(gcounter_engine::Verdict, plan::LimitWindow)> = None;
        for (consumed, window) in limited.windows().enumerate() {
            let verdict = if limited.refund {
                self.engine.refund(hit(window)).await
            } else {
                self.engine
                    .check_with_penalty(hit(window), penalty_ms)
                    .await
            };
            if !verdict.allowed {
                if limited.cost > 0 {
                    for earlier in limited.windows().take(consumed) {
                        self.engine.refund(hit(earlier)).await;
                    }
                }
                return (verdict, window);
            }
            if constrained.is_none_or(|(least, _)| verdict.remaining < least.remaining) {
                constrained = Some((verdict, window));
            }
        }
        constrained.unwrap_or_else(|| untouched(first))
    }
}

/// The answer when no limit answered (a descriptor's limits are never empty, so only a
/// defensive default): allowed, with the first limit whole.
fn untouched(first: plan::LimitWindow) -> (Verdict, plan::LimitWindow) {
    let verdict = Verdict {
        allowed: true,
        remaining: u64::from(first.requests_per_unit),
        until_reset_ms: first.duration_ms,
        seen: 0,
    };
    (verdict, first)
}

impl RateLimiter {
    /// Several limits when denied hits are counted (upstream's semantics): every limit
    /// counts the hit whatever the others say, as upstream increments every key of a
    /// request; the answer is the first that denies, else the most constrained.
    async fn decide_counting_all(
        &self,
        limited: &plan::Limited<'_>,
        penalty_ms: u64,
    ) -> (Verdict, plan::LimitWindow) {
        let first = limited.window();
        let mut answer: Option<(Verdict, plan::LimitWindow)> = None;
        for window in limited.windows() {
            let verdict = self
                .engine
                .check_with_penalty(limited.hit(window), penalty_ms)
                .await;
            let replaces = match answer {
                None => true,
                Some((held, _)) if held.allowed => {
                    !verdict.allowed || verdict.remaining < held.remaining
                }
                Some(_) => false,
            };
            if replaces {
                answer = Some((verdict, window));
            }
        }
        answer.unwrap_or_else(|| untouched(first))
    }

    /// Refunds what one accepted descriptor consumed, in every one of its limits.
    pub(super) async fn give_back(&self, limited: &plan::Limited<'_>) {
        for window in limited.windows() {
            self.engine.refund(limited.hit(window)).await;
        }
    }
}
