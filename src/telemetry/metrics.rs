//! The Prometheus registry, served as text on `GET /metrics`.

use std::fmt::Write;
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A label value shared with the compiled config: recording a decision clones an `Arc`
/// instead of allocating a `String`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharedLabel(pub Arc<str>);

impl EncodeLabelValue for SharedLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    Ok,
    OverLimit,
    InvalidArgument,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionOutcome {
    WithinLimit,
    OverLimit,
    /// Over the limit, but answered OK because of shadow mode.
    ShadowOverLimit,
    Unlimited,
}

/// Prometheus label values are snake_case by convention.
impl EncodeLabelValue for RequestOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Ok => "ok",
            Self::OverLimit => "over_limit",
            Self::InvalidArgument => "invalid_argument",
        })
    }
}

impl EncodeLabelValue for DecisionOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::WithinLimit => "within_limit",
            Self::OverLimit => "over_limit",
            Self::ShadowOverLimit => "shadow_over_limit",
            Self::Unlimited => "unlimited",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    outcome: RequestOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    domain: SharedLabel,
    rule: SharedLabel,
    outcome: DecisionOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    decisions: Family<DecisionLabels, Counter>,
    unmatched: Counter,
    reloads: Family<ReloadLabels, Counter>,
    rules: Gauge,
    live_cells: Gauge,
    pending_replay_cells: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("rls");
        let requests = Family::<RequestLabels, Counter>::default();
        let decisions = Family::<DecisionLabels, Counter>::default();
        let unmatched = Counter::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        let rules = Gauge::default();
        let live_cells = Gauge::default();
        let pending_replay_cells = Gauge::default();
        registry.register(
            "requests",
            "ShouldRateLimit calls by overall outcome",
            requests.clone(),
        );
        registry.register(
            "descriptor_decisions",
            "Decisions on descriptors that matched a limit, by rule and outcome",
            decisions.clone(),
        );
        registry.register(
            "unmatched_descriptors",
            "Descriptors of an unknown domain or with no matching rule (answered OK)",
            unmatched.clone(),
        );
        registry.register(
            "config_reloads",
            "Limits config reloads by result",
            reloads.clone(),
        );
        registry.register("config_rules", "Rules in the loaded config", rules.clone());
        registry.register(
            "live_cells",
            "Window cells held in memory",
            live_cells.clone(),
        );
        registry.register(
            "replay_pending_cells",
            "Cells with accepted work not yet replayed to the regional origin",
            pending_replay_cells.clone(),
        );
        Self {
            registry,
            requests,
            decisions,
            unmatched,
            reloads,
            rules,
            live_cells,
            pending_replay_cells,
        }
    }

    pub fn request(&self, outcome: RequestOutcome) {
        self.requests
            .get_or_create(&RequestLabels { outcome })
            .inc();
    }

    pub fn decision(&self, domain: &Arc<str>, rule: &Arc<str>, outcome: DecisionOutcome) {
        let labels = DecisionLabels {
            domain: SharedLabel(Arc::clone(domain)),
            rule: SharedLabel(Arc::clone(rule)),
            outcome,
        };
        self.decisions.get_or_create(&labels).inc();
    }

    pub fn unmatched(&self) {
        self.unmatched.inc();
    }

    pub fn config_loaded(&self, rules: usize) {
        self.reloads
            .get_or_create(&ReloadLabels { result: "ok" })
            .inc();
        self.rules.set(i64::try_from(rules).unwrap_or(i64::MAX));
    }

    pub fn config_rejected(&self) {
        self.reloads
            .get_or_create(&ReloadLabels { result: "error" })
            .inc();
    }

    /// Gauges sampled at scrape time from the engine.
    pub fn set_engine_gauges(&self, live_cells: usize, pending_replay_cells: usize) {
        self.live_cells
            .set(i64::try_from(live_cells).unwrap_or(i64::MAX));
        self.pending_replay_cells
            .set(i64::try_from(pending_replay_cells).unwrap_or(i64::MAX));
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_show_up_in_the_exposition() {
        let metrics = Metrics::new();
        metrics.decision(
            &"d".into(),
            &"d.key_v".into(),
            DecisionOutcome::ShadowOverLimit,
        );
        metrics.request(RequestOutcome::Ok);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"rls_descriptor_decisions_total{domain="d",rule="d.key_v",outcome="shadow_over_limit"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"rls_requests_total{outcome="ok"} 1"#),
            "{text}"
        );
    }
}
