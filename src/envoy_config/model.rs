//! What this project reads of an Envoy config: the HTTP connection managers that run the
//! rate limit filter, their routes, and the `rate_limits` policies, each with its place.

use crate::config::Place;

use super::matchers::{HeaderMatcher, QueryParameterMatcher, RouteMatch};

/// Something of the Envoy config that is not evaluated: said, never ignored silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub place: Place,
    pub what: String,
}

/// The parts of one Envoy config file.
#[derive(Debug, Clone, Default)]
pub struct EnvoyConfig {
    /// The file, as given.
    pub file: String,
    /// `node.cluster` of the bootstrap: the value of `source_cluster` (Envoy's
    /// `--service-cluster` overrides it; empty when neither is set).
    pub local_cluster: String,
    /// Every HTTP connection manager found, in file order.
    pub managers: Vec<HttpManager>,
    /// What was found but is not evaluated.
    pub unsupported: Vec<Unsupported>,
}

/// One HTTP connection manager and its routes.
#[derive(Debug, Clone)]
pub struct HttpManager {
    /// The listener's `name` (or the manager's `stat_prefix` outside a listener).
    pub listener: String,
    pub place: Place,
    /// `use_remote_address`: the peer is the client; otherwise the last `x-forwarded-for`
    /// address (past `xff_num_trusted_hops`) is.
    pub use_remote_address: bool,
    pub xff_num_trusted_hops: u32,
    pub routes: Option<RouteTable>,
    /// The rate limit filters (`envoy.filters.http.ratelimit`), in chain order.
    pub filters: Vec<RateLimitFilter>,
    /// `rate_limit_quota` (RLQS) filters.
    pub quota_filters: Vec<QuotaFilter>,
}

/// A `rate_limit_quota` (RLQS) filter: its buckets count on the service's rules too.
#[derive(Debug, Clone)]
pub struct QuotaFilter {
    pub place: Place,
    pub domain: String,
    pub domain_place: Place,
    pub buckets: Vec<QuotaBucket>,
}

/// One `bucket_id_builder`: the bucket id's entries, each a fixed value (`string_value`) or
/// one taken from the request (`custom_value`, `None` here).
#[derive(Debug, Clone)]
pub struct QuotaBucket {
    pub place: Place,
    pub entries: Vec<(String, Option<String>)>,
}

/// A `RouteConfiguration`.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    pub name: String,
    pub place: Option<Place>,
    pub virtual_hosts: Vec<VirtualHost>,
}

#[derive(Debug, Clone)]
pub struct VirtualHost {
    pub name: String,
    pub place: Place,
    pub domains: Vec<String>,
    pub routes: Vec<Route>,
    pub rate_limits: Vec<RateLimitPolicy>,
    /// The rate limit filter's per-virtual-host config (`typed_per_filter_config`), by filter
    /// name.
    pub per_filter: Vec<(String, PerRoute)>,
}

#[derive(Debug, Clone)]
pub struct Route {
    /// The route's `name`, or its match as written.
    pub name: String,
    pub place: Place,
    pub matcher: RouteMatch,
    /// `route:` (a cluster); `None` for `redirect`, `direct_response` and the like, which the
    /// rate limit filter skips.
    pub action: Option<RouteAction>,
    pub per_filter: Vec<(String, PerRoute)>,
    /// `metadata.filter_metadata`: what the `metadata` action reads with `source:
    /// ROUTE_ENTRY`.
    pub metadata: Option<super::yaml::Node>,
}

/// A route's `route:` action.
#[derive(Debug, Clone)]
pub struct RouteAction {
    pub cluster: Cluster,
    pub rate_limits: Vec<RateLimitPolicy>,
    pub include_vh_rate_limits: bool,
}

/// Where a route sends a request: what `destination_cluster` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cluster {
    Named(String),
    /// `weighted_clusters`: one of these, chosen at random.
    Weighted(Vec<String>),
    /// `cluster_header`: the value of this request header.
    FromHeader(String),
    /// `cluster_specifier_plugin` and the like.
    Other,
}

/// The rate limit filter's config on a route or virtual host (`RateLimitPerRoute`).
#[derive(Debug, Clone, Default)]
pub struct PerRoute {
    pub place: Option<Place>,
    /// Non-empty: used instead of every other `rate_limits`.
    pub rate_limits: Vec<RateLimitPolicy>,
    pub vh_rate_limits: VhRateLimits,
    /// Replaces the filter's `domain`; with where it is set.
    pub domain: Option<(String, Place)>,
}

/// `RateLimitPerRoute.vh_rate_limits`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VhRateLimits {
    /// The virtual host's policies only when the route has none.
    #[default]
    Override,
    Include,
    Ignore,
}

/// An `envoy.filters.http.ratelimit` filter.
#[derive(Debug, Clone)]
pub struct RateLimitFilter {
    pub name: String,
    pub place: Place,
    pub domain: String,
    pub domain_place: Place,
    /// Route and virtual host policies of this stage apply.
    pub stage: u64,
    /// `failure_mode_deny` and where it is set (`None` when absent: false).
    pub failure_mode_deny: Option<(bool, Place)>,
    /// `timeout` in milliseconds and where it is set (`None`: Envoy's 20 ms).
    pub timeout_ms: Option<(u64, Place)>,
    /// The filter's own `rate_limits`, used when a route's per-filter config has none.
    pub rate_limits: Vec<RateLimitPolicy>,
}

/// One entry of a `rate_limits` list: its actions make one descriptor.
#[derive(Debug, Clone)]
pub struct RateLimitPolicy {
    pub place: Place,
    pub stage: u64,
    /// `disable_key`: a runtime key that can turn the policy off.
    pub disable_key: Option<String>,
    pub actions: Vec<Action>,
    pub hits_addend: Option<HitsAddend>,
    /// Sent once the response is done (its own call), not before the request goes on.
    pub apply_on_stream_done: bool,
    /// `limit: {dynamic_metadata: ...}`: an override read from dynamic metadata.
    pub limit_override: bool,
    /// `hits_addend.is_negative_hits`: the descriptor gives its hits back.
    pub negative_hits: bool,
}

/// `hits_addend`: the descriptor's cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HitsAddend {
    Number(u64),
    /// `%REQ(name)%`: a request header.
    RequestHeader(String),
    /// `%RESP(name)%`: a response header, known once the response is.
    ResponseHeader(String),
    /// Another substitution: not evaluated.
    Format(String),
}

/// One action of a policy, with where it is written.
#[derive(Debug, Clone)]
pub struct Action {
    pub place: Place,
    pub kind: ActionKind,
}

#[derive(Debug, Clone)]
pub enum ActionKind {
    SourceCluster,
    DestinationCluster,
    RequestHeaders {
        header_name: String,
        descriptor_key: String,
        skip_if_absent: bool,
    },
    QueryParameters {
        name: String,
        descriptor_key: String,
        skip_if_absent: bool,
    },
    RemoteAddress,
    MaskedRemoteAddress {
        v4_prefix_len: u8,
        v6_prefix_len: u8,
    },
    GenericKey {
        descriptor_key: String,
        descriptor_value: String,
    },
    HeaderValueMatch {
        descriptor_key: String,
        descriptor_value: String,
        expect_match: bool,
        headers: Vec<HeaderMatcher>,
    },
    QueryParameterValueMatch {
        descriptor_key: String,
        descriptor_value: String,
        expect_match: bool,
        parameters: Vec<QueryParameterMatcher>,
    },
    /// `metadata` (and the deprecated `dynamic_metadata`).
    Metadata {
        descriptor_key: String,
        /// `metadata_key.key`: the filter namespace.
        filter: String,
        /// `metadata_key.path`: the keys down to the value.
        path: Vec<String>,
        default_value: String,
        source: MetadataSource,
        skip_if_absent: bool,
    },
    /// An action this project does not evaluate (`extension`, or one it does not know).
    Unsupported(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataSource {
    /// The request's dynamic metadata (set by other filters at run time).
    Dynamic,
    /// The route's `metadata`.
    RouteEntry,
    /// The cluster's or its endpoints' metadata.
    Cluster,
}

impl ActionKind {
    /// The action's name in the config (`request_headers`, ...).
    pub fn name(&self) -> &str {
        match self {
            ActionKind::SourceCluster => "source_cluster",
            ActionKind::DestinationCluster => "destination_cluster",
            ActionKind::RequestHeaders { .. } => "request_headers",
            ActionKind::QueryParameters { .. } => "query_parameters",
            ActionKind::RemoteAddress => "remote_address",
            ActionKind::MaskedRemoteAddress { .. } => "masked_remote_address",
            ActionKind::GenericKey { .. } => "generic_key",
            ActionKind::HeaderValueMatch { .. } => "header_value_match",
            ActionKind::QueryParameterValueMatch { .. } => "query_parameter_value_match",
            ActionKind::Metadata { .. } => "metadata",
            ActionKind::Unsupported(name) => name,
        }
    }
}
