//! A `RouteConfiguration`: virtual hosts, routes, their matches, clusters, `rate_limits`
//! and the rate limit filter's per-route config.

use super::super::matchers::{PathMatch, RouteMatch, full_match_regex};
use super::super::model::{
    Cluster, PerRoute, Route, RouteAction, RouteTable, VhRateLimits, VirtualHost,
};
use super::super::yaml::Node;
use super::{Parser, RATE_LIMIT_FILTER};

/// Route conditions this project does not evaluate.
const UNEVALUATED_CONDITIONS: &[&str] = &[
    "grpc",
    "runtime_fraction",
    "tls_context",
    "dynamic_metadata",
    "filter_state",
    "cel",
];

impl Parser<'_> {
    pub(super) fn route_table(&mut self, table: &Node) -> RouteTable {
        let hosts = table
            .get("virtual_hosts")
            .map(Node::items)
            .unwrap_or_default();
        RouteTable {
            name: table.str("name").unwrap_or_default().to_owned(),
            place: Some(self.place(table)),
            virtual_hosts: hosts.iter().map(|vh| self.virtual_host(vh)).collect(),
        }
    }

    fn virtual_host(&mut self, vh: &Node) -> VirtualHost {
        let domains = vh
            .get("domains")
            .map(Node::items)
            .unwrap_or_default()
            .iter()
            .filter_map(Node::text)
            .map(str::to_owned)
            .collect();
        let routes = vh.get("routes").map(Node::items).unwrap_or_default();
        VirtualHost {
            name: vh.str("name").unwrap_or_default().to_owned(),
            place: self.place(vh),
            domains,
            routes: routes.iter().map(|r| self.route(r)).collect(),
            rate_limits: self.policies(vh.get("rate_limits")),
            per_filter: self.per_filter(vh.get("typed_per_filter_config")),
        }
    }

    fn route(&mut self, route: &Node) -> Route {
        let matcher = self.route_match(route.get("match"));
        let name = route
            .str("name")
            .map(str::to_owned)
            .unwrap_or_else(|| matcher.label());
        let action = route.get("route").map(|action| RouteAction {
            cluster: cluster(action),
            rate_limits: self.policies(action.get("rate_limits")),
            include_vh_rate_limits: action.bool("include_vh_rate_limits").unwrap_or(false),
        });
        Route {
            name,
            place: self.place(route),
            matcher,
            action,
            per_filter: self.per_filter(route.get("typed_per_filter_config")),
            metadata: route
                .get("metadata")
                .and_then(|m| m.get("filter_metadata"))
                .cloned(),
        }
    }

    fn route_match(&mut self, node: Option<&Node>) -> RouteMatch {
        let empty = Node::with(super::super::yaml::Value::Map(Vec::new()), None);
        let node = node.unwrap_or(&empty);
        let path = if let Some(prefix) = node.str("prefix") {
            PathMatch::Prefix(prefix.to_owned())
        } else if let Some(path) = node.str("path") {
            PathMatch::Exact(path.to_owned())
        } else if let Some(regex) = node.get("safe_regex") {
            let pattern = regex.str("regex").unwrap_or_default();
            match full_match_regex(pattern) {
                Ok(regex) => PathMatch::Regex(regex),
                Err(problem) => {
                    let place = self.place(node);
                    self.unsupported(place, problem.clone());
                    PathMatch::Unsupported(problem)
                }
            }
        } else if let Some(prefix) = node.str("path_separated_prefix") {
            PathMatch::SeparatedPrefix(prefix.to_owned())
        } else {
            let what = ["connect_matcher", "path_match_policy"]
                .into_iter()
                .find(|f| node.get(f).is_some())
                .map_or_else(|| "a match without a path".to_owned(), |f| format!("`{f}`"));
            PathMatch::Unsupported(what)
        };
        let mut unsupported = Vec::new();
        for condition in UNEVALUATED_CONDITIONS {
            if let Some(field) = node.get(condition) {
                let place = self.place(field);
                self.unsupported(
                    place,
                    format!("route condition `{condition}`: not evaluated"),
                );
                unsupported.push(format!("`{condition}`"));
            }
        }
        if let PathMatch::Unsupported(what) = &path {
            let place = self.place(node);
            self.unsupported(place, format!("route match {what}: not evaluated"));
        }
        RouteMatch {
            path,
            case_sensitive: node.bool("case_sensitive").unwrap_or(true),
            headers: self.header_matchers(node.get("headers")),
            query_parameters: self.query_matchers(node.get("query_parameters")),
            unsupported,
        }
    }

    /// The rate limit filter's entry of a `typed_per_filter_config`.
    fn per_filter(&mut self, configs: Option<&Node>) -> Vec<(String, PerRoute)> {
        let mut out = Vec::new();
        for (name, config) in configs.map(Node::entries).unwrap_or_default() {
            let kind = config.str("@type").unwrap_or_default();
            // `FilterConfig` wraps a config (and can disable the filter on this route).
            let (kind, config) = if kind.ends_with("envoy.config.route.v3.FilterConfig") {
                if config.bool("disabled") == Some(true) {
                    let place = self.place(config);
                    self.unsupported(
                        place,
                        format!("`{name}` disabled on this route: taken as enabled"),
                    );
                }
                match config.get("config") {
                    Some(inner) => (inner.str("@type").unwrap_or_default(), inner),
                    None => continue,
                }
            } else {
                (kind, config)
            };
            let (kind, config) = if kind.ends_with("TypedStruct") {
                match config.get("value") {
                    Some(value) => (config.str("type_url").unwrap_or_default(), value),
                    None => continue,
                }
            } else {
                (kind, config)
            };
            // Looked up by the filter's name, as Envoy does; the type says it is ours.
            if name != RATE_LIMIT_FILTER && !kind.ends_with(".ratelimit.v3.RateLimitPerRoute") {
                continue;
            }
            let vh_rate_limits = match config.str("vh_rate_limits") {
                Some("INCLUDE") | Some("1") => VhRateLimits::Include,
                Some("IGNORE") | Some("2") => VhRateLimits::Ignore,
                _ => VhRateLimits::Override,
            };
            if let Some(node) = config.get("override_option") {
                let place = self.place(node);
                self.unsupported(place, "`override_option`: not evaluated");
            }
            out.push((
                name.clone(),
                PerRoute {
                    place: Some(self.place(config)),
                    rate_limits: self.policies(config.get("rate_limits")),
                    vh_rate_limits,
                    domain: config
                        .get("domain")
                        .and_then(|node| Some((node.text()?, node)))
                        .filter(|(d, _)| !d.is_empty())
                        .map(|(d, node)| (d.to_owned(), self.place(node))),
                },
            ));
        }
        out
    }
}

fn cluster(action: &Node) -> Cluster {
    if let Some(name) = action.str("cluster") {
        return Cluster::Named(name.to_owned());
    }
    if let Some(weighted) = action.get("weighted_clusters") {
        let names = weighted
            .get("clusters")
            .map(Node::items)
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c.str("name"))
            .map(str::to_owned)
            .collect();
        return Cluster::Weighted(names);
    }
    if let Some(header) = action.str("cluster_header") {
        return Cluster::FromHeader(header.to_ascii_lowercase());
    }
    Cluster::Other
}
