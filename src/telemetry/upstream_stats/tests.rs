use super::*;

fn count(stats: &UpstreamStats, label: &Arc<str>, pick: fn(&RuleStats) -> &ShardedCounter) -> u64 {
    let rules = stats.rules.read().unwrap_or_else(PoisonError::into_inner);
    let domain: Arc<str> = Arc::from("d");
    rules
        .get(&(SharedLabel(domain), SharedLabel(Arc::clone(label))))
        .map_or(0, |s| pick(s).get())
}

fn usage(hits: u64, limit: u64, used_after: u64) -> Usage {
    Usage {
        hits,
        limit,
        used_after,
        seen: used_after.saturating_sub(hits),
    }
}

/// Upstream's `checkOverLimitThreshold`, as its fixed-cache test with
/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT expects: a limit of 14 (threshold 11), a count
/// of 13 and a hit of 2 is 1 over and 1 near; at the limit already, both hits are over.
#[test]
fn a_denial_from_below_the_limit_splits_its_hits_as_upstream() {
    let stats = UpstreamStats::new();
    let domain: Arc<str> = Arc::from("d");
    let label: Arc<str> = Arc::from("d.key5_value5");
    let denial = |seen| Usage {
        hits: 2,
        limit: 14,
        used_after: 14,
        seen,
    };
    stats.record(&domain, &label, DecisionOutcome::OverLimit, denial(13));
    assert_eq!(count(&stats, &label, |s| &s.over_limit), 1);
    assert_eq!(count(&stats, &label, |s| &s.near_limit), 1);
    stats.record(&domain, &label, DecisionOutcome::OverLimit, denial(15));
    assert_eq!(count(&stats, &label, |s| &s.over_limit), 3);
    assert_eq!(count(&stats, &label, |s| &s.near_limit), 1);
    // Unknown (the penalty box): all over.
    stats.record(
        &domain,
        &label,
        DecisionOutcome::OverLimit,
        denial(u64::MAX),
    );
    assert_eq!(count(&stats, &label, |s| &s.over_limit), 5);
    assert_eq!(count(&stats, &label, |s| &s.total_hits), 6);
}

/// Upstream's arithmetic: threshold floor(10 × 0.8) = 8; a hit of 3 taking the count from
/// 7 to 10 has 2 hits above it.
#[test]
fn near_limit_counts_only_the_hits_above_the_threshold() {
    let stats = UpstreamStats::new();
    let domain: Arc<str> = Arc::from("d");
    let record = |label: &Arc<str>, outcome, hits, used_after| {
        stats.record(&domain, label, outcome, usage(hits, 10, used_after));
    };
    let label: Arc<str> = Arc::from("d.k");
    record(&label, DecisionOutcome::WithinLimit, 7, 7);
    assert_eq!(count(&stats, &label, |s| &s.near_limit), 0);
    record(&label, DecisionOutcome::WithinLimit, 3, 10);
    assert_eq!(count(&stats, &label, |s| &s.near_limit), 2);
    assert_eq!(count(&stats, &label, |s| &s.within_limit), 10);
    // Denied at the limit already: every hit over.
    let at_limit = Usage {
        seen: 10,
        ..usage(4, 10, 10)
    };
    stats.record(&domain, &label, DecisionOutcome::ShadowOverLimit, at_limit);
    assert_eq!(count(&stats, &label, |s| &s.over_limit), 4);
    assert_eq!(count(&stats, &label, |s| &s.shadow_mode), 4);
    assert_eq!(count(&stats, &label, |s| &s.total_hits), 14);

    stats.set_near_limit_ratio(0.5);
    let other: Arc<str> = Arc::from("d.other");
    record(&other, DecisionOutcome::WithinLimit, 1, 6);
    assert_eq!(count(&stats, &other, |s| &s.near_limit), 1);
}

#[test]
fn labels_are_cut_as_upstreams_mapper_cuts_the_statsd_key() {
    let stats = UpstreamStats::new();
    let domain: Arc<str> = Arc::from("d");
    for label in ["d.a", "d.a_1.b.c"] {
        stats.record(
            &domain,
            &Arc::from(label),
            DecisionOutcome::OverLimit,
            Usage {
                seen: 5,
                ..usage(1, 5, 5)
            },
        );
    }
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(stats));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains(
            r#"ratelimit_service_rate_limit_over_limit{domain="d",key1="a",rule="d.a"} 1"#
        ),
        "{text}"
    );
    assert!(
            text.contains(
                r#"ratelimit_service_rate_limit_over_limit{domain="d",key1="a_1",key2="b",rule="d.a_1.b.c"} 1"#
            ),
            "{text}"
        );
}
