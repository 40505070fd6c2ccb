//! One request's decision path through the limits, as data (`--json` writes it as is): per
//! descriptor, each entry's node and how it matched, why the walk ended, the rule and its
//! limits, and the counter a hit lands on, planned as the service plans it (`rls::plan`).

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde::Serialize;

use crate::config::{DomainLimits, LimitsConfig, MatchKind, NodeView, Rule, RuleLimit, TraceEnd};
use crate::rls::plan::{self, Plan};

/// The explanation of one request.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub domain: String,
    /// Where the limits declare the domain; empty when they do not (nothing is limited).
    pub domain_declared_at: Vec<String>,
    pub descriptors: Vec<DescriptorReport>,
    /// With `--service`: what the running service answers now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<super::service::ServiceReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DescriptorReport {
    pub entries: Vec<EntryReport>,
    /// What one request of it adds to its counter (`hits_addend`).
    pub cost: u64,
    /// Envoy's `is_negative_hits`: the cost is given back.
    pub refund: bool,
    /// `limited`, `unlimited`, `no_rule`, `replaced`, `override` or `unknown_domain`.
    pub outcome: &'static str,
    /// Why, in words.
    pub why: String,
    pub rule: Option<RuleReport>,
    pub counter: Option<CounterReport>,
    /// With `--service`: its status now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<super::service::ServiceStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EntryReport {
    pub key: String,
    pub value: String,
    /// The node it matched (`key` or `key=value` as written), if any.
    pub node: Option<String>,
    /// `exact`, `wildcard`, `shared_wildcard` or `any_value`.
    pub matched: Option<&'static str>,
    pub at: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RuleReport {
    /// Its `name`, or its path when it has none: what responses and logs call it.
    pub label: String,
    pub name: Option<String>,
    pub path: String,
    pub at: String,
    /// `5 per minute`, `unlimited`, ...: every limit, the first one first.
    pub limits: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub penalty_ms: u64,
    /// `never_below` (the default) or `never_above`.
    pub guarantee: &'static str,
    pub replaces: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CounterReport {
    pub namespace: String,
    pub identifier: String,
    /// Window length in ms and the hits it allows, per limit.
    pub windows: Vec<(u64, u32)>,
    /// An entry matched a `share_threshold` wildcard: every value of it counts here.
    pub shared: bool,
}

/// Explains `request` under `limits`.
pub fn explain(limits: &LimitsConfig, request: &RateLimitRequest) -> Explanation {
    let Some(domain) = limits.domain(&request.domain) else {
        let known: Vec<&str> = limits.domains().map(|d| &**d.name()).collect();
        let why = format!(
            "the limits have no domain `{}` ({}): Envoy's convention is to answer OK, unlimited",
            request.domain,
            if known.is_empty() {
                "they have none".to_owned()
            } else {
                format!("they have {}", known.join(", "))
            }
        );
        return Explanation {
            domain: request.domain.clone(),
            domain_declared_at: Vec::new(),
            descriptors: request
                .descriptors
                .iter()
                .map(|d| DescriptorReport {
                    entries: d
                        .entries
                        .iter()
                        .map(|e| EntryReport {
                            key: e.key.clone(),
                            value: e.value.clone(),
                            node: None,
                            matched: None,
                            at: None,
                        })
                        .collect(),
                    cost: cost(d, request.hits_addend),
                    refund: d.is_negative_hits,
                    outcome: "unknown_domain",
                    why: why.clone(),
                    rule: None,
                    counter: None,
                    service: None,
                })
                .collect(),
            service: None,
        };
    };
    let plans = plan::plan(domain, &request.descriptors, request.hits_addend);
    let descriptors = request
        .descriptors
        .iter()
        .zip(&plans)
        .map(|(descriptor, plan)| describe(domain, request, descriptor, plan))
        .collect();
    Explanation {
        domain: request.domain.clone(),
        domain_declared_at: domain.places().iter().map(ToString::to_string).collect(),
        descriptors,
        service: None,
    }
}

type Descriptor = envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

fn describe(
    domain: &DomainLimits,
    request: &RateLimitRequest,
    descriptor: &Descriptor,
    plan: &Plan<'_>,
) -> DescriptorReport {
    let trace = domain.trace(
        descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str())),
    );
    let mut entries: Vec<EntryReport> = descriptor
        .entries
        .iter()
        .map(|e| EntryReport {
            key: e.key.clone(),
            value: e.value.clone(),
            node: None,
            matched: None,
            at: None,
        })
        .collect();
    for (report, step) in entries.iter_mut().zip(&trace.steps) {
        report.node = Some(step.node.label());
        report.matched = Some(match step.how {
            MatchKind::Exact => "exact",
            MatchKind::Wildcard if step.node.shared() => "shared_wildcard",
            MatchKind::Wildcard => "wildcard",
            MatchKind::AnyValue => "any_value",
        });
        report.at = Some(step.node.place().to_string());
    }
    let matched_rule = match &trace.end {
        TraceEnd::Rule(rule) => Some(*rule),
        _ => None,
    };
    let (outcome, why) = match plan {
        Plan::Limited(limited) if limited.rule.is_none() => (
            "override",
            format!(
                "the descriptor carries its own limit ({} per {}), which Envoy took from route \
                 metadata; it counts on {}",
                limited.requests_per_unit,
                limited.unit.as_str(),
                if matched_rule.is_some() {
                    "the matched rule's counter"
                } else {
                    "a counter of its own (no rule matched)"
                }
            ),
        ),
        Plan::Limited(_) => ("limited", "the rule applies".to_owned()),
        Plan::Unlimited(_) => (
            "unlimited",
            "the rule is `unlimited: true`: always OK, nothing counted".to_owned(),
        ),
        Plan::NoLimit => match matched_rule {
            Some(rule) => ("replaced", replaced_why(domain, request, rule)),
            None => ("no_rule", no_rule_why(&trace.end, &descriptor.entries)),
        },
    };
    let shared = trace
        .steps
        .iter()
        .any(|s| s.how == MatchKind::Wildcard && s.node.shared());
    let counter = match plan {
        Plan::Limited(limited) => Some(CounterReport {
            namespace: limited.scope.namespace.to_string(),
            identifier: limited.identifier.to_string(),
            windows: limited
                .windows()
                .map(|w| (w.duration_ms, w.requests_per_unit))
                .collect(),
            shared,
        }),
        Plan::NoLimit | Plan::Unlimited(_) => None,
    };
    DescriptorReport {
        entries,
        cost: cost(descriptor, request.hits_addend),
        refund: descriptor.is_negative_hits,
        outcome,
        why,
        rule: matched_rule.map(|rule| rule_report(rule)),
        counter,
        service: None,
    }
}

/// As the service counts it: the descriptor's `hits_addend`, else the request's (0 is 1).
fn cost(descriptor: &Descriptor, request_hits_addend: u32) -> u64 {
    descriptor
        .hits_addend
        .as_ref()
        .map_or(u64::from(request_hits_addend.max(1)), |h| h.value)
}

fn replaced_why(domain: &DomainLimits, request: &RateLimitRequest, rule: &Arc<Rule>) -> String {
    let by: Vec<String> = request
        .descriptors
        .iter()
        .filter_map(|d| domain.find(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))))
        .filter(|other| {
            rule.name
                .as_ref()
                .is_some_and(|name| other.replaces.contains(name))
        })
        .map(|other| format!("`{}` ({})", other.label(), other.place))
        .collect();
    format!(
        "its rule `{}` is replaced by {} (its `replaces` names `{}`), so this descriptor is not \
         limited",
        rule.label(),
        if by.is_empty() {
            "another matched rule".to_owned()
        } else {
            by.join(", ")
        },
        rule.name.as_deref().unwrap_or_default()
    )
}

/// Why a descriptor matched no rule, with the nodes it could have matched.
fn no_rule_why(
    end: &TraceEnd<'_>,
    entries: &[envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry],
) -> String {
    let list = |nodes: &[NodeView<'_>]| {
        nodes
            .iter()
            .map(|n| format!("`{}` ({})", n.label(), n.place()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match end {
        TraceEnd::Empty => "the descriptor has no entries".to_owned(),
        TraceEnd::Rule(_) => "a rule matched".to_owned(),
        TraceEnd::NoRuleAtLast => "its last entry's node has no rate_limit of its own (its \
                                   nested descriptors may: the descriptor stops a level short)"
            .to_owned(),
        TraceEnd::TooDeep { index } => format!(
            "entry {} (`{}`) is deeper than the tree: the node before it has no nested \
             descriptors",
            index + 1,
            entries
                .get(*index)
                .map(|e| e.key.as_str())
                .unwrap_or_default()
        ),
        TraceEnd::NoNode { index, candidates } => {
            let entry = entries.get(*index);
            let key = entry.map(|e| e.key.as_str()).unwrap_or_default();
            let value = entry.map(|e| e.value.as_str()).unwrap_or_default();
            let same_key: Vec<NodeView<'_>> = candidates
                .iter()
                .filter(|n| n.key() == key)
                .copied()
                .collect();
            if candidates.is_empty() {
                format!("entry {} (`{key}`): no descriptors at its level", index + 1)
            } else if same_key.is_empty() {
                format!(
                    "entry {} has the key `{key}`, which no descriptor at its level has; there: {}",
                    index + 1,
                    list(candidates)
                )
            } else {
                format!(
                    "entry {} `{key}={value}` matches no value of `{key}` at its level: {}",
                    index + 1,
                    list(&same_key)
                )
            }
        }
    }
}

fn rule_report(rule: &Rule) -> RuleReport {
    let limits = rule
        .limits()
        .map(|limit| match limit {
            RuleLimit::Unlimited => "unlimited".to_owned(),
            RuleLimit::Limited {
                requests_per_unit,
                unit,
                unit_multiplier: 1,
            } => format!("{requests_per_unit} per {}", unit.as_str()),
            RuleLimit::Limited {
                requests_per_unit,
                unit,
                unit_multiplier,
            } => format!(
                "{requests_per_unit} per {unit_multiplier} {}s",
                unit.as_str()
            ),
        })
        .collect();
    RuleReport {
        label: rule.label().to_string(),
        name: rule.name.as_deref().map(str::to_owned),
        path: rule.path.to_string(),
        at: rule.place.to_string(),
        limits,
        shadow_mode: rule.shadow_mode,
        quota_mode: rule.quota_mode,
        penalty_ms: rule.penalty_ms,
        guarantee: rule.guarantee.as_str(),
        replaces: rule.replaces.iter().map(|r| r.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests;
