//! The human form of an explanation: one block per descriptor, each line one fact with the
//! file and line it comes from.

use std::fmt::Write as _;

use super::envoy_report::FilterReport;
use super::report::{DescriptorReport, Explanation};

/// The text of `explanation`.
pub fn explanation(out: &mut String, explanation: &Explanation) {
    let declared = if explanation.domain_declared_at.is_empty() {
        "not in the limits".to_owned()
    } else {
        explanation.domain_declared_at.join(", ")
    };
    let _ = writeln!(out, "domain {} ({declared})", explanation.domain);
    if explanation.descriptors.is_empty() {
        let _ = writeln!(out, "  no descriptors: nothing is limited");
    }
    for (i, descriptor) in explanation.descriptors.iter().enumerate() {
        let _ = writeln!(out);
        descriptor_block(out, i + 1, descriptor);
    }
    if let Some(service) = &explanation.service {
        let _ = writeln!(out);
        let _ = writeln!(out, "service {}: {}", service.url, service.summary);
        for note in &service.notes {
            let _ = writeln!(out, "  {note}");
        }
    }
}

fn descriptor_block(out: &mut String, number: usize, d: &DescriptorReport) {
    let entries: Vec<String> = d
        .entries
        .iter()
        .map(|e| format!("{}={}", e.key, e.value))
        .collect();
    let cost = if d.refund {
        format!("refund {}", d.cost)
    } else {
        format!("cost {}", d.cost)
    };
    let _ = writeln!(out, "descriptor {number}: ({}), {cost}", entries.join(", "));
    for e in &d.entries {
        match (&e.node, e.matched, &e.at) {
            (Some(node), Some(how), Some(at)) => {
                let how = match how {
                    "exact" => "exact value",
                    "wildcard" => "wildcard",
                    "shared_wildcard" => {
                        "wildcard with share_threshold: every value shares one counter"
                    }
                    _ => "no value: any value",
                };
                let _ = writeln!(
                    out,
                    "  {}={}  matched `{node}` ({how}) at {at}",
                    e.key, e.value
                );
            }
            _ => {
                let _ = writeln!(out, "  {}={}  matched nothing", e.key, e.value);
            }
        }
    }
    match &d.rule {
        Some(rule) => {
            let mut extras = Vec::new();
            if rule.shadow_mode {
                extras.push("shadow mode: over its limit it still answers OK".to_owned());
            }
            if rule.quota_mode {
                extras.push("quota mode".to_owned());
            }
            if rule.penalty_ms > 0 {
                extras.push(format!("penalty {} ms", rule.penalty_ms));
            }
            if rule.guarantee == crate::config::Guarantee::NeverAbove.as_str() {
                extras.push("guarantee never_above: never admits above its limit".to_owned());
            }
            if !rule.replaces.is_empty() {
                extras.push(format!("replaces {}", rule.replaces.join(", ")));
            }
            let extras = if extras.is_empty() {
                String::new()
            } else {
                format!("; {}", extras.join("; "))
            };
            let path = if rule.label == rule.path {
                String::new()
            } else {
                format!(" ({})", rule.path)
            };
            let _ = writeln!(
                out,
                "  rule `{}`{path} at {}: {}{extras}",
                rule.label,
                rule.at,
                rule.limits.join(", ")
            );
        }
        None => {
            let _ = writeln!(out, "  no rule");
        }
    }
    let _ = writeln!(out, "  => {}: {}", d.outcome.replace('_', " "), d.why);
    if let Some(counter) = &d.counter {
        let windows: Vec<String> = counter
            .windows
            .iter()
            .map(|(ms, limit)| format!("{limit} per {}", seconds(*ms)))
            .collect();
        let shared = if counter.shared { " (shared)" } else { "" };
        let _ = writeln!(
            out,
            "  counter: namespace `{}`, identifier `{}`{shared}, {}",
            counter.namespace,
            counter.identifier,
            windows.join(", ")
        );
    }
    if let Some(status) = &d.service {
        let _ = writeln!(out, "  service now: {}", status.text());
    }
}

/// `60 s`, `1 h`: a window's length.
fn seconds(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3_600 == 0 => format!("{} h", s / 3_600),
        s if s % 60 == 0 && s >= 60 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// The text of what an Envoy filter does with the request.
pub fn filter(out: &mut String, report: &FilterReport) {
    let filter = report
        .filter
        .as_deref()
        .unwrap_or("(a route configuration alone)");
    let _ = writeln!(
        out,
        "listener `{}`, filter {filter}, domain `{}`",
        report.listener, report.domain
    );
    let _ = writeln!(out, "  {}", report.routing);
    for condition in &report.unevaluated_conditions {
        let _ = writeln!(
            out,
            "  not evaluated: route condition {condition} (taken as matching)"
        );
    }
    if let Some(why) = &report.why_none {
        let _ = writeln!(out, "  {why}");
    }
    for policy in &report.policies {
        let when = if policy.on_stream_done {
            ", once the stream is done"
        } else {
            ""
        };
        let what = match policy.outcome {
            "sent" => {
                let entries: Vec<String> = policy
                    .entries
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let hits = policy
                    .hits_addend
                    .map(|h| format!(", hits_addend {h}"))
                    .unwrap_or_default();
                let hits = if policy.refund {
                    format!("{hits}, is_negative_hits")
                } else {
                    hits
                };
                format!("sends ({}){hits}", entries.join(", "))
            }
            "not_sent" => "sends nothing".to_owned(),
            _ => "not evaluated".to_owned(),
        };
        let _ = writeln!(
            out,
            "  rate_limits entry at {} (from {}){when}: {what}",
            policy.at, policy.origin
        );
        for note in &policy.notes {
            let _ = writeln!(out, "    {note}");
        }
    }
    let sends = report.policies.iter().any(|p| p.outcome == "sent");
    if report.why_none.is_none() && !sends {
        let _ = writeln!(
            out,
            "  no descriptor: Envoy does not call the service for this request"
        );
    }
    if report.uncertain {
        let _ = writeln!(
            out,
            "  (something above was not evaluated: the calls may differ)"
        );
    }
}
