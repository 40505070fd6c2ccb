//! From an Envoy config file to [`EnvoyConfig`]: a bootstrap (`static_resources`), a
//! listener, a `RouteConfiguration` alone, or an admin `/config_dump` (its bootstrap, static
//! and dynamic listeners and route configurations, `rds` resolved by name).
//!
//! Everything found that is not evaluated is recorded in [`EnvoyConfig::unsupported`] with
//! its place. Routes and actions are read in `routes` and `actions`.

use std::collections::HashMap;

use super::model::{
    EnvoyConfig, HttpManager, QuotaBucket, QuotaFilter, RateLimitFilter, RouteTable, Unsupported,
};
use super::yaml::{Document, Node};
use crate::config::Place;

mod actions;
mod routes;

/// The rate limit filter's name and config type.
pub(super) const RATE_LIMIT_FILTER: &str = "envoy.filters.http.ratelimit";
const RATE_LIMIT_TYPE: &str = "envoy.extensions.filters.http.ratelimit.v3.RateLimit";
const QUOTA_FILTER: &str = "envoy.filters.http.rate_limit_quota";
const QUOTA_TYPE: &str =
    "envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig";
const HCM_FILTER: &str = "envoy.filters.network.http_connection_manager";
const HCM_TYPE: &str =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// Listeners and route configurations are bounded: a config with more is refused.
const MAX_ITEMS: usize = 100_000;

/// Reads the parts of `document` this project evaluates.
pub fn parse(document: &Document) -> EnvoyConfig {
    let mut parser = Parser {
        doc: document,
        unsupported: Vec::new(),
        items: 0,
    };
    let mut found = Found::default();
    parser.collect(&document.root, &mut found);
    let mut config = EnvoyConfig {
        file: document.file.to_string(),
        local_cluster: found.local_cluster.unwrap_or_default(),
        ..EnvoyConfig::default()
    };
    for (manager, rds) in found.managers {
        let mut manager = manager;
        if let Some((name, place)) = rds {
            match found.route_configs.get(&name) {
                Some(table) => manager.routes = Some(table.clone()),
                None => parser.unsupported(
                    place,
                    format!(
                        "routes from RDS (`{name}`), not in this file: give a config dump \
                         (the admin's /config_dump) that holds them"
                    ),
                ),
            }
        }
        config.managers.push(manager);
    }
    if let Some(table) = found.lone_routes {
        config.managers.push(HttpManager {
            listener: if table.name.is_empty() {
                "(a route configuration)".to_owned()
            } else {
                table.name.clone()
            },
            place: table.place.clone().unwrap_or_default(),
            use_remote_address: false,
            xff_num_trusted_hops: 0,
            routes: Some(table),
            filters: Vec::new(),
            quota_filters: Vec::new(),
        });
    }
    config.unsupported = parser.unsupported;
    config
}

/// What the walk of the file found.
#[derive(Default)]
struct Found {
    local_cluster: Option<String>,
    /// Each manager with the RDS name it waits for.
    managers: Vec<(HttpManager, Option<(String, Place)>)>,
    route_configs: HashMap<String, RouteTable>,
    /// A file that is one `RouteConfiguration`.
    lone_routes: Option<RouteTable>,
}

struct Parser<'d> {
    doc: &'d Document,
    unsupported: Vec<Unsupported>,
    /// Listeners and route configurations read so far.
    items: usize,
}

impl<'d> Parser<'d> {
    fn place(&self, node: &Node) -> Place {
        self.doc.place(node)
    }

    fn unsupported(&mut self, place: Place, what: impl Into<String>) {
        self.unsupported.push(Unsupported {
            place,
            what: what.into(),
        });
    }

    /// One more listener or route configuration; false past the bound.
    fn count(&mut self, node: &Node) -> bool {
        self.items += 1;
        if self.items == MAX_ITEMS + 1 {
            let place = self.place(node);
            self.unsupported(
                place,
                format!("more than {MAX_ITEMS} listeners and routes: the rest is not read"),
            );
        }
        self.items <= MAX_ITEMS
    }

    /// Finds the listeners and route configurations of the file, whatever its shape.
    fn collect(&mut self, root: &'d Node, found: &mut Found) {
        if let Some(configs) = root.get("configs") {
            for config in configs.items() {
                self.collect_dump_entry(config, found);
            }
            return;
        }
        if root.get("static_resources").is_some() || root.get("node").is_some() {
            self.collect_bootstrap(root, found);
            return;
        }
        if root.get("filter_chains").is_some() || root.get("default_filter_chain").is_some() {
            self.listener(root, found);
            return;
        }
        if root.get("virtual_hosts").is_some() {
            found.lone_routes = Some(self.route_table(root));
            return;
        }
        let place = self.place(root);
        self.unsupported(
            place,
            "no `static_resources`, listener, `virtual_hosts` or config dump `configs` at the \
             top of the file",
        );
    }

    fn collect_bootstrap(&mut self, bootstrap: &'d Node, found: &mut Found) {
        if let Some(cluster) = bootstrap.get("node").and_then(|n| n.str("cluster")) {
            found.local_cluster = Some(cluster.to_owned());
        }
        let Some(resources) = bootstrap.get("static_resources") else {
            return;
        };
        for listener in resources
            .get("listeners")
            .map(Node::items)
            .unwrap_or_default()
        {
            if self.count(listener) {
                self.listener(listener, found);
            }
        }
    }

    /// One entry of a `/config_dump`.
    fn collect_dump_entry(&mut self, entry: &'d Node, found: &mut Found) {
        let kind = entry.str("@type").unwrap_or_default();
        if kind.ends_with("BootstrapConfigDump") {
            if let Some(bootstrap) = entry.get("bootstrap") {
                self.collect_bootstrap(bootstrap, found);
            }
        } else if kind.ends_with("ListenersConfigDump") {
            let statics = entry
                .get("static_listeners")
                .map(Node::items)
                .unwrap_or_default();
            let dynamics = entry
                .get("dynamic_listeners")
                .map(Node::items)
                .unwrap_or_default();
            let listeners = statics.iter().filter_map(|l| l.get("listener")).chain(
                dynamics
                    .iter()
                    .filter_map(|l| l.get("active_state")?.get("listener")),
            );
            for listener in listeners {
                if self.count(listener) {
                    self.listener(listener, found);
                }
            }
        } else if kind.ends_with("RoutesConfigDump") {
            let statics = entry
                .get("static_route_configs")
                .map(Node::items)
                .unwrap_or_default();
            let dynamics = entry
                .get("dynamic_route_configs")
                .map(Node::items)
                .unwrap_or_default();
            for table in statics
                .iter()
                .chain(dynamics)
                .filter_map(|r| r.get("route_config"))
            {
                if self.count(table) {
                    let table = self.route_table(table);
                    found.route_configs.insert(table.name.clone(), table);
                }
            }
        }
    }

    fn listener(&mut self, listener: &'d Node, found: &mut Found) {
        let name = listener
            .str("name")
            .unwrap_or("(unnamed listener)")
            .to_owned();
        let chains = listener
            .get("filter_chains")
            .map(Node::items)
            .unwrap_or_default();
        let default = listener.get("default_filter_chain");
        for chain in chains.iter().chain(default) {
            for filter in chain.get("filters").map(Node::items).unwrap_or_default() {
                let (kind, config) = typed(filter);
                let is_hcm = filter.str("name") == Some(HCM_FILTER) || kind.ends_with(HCM_TYPE);
                if let (true, Some(config)) = (is_hcm, config) {
                    let manager = self.manager(&name, config);
                    found.managers.push(manager);
                }
            }
        }
    }

    fn manager(&mut self, listener: &str, hcm: &'d Node) -> (HttpManager, Option<(String, Place)>) {
        let mut manager = HttpManager {
            listener: listener.to_owned(),
            place: self.place(hcm),
            use_remote_address: hcm.bool("use_remote_address").unwrap_or(false),
            xff_num_trusted_hops: hcm
                .u64("xff_num_trusted_hops")
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            routes: None,
            filters: Vec::new(),
            quota_filters: Vec::new(),
        };
        if let Some(extensions) = hcm.get("original_ip_detection_extensions") {
            let place = self.place(extensions);
            self.unsupported(
                place,
                "`original_ip_detection_extensions`: the client address is taken as without them",
            );
        }
        let mut rds = None;
        if let Some(table) = hcm.get("route_config") {
            manager.routes = Some(self.route_table(table));
        } else if let Some(source) = hcm.get("rds") {
            let name = source
                .str("route_config_name")
                .unwrap_or_default()
                .to_owned();
            rds = Some((name, self.place(source)));
        } else if let Some(scoped) = hcm.get("scoped_routes") {
            let place = self.place(scoped);
            self.unsupported(place, "`scoped_routes`: their routes are not read");
        }
        for filter in hcm.get("http_filters").map(Node::items).unwrap_or_default() {
            let name = filter.str("name").unwrap_or_default();
            let (kind, config) = typed(filter);
            if filter.get("config_discovery").is_some() {
                let place = self.place(filter);
                self.unsupported(
                    place,
                    format!("filter `{name}` from `config_discovery` (ECDS): not read"),
                );
                continue;
            }
            if name == QUOTA_FILTER || kind.ends_with(QUOTA_TYPE) {
                let quota = self.quota_filter(filter, config);
                manager.quota_filters.push(quota);
                continue;
            }
            if name != RATE_LIMIT_FILTER && !kind.ends_with(RATE_LIMIT_TYPE) {
                continue;
            }
            if filter.bool("disabled") == Some(true) {
                let place = self.place(filter);
                self.unsupported(
                    place,
                    format!(
                        "filter `{name}` is `disabled` unless a route enables it: taken as enabled"
                    ),
                );
            }
            let empty = Node::with(super::yaml::Value::Map(Vec::new()), filter.line);
            let config = config.unwrap_or(&empty);
            let filter = self.rate_limit_filter(name, filter, config);
            manager.filters.push(filter);
        }
        (manager, rds)
    }

    fn rate_limit_filter(&mut self, name: &str, filter: &Node, config: &Node) -> RateLimitFilter {
        let domain = config.get("domain");
        for field in ["request_type", "filter_enabled", "filter_enforced"] {
            if let Some(node) = config.get(field) {
                let place = self.place(node);
                self.unsupported(
                    place,
                    format!(
                        "`{field}`: the filter is taken as enabled and enforced for every request"
                    ),
                );
            }
        }
        RateLimitFilter {
            name: name.to_owned(),
            place: self.place(filter),
            domain: domain.and_then(Node::text).unwrap_or_default().to_owned(),
            domain_place: self.place(domain.unwrap_or(config)),
            stage: config.u64("stage").unwrap_or(0),
            failure_mode_deny: config.get("failure_mode_deny").map(|node| {
                (
                    config.bool("failure_mode_deny").unwrap_or(false),
                    self.place(node),
                )
            }),
            timeout_ms: config
                .get("timeout")
                .and_then(|node| Some((duration_ms(node)?, self.place(node)))),
            rate_limits: self.policies(config.get("rate_limits")),
        }
    }
}

impl Parser<'_> {
    /// An RLQS filter: its domain and the bucket id builders of its `matcher_list`.
    fn quota_filter(&mut self, filter: &Node, config: Option<&Node>) -> QuotaFilter {
        let domain = config.and_then(|c| c.get("domain"));
        let mut quota = QuotaFilter {
            place: self.place(filter),
            domain: domain.and_then(Node::text).unwrap_or_default().to_owned(),
            domain_place: self.place(domain.unwrap_or(filter)),
            buckets: Vec::new(),
        };
        let Some(matchers) = config.and_then(|c| c.get("bucket_matchers")) else {
            return quota;
        };
        if let Some(tree) = matchers.get("matcher_tree") {
            let place = self.place(tree);
            self.unsupported(place, "RLQS `matcher_tree`: its buckets are not read");
        }
        let list = matchers.get("matcher_list").and_then(|l| l.get("matchers"));
        let actions = list
            .map(Node::items)
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m.get("on_match")?.get("action"))
            .chain(matchers.get("on_no_match").and_then(|m| m.get("action")));
        for action in actions {
            let Some(builder) = action
                .get("typed_config")
                .and_then(|c| c.get("bucket_id_builder"))
                .and_then(|b| b.get("bucket_id_builder"))
            else {
                continue;
            };
            let entries = builder
                .entries()
                .iter()
                .map(|(key, value)| (key.clone(), value.str("string_value").map(str::to_owned)))
                .collect();
            quota.buckets.push(QuotaBucket {
                place: self.place(builder),
                entries,
            });
        }
        quota
    }
}

/// A filter's config type and its config: `typed_config` (unwrapping a `TypedStruct`), or
/// the filter itself when it has none.
pub(super) fn typed(filter: &Node) -> (&str, Option<&Node>) {
    let Some(config) = filter.get("typed_config") else {
        return ("", None);
    };
    let kind = config.str("@type").unwrap_or_default();
    if kind.ends_with("TypedStruct") {
        let inner = config.str("type_url").unwrap_or_default();
        return (inner, config.get("value"));
    }
    (kind, Some(config))
}

/// A protobuf `Duration` in milliseconds: `"1.5s"` (its JSON form) or `{seconds, nanos}`.
pub(super) fn duration_ms(node: &Node) -> Option<u64> {
    if let Some(text) = node.text() {
        let seconds: f64 = text.strip_suffix('s')?.trim().parse().ok()?;
        if !(0.0..=1e12).contains(&seconds) {
            return None;
        }
        // Bounded above: the cast cannot overflow.
        return Some((seconds * 1000.0).round() as u64);
    }
    let seconds = node.u64("seconds").unwrap_or(0);
    let nanos = node.u64("nanos").unwrap_or(0);
    seconds.checked_mul(1000)?.checked_add(nanos / 1_000_000)
}

#[cfg(test)]
mod tests;
