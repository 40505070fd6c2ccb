//! The loaded limits written back as YAML in the config's own format, one document per
//! domain: what `GET /rlconfig?format=yaml` answers, so that `explain --service` walks the
//! tree the service runs (a file, a directory, or a control plane's resources).
//!
//! Loading the text again gives the same tree: every string is written in JSON's quoted
//! form (valid YAML), and wildcards keep their order (the first one that matches wins).

use std::fmt::Write as _;

use super::{DomainLimits, KeyNodes, Level, LimitsConfig, Node};
use crate::config::{Rule, RuleLimit};

/// The line that separates two domains' documents.
pub const DOCUMENT_SEPARATOR: &str = "---";

impl LimitsConfig {
    /// Every domain as its own YAML document, sorted by name, separated by `---` lines.
    pub fn dump_yaml(&self) -> String {
        let mut out = String::new();
        for (i, domain) in self.domains.iter().enumerate() {
            if i > 0 {
                out.push_str(DOCUMENT_SEPARATOR);
                out.push('\n');
            }
            domain.dump_yaml(&mut out);
        }
        out
    }
}

impl DomainLimits {
    fn dump_yaml(&self, out: &mut String) {
        let _ = writeln!(out, "domain: {}", quoted(&self.name));
        if self.root.is_empty() {
            out.push_str("descriptors: []\n");
            return;
        }
        out.push_str("descriptors:\n");
        level(out, &self.root, 1);
    }
}

fn quoted(text: &str) -> String {
    // JSON's string form is YAML's double-quoted scalar.
    serde_json::Value::String(text.to_owned()).to_string()
}

fn level(out: &mut String, level: &Level, depth: usize) {
    let mut keys: Vec<(&Box<str>, &KeyNodes)> = level.keys.iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, nodes) in keys {
        let mut exact: Vec<_> = nodes.exact.iter().collect();
        exact.sort_by(|a, b| a.0.cmp(b.0));
        for (value, node) in exact {
            descriptor(out, key, Some(value), node, depth);
        }
        for wildcard in &nodes.wildcards {
            descriptor(out, key, Some(&wildcard.pattern), &wildcard.node, depth);
        }
        if let Some(node) = &nodes.any_value {
            descriptor(out, key, None, node, depth);
        }
    }
}

fn descriptor(out: &mut String, key: &str, value: Option<&str>, node: &Node, depth: usize) {
    let indent = "  ".repeat(depth);
    let _ = writeln!(out, "{indent}- key: {}", quoted(key));
    let field = |out: &mut String, text: String| {
        let _ = writeln!(out, "{indent}  {text}");
    };
    if let Some(value) = value {
        field(out, format!("value: {}", quoted(value)));
    }
    if node.shared {
        field(out, "share_threshold: true".into());
    }
    if node.value_to_metric {
        field(out, "value_to_metric: true".into());
    }
    if let Some(rule) = &node.rule {
        rule_fields(out, rule, &indent);
    }
    if !node.children.is_empty() {
        field(out, "descriptors:".into());
        level(out, &node.children, depth + 1);
    }
}

fn rule_fields(out: &mut String, rule: &Rule, indent: &str) {
    let mut field = |text: String| {
        let _ = writeln!(out, "{indent}  {text}");
    };
    if rule.shadow_mode {
        field("shadow_mode: true".into());
    }
    if rule.quota_mode {
        field("quota_mode: true".into());
    }
    if rule.detailed_metric {
        field("detailed_metric: true".into());
    }
    if let Some(metadata) = &rule.metadata {
        // JSON is YAML's flow form.
        field(format!(
            "metadata: {}",
            serde_json::Value::Object((**metadata).clone())
        ));
    }
    let mut named = Vec::new();
    if let Some(name) = &rule.name {
        named.push(format!("name: {}", quoted(name)));
    }
    if !rule.replaces.is_empty() {
        let list: Vec<String> = rule
            .replaces
            .iter()
            .map(|r| format!("{{name: {}}}", quoted(r)))
            .collect();
        named.push(format!("replaces: [{}]", list.join(", ")));
    }
    let penalty = (rule.penalty_ms > 0).then(|| format!("penalty: \"{}ms\"", rule.penalty_ms));
    // On every entry of a list: the loader wants them all the same.
    let guarantee = rule
        .is_never_above()
        .then(|| format!("guarantee: {}", rule.guarantee));
    if rule.more_limits.is_empty() {
        let mut parts = limit_fields(&rule.limit);
        parts.extend(named);
        parts.extend(penalty);
        parts.extend(guarantee);
        field(format!("rate_limit: {{{}}}", parts.join(", ")));
        return;
    }
    let mut entries = Vec::new();
    for (i, limit) in rule.limits().enumerate() {
        let mut parts = limit_fields(limit);
        if i == 0 {
            parts.extend(penalty.clone());
        }
        parts.extend(guarantee.clone());
        entries.push(format!("{{{}}}", parts.join(", ")));
    }
    field(format!("rate_limits: [{}]", entries.join(", ")));
}

fn limit_fields(limit: &RuleLimit) -> Vec<String> {
    match limit {
        RuleLimit::Unlimited => vec!["unlimited: true".to_owned()],
        RuleLimit::Limited {
            requests_per_unit,
            unit,
            unit_multiplier,
        } => {
            let mut parts = vec![
                format!("unit: {}", unit.as_str()),
                format!("requests_per_unit: {requests_per_unit}"),
            ];
            if *unit_multiplier != 1 {
                parts.push(format!("unit_multiplier: {unit_multiplier}"));
            }
            parts
        }
    }
}

#[cfg(test)]
mod tests;
