use std::sync::Arc;

use crate::memory::plan::plan;
use crate::memory::plan::tests::{flag, inputs};
use crate::telemetry::{DecisionOutcome, Metrics, MetricsSettings};

#[test]
fn the_limit_and_every_pool_are_exposed() {
    let inputs = inputs(flag(256 << 20));
    let plan = plan(&inputs).expect("valid");
    let metrics = Metrics::new();
    metrics.memory.set_plan(&plan);
    let text = metrics.encode();
    assert!(
        text.contains(r#"rls_memory_limit_bytes{source="flag"} 268435456"#),
        "{text}"
    );
    for (pool, bytes) in plan.pools() {
        let line = format!(r#"rls_memory_budget_bytes{{pool="{pool}"}} {bytes}"#);
        assert!(text.contains(&line), "{line}\n{text}");
    }
    assert!(text.contains(r#"pool="reserve""#), "{text}");
}

#[test]
fn no_limit_is_zero_with_source_none() {
    let metrics = Metrics::new();
    let inputs = inputs(None);
    metrics.memory.set_plan(&plan(&inputs).expect("valid"));
    let text = metrics.encode();
    assert!(
        text.contains(r#"rls_memory_limit_bytes{source="none"} 0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"rls_memory_budget_bytes{pool="cell_bytes"} 268435456"#),
        "{text}"
    );
    assert!(!text.contains(r#"pool="reserve""#), "{text}");
}

#[test]
fn the_process_wide_series_cap_binds_across_rules() {
    let metrics = Metrics::with_settings(MetricsSettings {
        max_series_per_rule: 10,
        max_detailed_series: Some(4),
        ..MetricsSettings::default()
    });
    let domain: Arc<str> = "d".into();
    for rule in ["d.a", "d.b", "d.c"] {
        let rule: Arc<str> = rule.into();
        for value in 0..3 {
            let label: Arc<str> = format!("{rule}_{value}").into();
            metrics.detailed_decision(&domain, &rule, &label, DecisionOutcome::WithinLimit);
        }
    }
    let text = metrics.encode();
    let detailed = text
        .lines()
        .filter(|l| l.starts_with("rls_descriptor_decisions_total{") && l.contains('_'))
        .filter(|l| l.contains(r#"rule="d.a_"#) || l.contains(r#"rule="d.b_"#))
        .count()
        + text.lines().filter(|l| l.contains(r#"rule="d.c_"#)).count();
    assert_eq!(detailed, 4, "{text}");
    assert!(
        text.contains("rls_detailed_series_capped_total 5"),
        "{text}"
    );
}
