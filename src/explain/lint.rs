//! `check-config --envoy`: the limits against the Envoy config that calls them. Every
//! descriptor the Envoy config can send (`shapes`) is walked down its domain's tree
//! (`reach`); what reaches no rule is an error, and so is a domain the limits do not have;
//! rules no descriptor reaches, policies the filter never uses, and a fail-closed filter or
//! a short timeout are warnings. Each finding names both sides' file and line.

mod reach;
mod shapes;

use std::fmt;

use reach::Miss;
use shapes::{EntryShape, Shape, Shapes, ValueShape};

use crate::config::{DomainLimits, LimitsConfig, NodeView, Place};
use crate::envoy_config::EnvoyConfig;

/// Envoy's default rate limit filter timeout.
const ENVOY_DEFAULT_TIMEOUT_MS: u64 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem of the pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub message: String,
    pub envoy: Option<Place>,
    pub limits: Option<Place>,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{severity}: {}", self.message)?;
        if let Some(envoy) = &self.envoy {
            write!(f, "\n  envoy:  {envoy}")?;
        }
        if let Some(limits) = &self.limits {
            write!(f, "\n  limits: {limits}")?;
        }
        Ok(())
    }
}

/// Every finding of `envoy` against `limits`, the Envoy side's order.
pub fn lint(envoy: &EnvoyConfig, limits: &LimitsConfig) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut shapes = Shapes::default();
    let mut domains_used = Vec::new();
    for unsupported in &envoy.unsupported {
        findings.push(warning(
            format!("not checked: {}", unsupported.what),
            Some(unsupported.place.clone()),
            None,
        ));
    }
    for manager in &envoy.managers {
        if let (true, Some(place)) = (manager.filters.is_empty(), first_policy(manager)) {
            findings.push(warning(
                format!(
                    "`rate_limits` on the routes of `{}`, but no rate limit filter runs them \
                     in this file: their domain is not known, not checked",
                    manager.listener
                ),
                Some(place),
                None,
            ));
        }
        for filter in &manager.filters {
            filter_settings(filter, limits, &mut findings);
            shapes.of_filter(manager, filter, &envoy.local_cluster);
        }
        for quota in &manager.quota_filters {
            for bucket in &quota.buckets {
                let entries = bucket
                    .entries
                    .iter()
                    .map(|(key, value)| EntryShape {
                        key: key.clone(),
                        value: value.clone().map_or_else(
                            || ValueShape::Any("the request".into()),
                            ValueShape::Known,
                        ),
                        place: bucket.place.clone(),
                    })
                    .collect();
                shapes.shapes.push(Shape {
                    entries,
                    place: bucket.place.clone(),
                    domain: quota.domain.clone(),
                    domain_place: quota.domain_place.clone(),
                    unordered: true,
                });
            }
        }
    }
    for not_checked in &shapes.not_checked {
        findings.push(warning(
            format!("descriptor not checked: {}", not_checked.why),
            Some(not_checked.place.clone()),
            None,
        ));
    }
    for unused in &shapes.unused {
        findings.push(warning(
            format!("these rate_limits are never used: {}", unused.why),
            Some(unused.place.clone()),
            None,
        ));
    }
    let mut missing_domains: Vec<(String, Place)> = Vec::new();
    for shape in &shapes.shapes {
        let Some(domain) = limits.domain(&shape.domain) else {
            if !missing_domains
                .iter()
                .any(|(d, p)| *d == shape.domain && *p == shape.domain_place)
            {
                missing_domains.push((shape.domain.clone(), shape.domain_place.clone()));
            }
            continue;
        };
        if !domains_used.contains(&domain.name()) {
            domains_used.push(domain.name());
        }
        check_shape(shape, domain, &mut findings);
    }
    for (domain, place) in missing_domains {
        findings.push(missing_domain(&domain, place, limits));
    }
    unreachable_rules(&shapes.shapes, limits, &domains_used, &mut findings);
    findings.sort_by(|a, b| {
        let key = |f: &Finding| {
            f.envoy
                .as_ref()
                .map(|p| (p.file.clone(), p.line))
                .unwrap_or_default()
        };
        key(a).cmp(&key(b))
    });
    findings
}

fn warning(message: String, envoy: Option<Place>, limits: Option<Place>) -> Finding {
    Finding {
        severity: Severity::Warning,
        message,
        envoy,
        limits,
    }
}

fn error(message: String, envoy: Option<Place>, limits: Option<Place>) -> Finding {
    Finding {
        severity: Severity::Error,
        message,
        envoy,
        limits,
    }
}

/// The first `rate_limits` policy of a manager's routes, if any.
fn first_policy(manager: &crate::envoy_config::model::HttpManager) -> Option<Place> {
    let hosts = manager.routes.iter().flat_map(|t| &t.virtual_hosts);
    hosts
        .flat_map(|vh| {
            let routes = vh.routes.iter().flat_map(|r| {
                let own = r.action.iter().flat_map(|a| &a.rate_limits);
                own.chain(r.per_filter.iter().flat_map(|(_, p)| &p.rate_limits))
            });
            vh.rate_limits.iter().chain(routes)
        })
        .map(|policy| policy.place.clone())
        .next()
}

/// `failure_mode_deny` and `timeout` worth a word.
fn filter_settings(
    filter: &crate::envoy_config::model::RateLimitFilter,
    limits: &LimitsConfig,
    findings: &mut Vec<Finding>,
) {
    let limits_place = limits
        .domain(&filter.domain)
        .and_then(|d| d.places().first().cloned());
    if let Some((true, place)) = &filter.failure_mode_deny {
        findings.push(warning(
            "failure_mode_deny: true: while the service is unreachable or answers after the \
             timeout, every request this filter sees fails (status_on_error, 500 by default)"
                .into(),
            Some(place.clone()),
            limits_place.clone(),
        ));
    }
    match &filter.timeout_ms {
        None => findings.push(warning(
            format!(
                "no `timeout`: Envoy waits {ENVOY_DEFAULT_TIMEOUT_MS} ms, which a decision that \
                 reads a counter from Redis can exceed; the request then passes unlimited (or \
                 fails with failure_mode_deny)"
            ),
            Some(filter.place.clone()),
            limits_place,
        )),
        Some((ms, place)) if *ms < 50 => findings.push(warning(
            format!(
                "`timeout` of {ms} ms: a decision that reads a counter from Redis can take \
                 longer; the request then passes unlimited (or fails with failure_mode_deny)"
            ),
            Some(place.clone()),
            limits_place,
        )),
        Some(_) => {}
    }
}

fn missing_domain(domain: &str, envoy: Place, limits: &LimitsConfig) -> Finding {
    let known: Vec<String> = limits
        .domains()
        .map(|d| {
            let at = d
                .places()
                .first()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default();
            format!("`{}`{at}", d.name())
        })
        .collect();
    let closest = limits
        .domains()
        .map(|d| d.name())
        .min_by_key(|name| edit_distance(name, domain))
        .filter(|name| edit_distance(name, domain) <= 3);
    let limits_place = closest
        .and_then(|name| limits.domain(name))
        .and_then(|d| d.places().first().cloned());
    let hint = closest
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default();
    error(
        format!(
            "domain `{domain}` is not in the limits ({}): the service answers OK, unlimited{hint}",
            if known.is_empty() {
                "they have no domain".to_owned()
            } else {
                format!("they have {}", known.join(", "))
            }
        ),
        Some(envoy),
        limits_place,
    )
}

fn check_shape(shape: &Shape, domain: &DomainLimits, findings: &mut Vec<Finding>) {
    let orders = orders(shape);
    let mut best: Option<(Miss<'_>, Vec<&EntryShape>)> = None;
    for order in orders {
        let reach = reach::walk(domain, &order);
        if !reach.rules.is_empty() {
            return;
        }
        if let (Some(miss), None) = (reach.miss, &best) {
            best = Some((miss, order));
        }
    }
    let entries: Vec<String> = shape.entries.iter().map(|e| e.key.clone()).collect();
    let what = format!(
        "the descriptor ({}) matches no rule of domain `{}`",
        entries.join(", "),
        domain.name()
    );
    let Some((miss, order)) = best else {
        findings.push(error(
            what,
            Some(shape.place.clone()),
            domain.places().first().cloned(),
        ));
        return;
    };
    let (why, envoy, limits) = explain_miss(&miss, &order, shape, domain);
    findings.push(error(format!("{what}: {why}"), Some(envoy), limits));
}

/// The orders a shape's entries are walked in: its own, or every order for an RLQS bucket.
fn orders(shape: &Shape) -> Vec<Vec<&EntryShape>> {
    let entries: Vec<&EntryShape> = shape.entries.iter().collect();
    if !shape.unordered || entries.len() > 5 {
        return vec![entries];
    }
    let mut out = Vec::new();
    permutations(
        &entries,
        &mut Vec::new(),
        &mut vec![false; entries.len()],
        &mut out,
    );
    out
}

fn permutations<'a>(
    items: &[&'a EntryShape],
    current: &mut Vec<&'a EntryShape>,
    used: &mut Vec<bool>,
    out: &mut Vec<Vec<&'a EntryShape>>,
) {
    if current.len() == items.len() {
        out.push(current.clone());
        return;
    }
    for i in 0..items.len() {
        if used.get(i).copied().unwrap_or(true) {
            continue;
        }
        if let (Some(slot), Some(item)) = (used.get_mut(i), items.get(i)) {
            *slot = true;
            current.push(item);
            permutations(items, current, used, out);
            current.pop();
            if let Some(slot) = used.get_mut(i) {
                *slot = false;
            }
        }
    }
}

/// Why, and the two places to look at.
fn explain_miss(
    miss: &Miss<'_>,
    order: &[&EntryShape],
    shape: &Shape,
    domain: &DomainLimits,
) -> (String, Place, Option<Place>) {
    let label = |n: &NodeView<'_>| format!("`{}` ({})", n.label(), n.place());
    let list = |nodes: &[NodeView<'_>]| nodes.iter().map(label).collect::<Vec<_>>().join(", ");
    let entry = |i: usize| order.get(i).copied();
    let entry_place = |i: usize| entry(i).map_or(shape.place.clone(), |e| e.place.clone());
    let domain_place = domain.places().first().cloned();
    match miss {
        Miss::NoKey {
            index,
            parent,
            level,
        } => {
            let key = entry(*index).map(|e| e.key.as_str()).unwrap_or_default();
            let closest = level
                .iter()
                .filter(|n| edit_distance(n.key(), key) <= 2)
                .min_by_key(|n| edit_distance(n.key(), key));
            let under = parent.map_or("at the top level".to_owned(), |p| {
                format!("under {}", label(&p))
            });
            let why = match closest {
                Some(node) => format!(
                    "no descriptor has the key `{key}` {under}; did you mean `{}` ({})?",
                    node.key(),
                    node.place()
                ),
                None => format!(
                    "no descriptor has the key `{key}` {under}; there: {}",
                    list(level)
                ),
            };
            let limits = closest
                .map(|n| n.place().clone())
                .or_else(|| parent.map(|p| p.place().clone()))
                .or(domain_place);
            (why, entry_place(*index), limits)
        }
        Miss::NoValue { index, same_key } => {
            let (key, value) = entry(*index).map_or((String::new(), String::new()), |e| {
                (
                    e.key.clone(),
                    match &e.value {
                        ValueShape::Known(v) => format!("`{v}`"),
                        ValueShape::Any(what) => what.clone(),
                        ValueShape::Masked(v4, v6) => {
                            format!("an address masked to /{v4} (IPv4) or /{v6} (IPv6)")
                        }
                    },
                )
            });
            let why = format!(
                "its `{key}` is {value}, which matches none of {}",
                list(same_key)
            );
            (
                why,
                entry_place(*index),
                same_key.first().map(|n| n.place().clone()),
            )
        }
        Miss::NoRuleAtLast { node, children } => {
            let why = if children.is_empty() {
                format!("it ends at {}, which has no rate_limit", label(node))
            } else {
                format!(
                    "it ends at {}, which has no rate_limit of its own: the limits nest {} \
                     under it (a missing nested level: the descriptor needs one more entry)",
                    label(node),
                    list(children)
                )
            };
            (why, shape.place.clone(), Some(node.place().clone()))
        }
        Miss::TooDeep { index, node } => {
            let key = entry(*index).map(|e| e.key.as_str()).unwrap_or_default();
            let why = format!(
                "its entry `{key}` goes deeper than the limits: {} has no nested descriptors",
                label(node)
            );
            (why, entry_place(*index), Some(node.place().clone()))
        }
    }
}

/// Rules of the domains the Envoy config uses that no descriptor it sends can reach.
fn unreachable_rules(
    shapes: &[Shape],
    limits: &LimitsConfig,
    domains_used: &[&std::sync::Arc<str>],
    findings: &mut Vec<Finding>,
) {
    for name in domains_used {
        let Some(domain) = limits.domain(name) else {
            continue;
        };
        let mut reached: Vec<*const crate::config::Rule> = Vec::new();
        let mut envoy_place = None;
        for shape in shapes.iter().filter(|s| s.domain.as_str() == &***name) {
            envoy_place.get_or_insert_with(|| shape.domain_place.clone());
            for order in orders(shape) {
                for node in reach::walk(domain, &order).rules {
                    reached.extend(node.rule().map(std::sync::Arc::as_ptr));
                }
            }
        }
        for rule in domain.rules() {
            if !reached.contains(&std::sync::Arc::as_ptr(rule)) {
                findings.push(warning(
                    format!(
                        "rule `{}` of domain `{name}` is reached by no descriptor this Envoy \
                         config sends: a limit that never applies",
                        rule.label()
                    ),
                    envoy_place.clone(),
                    Some(rule.place.clone()),
                ));
            }
        }
    }
}

/// Levenshtein distance, for "did you mean"; long strings are not compared.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len() > 64 || b.len() > 64 {
        return usize::MAX;
    }
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous.get(j).copied().unwrap_or(0) + usize::from(ca != cb);
            let deletion = previous.get(j + 1).copied().unwrap_or(0) + 1;
            let insertion = current.get(j).copied().unwrap_or(0) + 1;
            current.push(substitution.min(deletion).min(insertion));
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests;
