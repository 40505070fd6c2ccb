//! Validates one parsed file and compiles it into a domain's lookup tree.
//!
//! This module walks the `descriptors` levels and builds the tree; each descriptor's limits
//! are checked into its rule in `rule_checks`.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use gcounter_engine::cell_key::Scope;
use serde_saphyr::Spanned;

use super::error::ConfigError;
use super::glob::Glob;
use super::guarantee::Guarantee;
use super::limits::{DomainLimits, Level, Node, ValueMatch};
use super::place::Place;
use super::raw::{RawDescriptor, RawFile, RawRateLimit};
use super::rule::{Rule, RuleLimit, push_namespace_segment, window_ms};
use super::unit::Unit;
use crate::telemetry::RuleSeries;

const UNITS: &str = "second, minute, hour, day, week, month or year";

/// The most limits one descriptor's `rate_limits` may hold: each is a counter every request
/// of the descriptor reads and writes.
pub(crate) const MAX_LIMITS_PER_DESCRIPTOR: usize = 8;

/// The domain of a file and the line it is named on.
pub(crate) struct CompiledDomain {
    pub limits: DomainLimits,
    pub line: Option<usize>,
}

/// Checks `raw` and builds its domain, pushing every problem to `errors`.
/// Returns the domain whenever it has a name, even if other parts are wrong,
/// so that a duplicate domain is still reported.
pub(crate) fn compile_file(
    file: &str,
    raw: &RawFile,
    errors: &mut Vec<ConfigError>,
) -> Option<CompiledDomain> {
    let first_error = errors.len();
    let domain = match &raw.domain {
        None if raw.descriptors.is_none() => {
            let problem = "the file declares nothing; expected `domain` and `descriptors`";
            errors.push(ConfigError::new(file, None, "", problem));
            None
        }
        None => {
            errors.push(ConfigError::new(file, None, "domain", "missing `domain`"));
            None
        }
        Some(d) if d.value.is_empty() => {
            errors.push(ConfigError::new(
                file,
                line_of(d),
                "domain",
                "`domain` is empty",
            ));
            None
        }
        Some(d) => Some(d),
    };
    let domain_name = domain.map_or("", |d| d.value.as_str());
    let mut compiler = Compiler {
        file,
        shared_file: Arc::from(file),
        domain: Arc::from(domain_name),
        errors,
        rules: Vec::new(),
    };
    let root = match &raw.descriptors {
        Some(descriptors) => compiler.level(descriptors, "", "", domain_name, false),
        None => Level::default(),
    };
    let rules = compiler.rules;
    let shared_file = compiler.shared_file;
    let domain_name = compiler.domain;
    // Checks run field by field; report in the order of the file.
    if let Some(new_errors) = errors.get_mut(first_error..) {
        new_errors.sort_by_key(|e| e.line);
    }
    domain.map(|d| CompiledDomain {
        limits: DomainLimits::new(
            domain_name,
            root,
            rules,
            Place::new(shared_file, line_of(d)),
        ),
        line: line_of(d),
    })
}

/// Where a rule sits: its descriptor's place (for errors), namespace and path, and whether a
/// descriptor on its path has `value_to_metric`.
struct RulePlace<'a> {
    descriptor_place: &'a str,
    /// The descriptor's line.
    line: Option<usize>,
    namespace: &'a str,
    path: &'a str,
    value_to_metric: bool,
}

/// What a `rate_limit` or a `rate_limits` list gives a rule: its limits, name, replaces,
/// penalty and guarantee.
struct RuleLimits {
    limit: RuleLimit,
    more_limits: Box<[RuleLimit]>,
    name: Option<Arc<str>>,
    replaces: Box<[Arc<str>]>,
    penalty_ms: u64,
    guarantee: Guarantee,
}

struct Compiler<'a> {
    file: &'a str,
    /// `file`, shared by the place of every node and rule.
    shared_file: Arc<str>,
    /// The domain's name, shared by the domain and every rule's counter scope.
    domain: Arc<str>,
    errors: &'a mut Vec<ConfigError>,
    /// Rules in config order (pre-order).
    rules: Vec<Arc<Rule>>,
}

/// Where a descriptor of a level was first declared, to name it in a
/// duplicate error.
struct FirstSeen {
    place: String,
    line: Option<usize>,
}

impl Compiler<'_> {
    fn error(&mut self, line: Option<usize>, place: &str, problem: impl Into<String>) {
        self.errors
            .push(ConfigError::new(self.file, line, place, problem));
    }

    /// Compiles one `descriptors` list. `prefix` is the place of the parent
    /// with a trailing `.` (empty at the root), `namespace` and `path` the
    /// parent's rule namespace and human-readable path.
    fn level(
        &mut self,
        descriptors: &[Spanned<RawDescriptor>],
        prefix: &str,
        namespace: &str,
        path: &str,
        value_to_metric_above: bool,
    ) -> Level {
        let mut level = Level::default();
        let mut seen: HashMap<(&str, Option<&str>), FirstSeen> = HashMap::new();
        for (i, spanned) in descriptors.iter().enumerate() {
            let place = format!("{prefix}descriptors[{i}]");
            let line = line_of(spanned);
            let descriptor = &spanned.value;

            let key = match &descriptor.key {
                None => {
                    self.error(line, &place, "descriptor has no `key`");
                    None
                }
                Some(k) if k.value.is_empty() => {
                    self.error(line_of(k), &format!("{place}.key"), "`key` is empty");
                    None
                }
                Some(k) => Some(k.value.as_str()),
            };
            // As upstream: an empty value is no value.
            let value = descriptor
                .value
                .as_ref()
                .map(|v| v.value.as_str())
                .filter(|v| !v.is_empty());

            let mut insertable = key.is_some();
            if let Some(key) = key {
                match seen.entry((key, value)) {
                    Entry::Occupied(first) => {
                        let first = first.get();
                        let what = match value {
                            Some(value) => format!("key `{key}` with value `{value}`"),
                            None => format!("key `{key}` without value"),
                        };
                        let at = match first.line {
                            Some(l) => format!("{} (line {l})", first.place),
                            None => first.place.clone(),
                        };
                        self.error(
                            line,
                            &place,
                            format!("duplicate descriptor: {what} is already declared at {at}"),
                        );
                        insertable = false;
                    }
                    Entry::Vacant(slot) => {
                        slot.insert(FirstSeen {
                            place: place.clone(),
                            line,
                        });
                    }
                }
            }

            let key_text = key.unwrap_or("");
            let mut node_namespace = namespace.to_owned();
            push_namespace_segment(&mut node_namespace, key_text, value);
            let node_path = match value {
                Some(value) => format!("{path}.{key_text}_{value}"),
                None => format!("{path}.{key_text}"),
            };

            let value_to_metric = descriptor.value_to_metric.unwrap_or(false);
            let value_to_metric_path = value_to_metric_above || value_to_metric;
            let at = RulePlace {
                descriptor_place: &place,
                line,
                namespace: &node_namespace,
                path: &node_path,
                value_to_metric: value_to_metric_path,
            };
            let rule = match (&descriptor.rate_limit, &descriptor.rate_limits) {
                (Some(_), Some(list)) => {
                    self.error(
                        line_of(list),
                        &format!("{place}.rate_limits"),
                        "`rate_limit` and `rate_limits` on one descriptor: put every limit \
                         in `rate_limits`",
                    );
                    None
                }
                (Some(rate_limit), None) => self.rule(rate_limit, descriptor, &at),
                (None, Some(list)) => self.rule_list(list, descriptor, &at),
                (None, None) => None,
            };
            let children = match &descriptor.descriptors {
                Some(children) => self.level(
                    children,
                    &format!("{place}."),
                    &node_namespace,
                    &node_path,
                    value_to_metric_path,
                ),
                None => Level::default(),
            };

            let shared = descriptor.share_threshold.as_ref().is_some_and(|s| s.value);
            let wildcard = value.is_some_and(|v| v.contains('*'));
            if shared && !wildcard {
                let line = descriptor.share_threshold.as_ref().and_then(line_of);
                self.error(
                    line,
                    &format!("{place}.share_threshold"),
                    "`share_threshold` needs a wildcard `value` (containing `*`)",
                );
                insertable = false;
            }
            if let (true, Some(key)) = (insertable, key) {
                let value = match value {
                    None => ValueMatch::Any,
                    Some(value) => match Glob::new(value) {
                        Some(glob) => ValueMatch::Wildcard(glob, value.into()),
                        None => ValueMatch::Exact(value.into()),
                    },
                };
                level.insert(
                    key,
                    value,
                    Node {
                        rule,
                        children,
                        shared,
                        value_to_metric,
                        place: Place::new(Arc::clone(&self.shared_file), line),
                    },
                );
            }
        }
        level
    }
}

/// The 1-based line of a node, `None` when serde-saphyr did not know it.
pub(crate) fn line_of<T>(spanned: &Spanned<T>) -> Option<usize> {
    match spanned.referenced.line() {
        0 => None,
        line => usize::try_from(line).ok(),
    }
}

mod rule_checks;

#[cfg(test)]
mod tests;
