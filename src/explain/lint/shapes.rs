//! What an Envoy config can send, without a request: each `rate_limits` policy in use as a
//! descriptor shape (each entry's key, and its value when the config fixes it), with the
//! domain it goes to; and each RLQS bucket's entries.

use std::collections::HashSet;

use crate::config::Place;
use crate::envoy_config::model::{
    ActionKind, Cluster, HttpManager, MetadataSource, PerRoute, RateLimitFilter, RateLimitPolicy,
    Route, VhRateLimits, VirtualHost,
};
use crate::envoy_config::yaml::Node;

/// Optional entries (`skip_if_absent`) a shape may have before its variants are not all
/// checked: each doubles them.
const MAX_OPTIONAL: usize = 6;

/// A descriptor entry's value, as far as the config says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueShape {
    /// Always this value.
    Known(String),
    /// A request's value (a header, the client address, ...).
    Any(String),
    /// A client address masked to these prefix lengths (IPv4, IPv6).
    Masked(u8, u8),
}

/// One entry of a descriptor shape.
#[derive(Debug, Clone)]
pub struct EntryShape {
    pub key: String,
    pub value: ValueShape,
    /// The action that makes it.
    pub place: Place,
}

/// A descriptor Envoy can send, and where it goes.
#[derive(Debug, Clone)]
pub struct Shape {
    pub entries: Vec<EntryShape>,
    /// The policy (or RLQS bucket builder) that makes it.
    pub place: Place,
    pub domain: String,
    /// Where the domain is set in the Envoy config.
    pub domain_place: Place,
    /// RLQS buckets: their entries have no order (any order that walks the tree counts).
    pub unordered: bool,
}

/// A policy that cannot be checked, and why.
#[derive(Debug, Clone)]
pub struct NotChecked {
    pub place: Place,
    pub why: String,
}

/// The policies a filter can use, as shapes.
#[derive(Default)]
pub struct Shapes {
    pub shapes: Vec<Shape>,
    pub not_checked: Vec<NotChecked>,
    /// Route and virtual host policies the filter never uses, and why.
    pub unused: Vec<NotChecked>,
    /// (policy place, cluster) already taken.
    seen: HashSet<(String, String)>,
}

impl Shapes {
    /// Every policy `filter` can use on the routes of `manager`.
    pub fn of_filter(&mut self, manager: &HttpManager, filter: &RateLimitFilter, local: &str) {
        let domain_place = filter.domain_place.clone();
        let mut filter_policies_used = manager.routes.is_none();
        for (vh, route) in routes(manager) {
            let Some(action) = &route.action else {
                continue;
            };
            let per_route = most_specific(&filter.name, route, vh);
            if let Some(per_route) = per_route.filter(|p| !p.rate_limits.is_empty()) {
                let (domain, place) = per_route
                    .domain
                    .clone()
                    .unwrap_or_else(|| (filter.domain.clone(), domain_place.clone()));
                for policy in &per_route.rate_limits {
                    self.add(policy, Some(&action.cluster), route, local, &domain, &place);
                }
                continue;
            }
            if !filter.rate_limits.is_empty() {
                filter_policies_used = true;
                for policy in action.rate_limits.iter().chain(&vh.rate_limits) {
                    self.unused(policy, "the filter's own `rate_limits` are used instead");
                }
                continue;
            }
            let include = if action.include_vh_rate_limits {
                VhRateLimits::Include
            } else {
                per_route.map_or(VhRateLimits::Override, |p| p.vh_rate_limits)
            };
            let with_vh = match include {
                VhRateLimits::Include => true,
                VhRateLimits::Ignore => false,
                VhRateLimits::Override => action.rate_limits.is_empty(),
            };
            let vh_policies = vh.rate_limits.iter().filter(|_| with_vh);
            for policy in action.rate_limits.iter().chain(vh_policies) {
                if policy.stage != filter.stage {
                    self.unused(
                        policy,
                        &format!(
                            "its stage {} is not the filter's ({})",
                            policy.stage, filter.stage
                        ),
                    );
                    continue;
                }
                let cluster = (!vh.rate_limits.iter().any(|p| std::ptr::eq(p, policy)))
                    .then_some(&action.cluster);
                self.add(policy, cluster, route, local, &filter.domain, &domain_place);
            }
        }
        if filter_policies_used {
            for policy in &filter.rate_limits {
                self.add_any_route(policy, local, &filter.domain, &domain_place);
            }
        }
    }

    fn unused(&mut self, policy: &RateLimitPolicy, why: &str) {
        if self
            .seen
            .insert((policy.place.to_string(), "unused".to_owned()))
        {
            self.unused.push(NotChecked {
                place: policy.place.clone(),
                why: why.to_owned(),
            });
        }
    }

    fn add_any_route(&mut self, policy: &RateLimitPolicy, local: &str, domain: &str, at: &Place) {
        if !self.seen.insert((policy.place.to_string(), String::new())) {
            return;
        }
        match entries(policy, None, None, local) {
            Ok(entries) => self.expand(entries, policy, domain, at),
            Err(why) => self.not_checked.push(NotChecked {
                place: policy.place.clone(),
                why,
            }),
        }
    }

    fn add(
        &mut self,
        policy: &RateLimitPolicy,
        cluster: Option<&Cluster>,
        route: &Route,
        local: &str,
        domain: &str,
        domain_place: &Place,
    ) {
        let cluster_key = format!("{cluster:?}|{domain}");
        if !self.seen.insert((policy.place.to_string(), cluster_key)) {
            return;
        }
        match entries(policy, cluster, route.metadata.as_ref(), local) {
            Ok(entries) => self.expand(entries, policy, domain, domain_place),
            Err(why) => self.not_checked.push(NotChecked {
                place: policy.place.clone(),
                why,
            }),
        }
    }

    /// One shape per combination of the optional entries present or not.
    fn expand(
        &mut self,
        entries: Vec<(EntryShape, bool)>,
        policy: &RateLimitPolicy,
        domain: &str,
        domain_place: &Place,
    ) {
        let optional = entries.iter().filter(|(_, optional)| *optional).count();
        if optional > MAX_OPTIONAL {
            self.not_checked.push(NotChecked {
                place: policy.place.clone(),
                why: format!("{optional} optional entries: too many combinations to check"),
            });
            return;
        }
        for mask in 0..(1u32 << optional) {
            let mut bit = 0;
            let mut kept = Vec::new();
            for (entry, is_optional) in &entries {
                if *is_optional {
                    let present = mask & (1 << bit) != 0;
                    bit += 1;
                    if !present {
                        continue;
                    }
                }
                kept.push(entry.clone());
            }
            if kept.is_empty() {
                continue;
            }
            self.shapes.push(Shape {
                entries: kept,
                place: policy.place.clone(),
                domain: domain.to_owned(),
                domain_place: domain_place.clone(),
                unordered: false,
            });
        }
    }
}

fn routes(manager: &HttpManager) -> impl Iterator<Item = (&VirtualHost, &Route)> {
    manager
        .routes
        .iter()
        .flat_map(|t| &t.virtual_hosts)
        .flat_map(|vh| vh.routes.iter().map(move |r| (vh, r)))
}

fn most_specific<'c>(name: &str, route: &'c Route, vh: &'c VirtualHost) -> Option<&'c PerRoute> {
    let find =
        |list: &'c [(String, PerRoute)]| list.iter().find(|(n, _)| n == name).map(|(_, p)| p);
    find(&route.per_filter).or_else(|| find(&vh.per_filter))
}

/// A policy's entries, each with whether it may be left out; why not when an action is not
/// evaluated.
fn entries(
    policy: &RateLimitPolicy,
    cluster: Option<&Cluster>,
    metadata: Option<&Node>,
    local: &str,
) -> Result<Vec<(EntryShape, bool)>, String> {
    let mut out = Vec::new();
    for action in &policy.actions {
        let entry = |key: &str, value: ValueShape| EntryShape {
            key: key.to_owned(),
            value,
            place: action.place.clone(),
        };
        let any = |what: &str| ValueShape::Any(what.to_owned());
        let (shape, optional) = match &action.kind {
            ActionKind::SourceCluster => (
                entry("source_cluster", ValueShape::Known(local.into())),
                false,
            ),
            ActionKind::DestinationCluster => {
                let value = match cluster {
                    Some(Cluster::Named(name)) => ValueShape::Known(name.clone()),
                    _ => any("the route's cluster"),
                };
                (entry("destination_cluster", value), false)
            }
            ActionKind::RequestHeaders {
                header_name,
                descriptor_key,
                skip_if_absent,
            } => (
                entry(descriptor_key, any(&format!("header `{header_name}`"))),
                *skip_if_absent,
            ),
            ActionKind::QueryParameters {
                name,
                descriptor_key,
                skip_if_absent,
            } => (
                entry(descriptor_key, any(&format!("query parameter `{name}`"))),
                *skip_if_absent,
            ),
            ActionKind::RemoteAddress => {
                (entry("remote_address", any("the client address")), false)
            }
            ActionKind::MaskedRemoteAddress {
                v4_prefix_len,
                v6_prefix_len,
            } => (
                entry(
                    "masked_remote_address",
                    ValueShape::Masked(*v4_prefix_len, *v6_prefix_len),
                ),
                false,
            ),
            ActionKind::GenericKey {
                descriptor_key,
                descriptor_value,
            }
            | ActionKind::HeaderValueMatch {
                descriptor_key,
                descriptor_value,
                ..
            }
            | ActionKind::QueryParameterValueMatch {
                descriptor_key,
                descriptor_value,
                ..
            } => (
                entry(descriptor_key, ValueShape::Known(descriptor_value.clone())),
                false,
            ),
            ActionKind::Metadata {
                descriptor_key,
                filter,
                path,
                default_value,
                source,
                skip_if_absent,
            } => {
                let from_route = (*source == MetadataSource::RouteEntry)
                    .then(|| route_metadata(metadata, filter, path))
                    .flatten()
                    .filter(|v| !v.is_empty());
                match (from_route, default_value.is_empty()) {
                    (Some(value), _) => (entry(descriptor_key, ValueShape::Known(value)), false),
                    (None, false) if *source == MetadataSource::RouteEntry => (
                        entry(descriptor_key, ValueShape::Known(default_value.clone())),
                        false,
                    ),
                    _ => (entry(descriptor_key, any("metadata")), *skip_if_absent),
                }
            }
            ActionKind::Unsupported(name) => {
                return Err(format!("action `{name}` is not evaluated"));
            }
        };
        // As Envoy: an entry with an empty key is left out.
        if !shape.key.is_empty() {
            out.push((shape, optional));
        }
    }
    Ok(out)
}

fn route_metadata(metadata: Option<&Node>, filter: &str, path: &[String]) -> Option<String> {
    let mut node = metadata?.get(filter)?;
    for key in path {
        node = node
            .entries()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)?;
    }
    node.text().map(str::to_owned)
}
