//! Istio EnvoyFilters: their structure (Istio's `networking.istio.io/v1alpha3` API), the
//! Envoy config they patch in, applied to a bootstrap shaped like an Istio ingress
//! gateway's, and the descriptors their rate-limit actions produce.

use serde_json::{Map, Value, json};

use super::manifests::{Doc, at, items, str_at};

const API_VERSION: &str = "networking.istio.io/v1alpha3";
const APPLY_TO: &[&str] = &[
    "LISTENER",
    "FILTER_CHAIN",
    "NETWORK_FILTER",
    "HTTP_FILTER",
    "ROUTE_CONFIGURATION",
    "VIRTUAL_HOST",
    "HTTP_ROUTE",
    "CLUSTER",
    "EXTENSION_CONFIG",
    "BOOTSTRAP",
    "LISTENER_FILTER",
];
const CONTEXTS: &[&str] = &["ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY"];
const OPERATIONS: &[&str] = &[
    "MERGE",
    "ADD",
    "REMOVE",
    "INSERT_BEFORE",
    "INSERT_AFTER",
    "INSERT_FIRST",
    "REPLACE",
];
const ROUTE_ACTIONS: &[&str] = &["ANY", "ROUTE", "REDIRECT", "DIRECT_RESPONSE"];
const FILTER_CLASSES: &[&str] = &["UNSPECIFIED", "AUTHN", "AUTHZ", "STATS"];

/// The names Istio gives the gateway's HTTP connection manager and router filters.
pub const HCM: &str = "envoy.filters.network.http_connection_manager";
pub const ROUTER: &str = "envoy.filters.http.router";
const RATELIMIT_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";

/// Everything wrong with an EnvoyFilter's structure (empty if nothing): the fields Istio's
/// API has, at each level, with values from its enums, and a match that fits `applyTo`.
pub fn problems(doc: &Value) -> Vec<String> {
    let mut p = Problems::default();
    p.check(
        str_at(doc, "apiVersion") == Some(API_VERSION),
        format!("apiVersion must be {API_VERSION}"),
    );
    p.check(
        str_at(doc, "kind") == Some("EnvoyFilter"),
        "kind must be EnvoyFilter",
    );
    p.check(
        str_at(doc, "metadata.name").is_some_and(|n| !n.is_empty()),
        "metadata.name is missing",
    );
    p.keys(
        doc,
        "spec",
        &[
            "workloadSelector",
            "configPatches",
            "priority",
            "targetRefs",
        ],
    );
    p.keys(doc, "spec.workloadSelector", &["labels"]);
    let patches = items(doc, "spec.configPatches");
    p.check(!patches.is_empty(), "spec.configPatches is empty");
    for (i, patch) in patches.iter().enumerate() {
        let mut q = Problems::default();
        q.patch(patch);
        p.0.extend(
            q.0.into_iter()
                .map(|m| format!("spec.configPatches[{i}]: {m}")),
        );
    }
    p.0
}

#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn check(&mut self, ok: bool, message: impl Into<String>) {
        if !ok {
            self.0.push(message.into());
        }
    }

    /// The value at `path`, if any, is an object with only `allowed` keys.
    fn keys(&mut self, value: &Value, path: &str, allowed: &[&str]) {
        let Some(found) = at(value, path) else {
            return;
        };
        let place = if path.is_empty() { "the patch" } else { path };
        let Some(map) = found.as_object() else {
            self.0.push(format!("{place} must be an object"));
            return;
        };
        for key in map.keys().filter(|k| !allowed.contains(&k.as_str())) {
            self.0.push(format!(
                "{place}: unknown field {key:?} (allowed: {allowed:?})"
            ));
        }
    }

    fn one_of(&mut self, value: &Value, path: &str, allowed: &[&str], required: bool) {
        match at(value, path) {
            None if !required => {}
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => {}
            found => self
                .0
                .push(format!("{path} is {found:?}, must be one of {allowed:?}")),
        }
    }

    fn patch(&mut self, patch: &Value) {
        self.keys(patch, "", &["applyTo", "match", "patch"]);
        self.one_of(patch, "applyTo", APPLY_TO, true);
        self.keys(
            patch,
            "match",
            &[
                "context",
                "proxy",
                "listener",
                "routeConfiguration",
                "cluster",
            ],
        );
        self.one_of(patch, "match.context", CONTEXTS, false);
        self.keys(patch, "match.proxy", &["proxyVersion", "metadata"]);
        self.keys(
            patch,
            "match.listener",
            &[
                "portNumber",
                "portName",
                "filterChain",
                "listenerFilter",
                "name",
            ],
        );
        self.keys(
            patch,
            "match.listener.filterChain",
            &[
                "name",
                "sni",
                "transportProtocol",
                "applicationProtocols",
                "filter",
                "destinationPort",
            ],
        );
        self.keys(
            patch,
            "match.listener.filterChain.filter",
            &["name", "subFilter"],
        );
        self.keys(
            patch,
            "match.listener.filterChain.filter.subFilter",
            &["name"],
        );
        self.keys(
            patch,
            "match.routeConfiguration",
            &["portNumber", "portName", "gateway", "vhost", "name"],
        );
        self.keys(
            patch,
            "match.routeConfiguration.vhost",
            &["name", "domainName", "route"],
        );
        self.keys(
            patch,
            "match.routeConfiguration.vhost.route",
            &["name", "action"],
        );
        self.one_of(
            patch,
            "match.routeConfiguration.vhost.route.action",
            ROUTE_ACTIONS,
            false,
        );
        self.keys(
            patch,
            "match.cluster",
            &["portNumber", "service", "subset", "name"],
        );
        self.keys(patch, "patch", &["operation", "value", "filterClass"]);
        self.one_of(patch, "patch.operation", OPERATIONS, true);
        self.one_of(patch, "patch.filterClass", FILTER_CLASSES, false);

        // Istio rejects a match on another kind of object than the one patched.
        let apply_to = str_at(patch, "applyTo").unwrap_or("");
        let wanted = match apply_to {
            "LISTENER" | "FILTER_CHAIN" | "NETWORK_FILTER" | "HTTP_FILTER" | "LISTENER_FILTER" => {
                Some("listener")
            }
            "ROUTE_CONFIGURATION" | "VIRTUAL_HOST" | "HTTP_ROUTE" => Some("routeConfiguration"),
            "CLUSTER" => Some("cluster"),
            _ => None,
        };
        for object in ["listener", "routeConfiguration", "cluster"] {
            self.check(
                at(patch, &format!("match.{object}")).is_none() || wanted == Some(object),
                format!("applyTo {apply_to} cannot match a {object}"),
            );
        }

        let operation = str_at(patch, "patch.operation").unwrap_or("");
        let value = at(patch, "patch.value");
        self.check(
            operation == "REMOVE" || value.is_some_and(Value::is_object),
            format!("patch.value (an object) is required for {operation}"),
        );
        if apply_to == "HTTP_FILTER" && operation != "REMOVE" {
            self.check(
                str_at(patch, "patch.value.name").is_some_and(|n| !n.is_empty()),
                "an HTTP filter needs patch.value.name",
            );
            self.check(
                str_at(patch, "patch.value.typed_config.@type").is_some(),
                "an HTTP filter needs patch.value.typed_config with an @type",
            );
            if matches!(operation, "INSERT_BEFORE" | "INSERT_AFTER") {
                self.check(
                    str_at(patch, "match.listener.filterChain.filter.subFilter.name").is_some(),
                    format!("{operation} of an HTTP filter needs match.listener.filterChain.filter.subFilter.name"),
                );
            }
        }
    }
}

/// The typed_config of every ratelimit HTTP filter the EnvoyFilters insert.
pub fn ratelimit_configs(filters: &[&Doc]) -> Vec<Value> {
    filters
        .iter()
        .flat_map(|d| items(&d.value, "spec.configPatches"))
        .filter(|p| str_at(p, "applyTo") == Some("HTTP_FILTER"))
        .filter_map(|p| at(p, "patch.value.typed_config"))
        .filter(|c| str_at(c, "@type") == Some(RATELIMIT_TYPE))
        .cloned()
        .collect()
}

/// A bootstrap shaped like the part of an Istio ingress gateway's config the patches
/// touch — an HTTP connection manager named [`HCM`] whose filters end with [`ROUTER`], a
/// route configuration with one virtual host `vhost_name` routing everything upstream —
/// with every patch of `filters` applied, and a STATIC HTTP/2 cluster for each gRPC
/// cluster the ratelimit filters name (Istio's own `outbound|...` cluster in a mesh).
///
/// Ports are those of the `envoy/` examples (listener 10000, upstream 10001, admin 9901, the
/// service 8081), which `support::Envoy::start` rewrites to free ones. Errors if a patch matches nothing here or does
/// something this emulation of Istio does not do.
pub fn gateway_bootstrap(filters: &[&Doc], vhost_name: &str) -> Result<Value, String> {
    let mut hcm = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "gateway",
        "codec_type": "AUTO",
        "route_config": {
            "name": "http.8080",
            "virtual_hosts": [{
                "name": vhost_name,
                "domains": ["*"],
                "routes": [{
                    "name": "demo",
                    "match": { "prefix": "/" },
                    "route": { "cluster": "upstream" }
                }]
            }]
        },
        "http_filters": [{
            "name": ROUTER,
            "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" }
        }]
    });

    for doc in filters {
        for (i, patch) in items(&doc.value, "spec.configPatches").iter().enumerate() {
            let applied =
                apply(&mut hcm, patch).map_err(|e| format!("{} patch {i}: {e}", doc.describe()))?;
            if applied == 0 {
                return Err(format!(
                    "{} patch {i} matches nothing in a gateway bootstrap (HTTP connection manager \
                     {HCM}, filters ending with {ROUTER}, virtual host {vhost_name:?})",
                    doc.describe()
                ));
            }
        }
    }

    let mut clusters = vec![static_cluster("upstream", 10001, false)];
    for config in ratelimit_configs(filters) {
        let name = str_at(
            &config,
            "rate_limit_service.grpc_service.envoy_grpc.cluster_name",
        )
        .ok_or(
            "a ratelimit filter without rate_limit_service.grpc_service.envoy_grpc.cluster_name",
        )?;
        clusters.push(static_cluster(name, 8081, true));
    }

    Ok(json!({
        "admin": { "address": socket(9901) },
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": socket(10000),
                    "filter_chains": [{ "filters": [{ "name": HCM, "typed_config": hcm }] }]
                },
                {
                    // Stand-in for the demo backend: always 200 "ok".
                    "name": "upstream",
                    "address": socket(10001),
                    "filter_chains": [{ "filters": [{
                        "name": HCM,
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                            "stat_prefix": "upstream",
                            "route_config": {
                                "virtual_hosts": [{
                                    "name": "all",
                                    "domains": ["*"],
                                    "routes": [{
                                        "match": { "prefix": "/" },
                                        "direct_response": { "status": 200, "body": { "inline_string": "ok" } }
                                    }]
                                }]
                            },
                            "http_filters": [{
                                "name": ROUTER,
                                "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" }
                            }]
                        }
                    }] }]
                }
            ],
            "clusters": clusters
        }
    }))
}

/// The bootstrap as YAML text for Envoy (JSON is YAML). `port_value` keys are left unquoted
/// (still YAML) because `support::Envoy::start` finds the ports to rewrite by `port_value:`.
pub fn bootstrap_text(bootstrap: &Value) -> String {
    serde_json::to_string_pretty(bootstrap)
        .expect("serialise the bootstrap")
        .replace("\"port_value\":", "port_value:")
}

fn socket(port: u16) -> Value {
    json!({ "socket_address": { "address": "127.0.0.1", "port_value": port } })
}

fn static_cluster(name: &str, port: u16, http2: bool) -> Value {
    let mut cluster = json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": socket(port) } }] }]
        }
    });
    if http2 {
        cluster["typed_extension_protocol_options"] = json!({
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": { "http2_protocol_options": {} }
            }
        });
    }
    cluster
}

/// Applies one config patch to the gateway's HTTP connection manager config as Istio
/// would; how many objects it changed.
fn apply(hcm: &mut Value, patch: &Value) -> Result<usize, String> {
    let context = str_at(patch, "match.context").unwrap_or("ANY");
    if !matches!(context, "ANY" | "GATEWAY") {
        return Ok(0);
    }
    let operation = str_at(patch, "patch.operation").unwrap_or("");
    let value = at(patch, "patch.value").cloned().unwrap_or(Value::Null);
    match str_at(patch, "applyTo").unwrap_or("") {
        "HTTP_FILTER" => {
            if let Some(name) = str_at(patch, "match.listener.filterChain.filter.name")
                && name != HCM
            {
                return Ok(0);
            }
            let filters = hcm["http_filters"]
                .as_array_mut()
                .expect("http_filters is an array");
            let sub = str_at(patch, "match.listener.filterChain.filter.subFilter.name");
            let position = sub.map(|s| filters.iter().position(|f| f["name"] == s));
            match (operation, position) {
                (_, Some(None)) => Ok(0),
                ("INSERT_FIRST", _) => {
                    filters.insert(0, value);
                    Ok(1)
                }
                ("INSERT_BEFORE", Some(Some(i))) => {
                    filters.insert(i, value);
                    Ok(1)
                }
                ("INSERT_AFTER", Some(Some(i))) => {
                    filters.insert(i + 1, value);
                    Ok(1)
                }
                _ => Err(format!(
                    "HTTP_FILTER {operation} (subFilter {sub:?}) is not emulated here"
                )),
            }
        }
        "VIRTUAL_HOST" | "HTTP_ROUTE" => {
            let vhost_name = str_at(patch, "match.routeConfiguration.vhost.name").unwrap_or("");
            let route_name = str_at(patch, "match.routeConfiguration.vhost.route.name");
            if operation != "MERGE" {
                return Err(format!(
                    "{operation} of a virtual host or route is not emulated here"
                ));
            }
            let mut applied = 0;
            let vhosts = hcm["route_config"]["virtual_hosts"]
                .as_array_mut()
                .expect("virtual_hosts is an array");
            for vhost in vhosts
                .iter_mut()
                .filter(|v| vhost_name.is_empty() || v["name"] == vhost_name)
            {
                if str_at(patch, "applyTo") == Some("VIRTUAL_HOST") {
                    merge(vhost, &value);
                    applied += 1;
                    continue;
                }
                let routes = vhost["routes"].as_array_mut().expect("routes is an array");
                for route in routes
                    .iter_mut()
                    .filter(|r| route_name.is_none_or(|n| r["name"] == n))
                {
                    merge(route, &value);
                    applied += 1;
                }
            }
            Ok(applied)
        }
        other => Err(format!("applyTo {other} is not emulated here")),
    }
}

/// Protobuf's MergeFrom on JSON: messages merge field by field, repeated fields append,
/// scalars are replaced — what Istio's MERGE does.
fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                match into.get_mut(key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        into.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(into), Value::Array(from)) => into.extend(from.iter().cloned()),
        (into, from) => *into = from.clone(),
    }
}

/// One entry of a request descriptor as a rate-limit action makes it: its key, and its
/// value when the action fixes it (None: taken from the request at run time).
pub type Entry = (String, Option<String>);

/// The descriptors (one per `rate_limits` element) the EnvoyFilters' route and virtual
/// host actions produce.
pub fn descriptors(filters: &[&Doc]) -> Result<Vec<Vec<Entry>>, String> {
    let mut out = Vec::new();
    for doc in filters {
        for patch in items(&doc.value, "spec.configPatches") {
            for limit in items(patch, "patch.value.rate_limits") {
                let entries = items(limit, "actions")
                    .iter()
                    .map(action_entry)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{}: {e}", doc.describe()))?;
                out.push(entries);
            }
        }
    }
    Ok(out)
}

fn action_entry(action: &Value) -> Result<Entry, String> {
    let map: &Map<String, Value> = action.as_object().ok_or("an action is not an object")?;
    let (kind, body) = map
        .iter()
        .next()
        .filter(|_| map.len() == 1)
        .ok_or_else(|| format!("an action must have exactly one field: {action}"))?;
    let field = |name: &str| str_at(body, name).map(str::to_string);
    let entry = match kind.as_str() {
        "generic_key" => (
            field("descriptor_key").unwrap_or_else(|| "generic_key".into()),
            field("descriptor_value"),
        ),
        "header_value_match" => (
            field("descriptor_key").unwrap_or_else(|| "header_match".into()),
            field("descriptor_value"),
        ),
        "remote_address" => ("remote_address".into(), None),
        "source_cluster" => ("source_cluster".into(), None),
        "destination_cluster" => ("destination_cluster".into(), None),
        "request_headers" => (
            field("descriptor_key").ok_or("request_headers without descriptor_key")?,
            None,
        ),
        other => return Err(format!("action {other} is not understood here")),
    };
    Ok(entry)
}

/// Whether a descriptor can reach a limit of the limits file `limits` (its YAML as a
/// value): walking the descriptor tree as the service does, each entry takes a node of
/// its key whose value matches (fixed values) or any node of its key (run-time values),
/// and the node of the last entry has a `rate_limit`.
pub fn reaches_a_limit(limits: &Value, descriptor: &[Entry]) -> bool {
    fn walk(nodes: &[Value], rest: &[Entry]) -> bool {
        let Some(((key, value), rest)) = rest.split_first() else {
            return false;
        };
        nodes
            .iter()
            .filter(|n| str_at(n, "key") == Some(key.as_str()))
            .filter(|n| match (str_at(n, "value"), value) {
                (Some(pattern), Some(value)) => glob(pattern, value),
                _ => true,
            })
            .any(|n| {
                if rest.is_empty() {
                    at(n, "rate_limit").is_some()
                } else {
                    walk(items(n, "descriptors"), rest)
                }
            })
    }
    walk(items(limits, "descriptors"), descriptor)
}

/// `*` matches any run of characters, as in the limits' wildcard values.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.starts_with(head)
                && (0..=text.len() - head.len())
                    .filter(|&i| text.is_char_boundary(head.len() + i))
                    .any(|i| glob(tail, &text[head.len() + i..]))
        }
    }
}
