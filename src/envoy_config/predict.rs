//! The descriptors an Envoy config sends for one request, as its rate limit filter picks
//! them (`Filter::populateRateLimitDescriptors`): the virtual host and route the request
//! matches; then the `rate_limits` of the filter's per-route config if it has any, else the
//! filter's own, else the route's of the filter's stage with the virtual host's (included,
//! ignored, or used when the route has none); each policy evaluated before the request goes
//! on, or once the stream is done.

use super::evaluate::{Context, Outcome, evaluate};
use super::matchers::Matched;
use super::model::{
    EnvoyConfig, HttpManager, PerRoute, RateLimitFilter, RateLimitPolicy, Route, VhRateLimits,
    VirtualHost,
};
use super::request::HttpRequest;

/// Where the policies of a prediction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The filter's config on the route or virtual host (`RateLimitPerRoute`).
    PerRoute,
    /// The filter's own `rate_limits`.
    Filter,
    Route,
    VirtualHost,
}

impl Origin {
    pub fn name(self) -> &'static str {
        match self {
            Origin::PerRoute => "the filter's per-route config",
            Origin::Filter => "the filter's own rate_limits",
            Origin::Route => "the route",
            Origin::VirtualHost => "the virtual host",
        }
    }
}

/// One policy evaluated.
#[derive(Debug, Clone)]
pub struct Evaluated<'c> {
    pub policy: &'c RateLimitPolicy,
    pub origin: Origin,
    pub outcome: Outcome,
}

/// How the request met the routes.
#[derive(Debug, Clone)]
pub enum Routing<'c> {
    NoRoutes,
    NoVirtualHost,
    NoRoute(&'c VirtualHost),
    /// The route, and conditions of its match that were not evaluated.
    Route(&'c VirtualHost, &'c Route, Vec<String>),
}

/// What one rate limit filter does with the request.
#[derive(Debug, Clone)]
pub struct Prediction<'c> {
    pub manager: &'c HttpManager,
    /// `None` for a route configuration alone (no filter in the file).
    pub filter: Option<&'c RateLimitFilter>,
    pub domain: String,
    pub routing: Routing<'c>,
    /// Why no policy applies, when none does.
    pub why_none: Option<String>,
    /// Policies evaluated before the request goes on (one call with every descriptor sent).
    pub request: Vec<Evaluated<'c>>,
    /// Policies evaluated once the stream is done (a second call).
    pub stream_done: Vec<Evaluated<'c>>,
}

/// The predictions for `request`: one per rate limit filter of every connection manager
/// (`listener`: only that listener's), or one per route configuration given alone, in the
/// domain `domain`.
pub fn predict<'c>(
    config: &'c EnvoyConfig,
    request: &HttpRequest,
    response_headers: &[(String, String)],
    listener: Option<&str>,
    domain: Option<&str>,
) -> Vec<Prediction<'c>> {
    let mut out = Vec::new();
    for manager in &config.managers {
        if listener.is_some_and(|l| l != manager.listener) {
            continue;
        }
        let mut request = request.clone();
        let client =
            request.client_address(manager.use_remote_address, manager.xff_num_trusted_hops);
        if manager.use_remote_address {
            request.append_header("x-forwarded-for", &request.peer.to_string());
        }
        let filters: Vec<Option<&RateLimitFilter>> = if manager.filters.is_empty() {
            if manager.quota_filters.is_empty() && manager.routes.is_some() && domain.is_some() {
                vec![None]
            } else {
                Vec::new()
            }
        } else {
            manager.filters.iter().map(Some).collect()
        };
        for filter in filters {
            out.push(one(
                config,
                manager,
                filter,
                &request,
                client,
                response_headers,
                domain,
            ));
        }
    }
    out
}

fn one<'c>(
    config: &'c EnvoyConfig,
    manager: &'c HttpManager,
    filter: Option<&'c RateLimitFilter>,
    request: &HttpRequest,
    client: std::net::IpAddr,
    response_headers: &[(String, String)],
    domain: Option<&str>,
) -> Prediction<'c> {
    let filter_domain = filter.map(|f| f.domain.clone());
    let mut prediction = Prediction {
        manager,
        filter,
        domain: domain
            .map(str::to_owned)
            .or(filter_domain)
            .unwrap_or_default(),
        routing: routing(manager, request),
        why_none: None,
        request: Vec::new(),
        stream_done: Vec::new(),
    };
    let Routing::Route(vh, route, _) = prediction.routing.clone() else {
        prediction.why_none = Some("no route: Envoy does not call the service".into());
        return prediction;
    };
    let Some(action) = &route.action else {
        prediction.why_none = Some(
            "the route has no `route` action (a redirect or direct response): the filter skips it"
                .into(),
        );
        return prediction;
    };
    let name = filter.map_or(super::parse::RATE_LIMIT_FILTER, |f| f.name.as_str());
    let per_route = most_specific(name, route, vh);
    if let Some((domain, _)) = per_route.and_then(|p| p.domain.as_ref()) {
        prediction.domain.clone_from(domain);
    }
    let stage = filter.map_or(0, |f| f.stage);
    let mut chosen: Vec<(&RateLimitPolicy, Origin)> = Vec::new();
    if let Some(per_route) = per_route.filter(|p| !p.rate_limits.is_empty()) {
        chosen.extend(per_route.rate_limits.iter().map(|p| (p, Origin::PerRoute)));
    } else if let Some(filter) = filter.filter(|f| !f.rate_limits.is_empty()) {
        chosen.extend(filter.rate_limits.iter().map(|p| (p, Origin::Filter)));
    } else {
        let of_stage = |policies: &'c [RateLimitPolicy], origin| {
            policies
                .iter()
                .filter(move |p| p.stage == stage)
                .map(move |p| (p, origin))
        };
        chosen.extend(of_stage(&action.rate_limits, Origin::Route));
        let vh_option = if action.include_vh_rate_limits {
            VhRateLimits::Include
        } else {
            per_route.map_or(VhRateLimits::Override, |p| p.vh_rate_limits)
        };
        let with_vh = match vh_option {
            VhRateLimits::Include => true,
            VhRateLimits::Ignore => false,
            VhRateLimits::Override => action.rate_limits.is_empty(),
        };
        if with_vh {
            chosen.extend(of_stage(&vh.rate_limits, Origin::VirtualHost));
        }
    }
    if chosen.is_empty() {
        prediction.why_none = Some(format!(
            "no rate_limits apply to this route (stage {stage}): Envoy does not call the service"
        ));
    }
    for (policy, origin) in chosen {
        let cx = Context {
            request,
            client,
            local_cluster: &config.local_cluster,
            cluster: Some(&action.cluster),
            route_metadata: route.metadata.as_ref(),
            response_headers,
            on_stream_done: policy.apply_on_stream_done,
        };
        let evaluated = Evaluated {
            policy,
            origin,
            outcome: evaluate(policy, &cx),
        };
        if policy.apply_on_stream_done {
            prediction.stream_done.push(evaluated);
        } else {
            prediction.request.push(evaluated);
        }
    }
    prediction
}

/// The filter's config on the route, else on its virtual host.
fn most_specific<'c>(name: &str, route: &'c Route, vh: &'c VirtualHost) -> Option<&'c PerRoute> {
    let find =
        |list: &'c [(String, PerRoute)]| list.iter().find(|(n, _)| n == name).map(|(_, p)| p);
    find(&route.per_filter).or_else(|| find(&vh.per_filter))
}

/// The virtual host for the request's authority, then its first route that matches.
fn routing<'c>(manager: &'c HttpManager, request: &HttpRequest) -> Routing<'c> {
    let Some(table) = &manager.routes else {
        return Routing::NoRoutes;
    };
    let Some(vh) = virtual_host(&table.virtual_hosts, &request.authority) else {
        return Routing::NoVirtualHost;
    };
    for route in &vh.routes {
        match route.matcher.matches(request) {
            Matched::Yes => return Routing::Route(vh, route, Vec::new()),
            Matched::Unknown(unknown) => return Routing::Route(vh, route, unknown),
            Matched::No => {}
        }
    }
    Routing::NoRoute(vh)
}

/// Envoy's virtual host choice: an exact domain, else the longest `*suffix`, else the longest
/// `prefix*`, else `*` (domains and the authority compared without case).
fn virtual_host<'c>(hosts: &'c [VirtualHost], authority: &str) -> Option<&'c VirtualHost> {
    let host = authority.to_ascii_lowercase();
    let domains = || {
        hosts
            .iter()
            .flat_map(|vh| vh.domains.iter().map(move |d| (d.to_ascii_lowercase(), vh)))
    };
    if let Some((_, vh)) = domains().find(|(d, _)| *d == host) {
        return Some(vh);
    }
    let suffix = domains()
        .filter_map(|(d, vh)| {
            let rest = d.strip_prefix('*')?;
            (!rest.is_empty() && host.len() > rest.len() && host.ends_with(rest))
                .then_some((rest.len(), vh))
        })
        .max_by_key(|(len, _)| *len);
    if let Some((_, vh)) = suffix {
        return Some(vh);
    }
    let prefix = domains()
        .filter_map(|(d, vh)| {
            let start = d.strip_suffix('*')?;
            (!start.is_empty() && host.len() > start.len() && host.starts_with(start))
                .then_some((start.len(), vh))
        })
        .max_by_key(|(len, _)| *len);
    if let Some((_, vh)) = prefix {
        return Some(vh);
    }
    domains().find(|(d, _)| d == "*").map(|(_, vh)| vh)
}

impl Prediction<'_> {
    /// The descriptors of the request-time call, in the order Envoy sends them.
    pub fn request_descriptors(&self) -> Vec<&super::evaluate::Descriptor> {
        sent(&self.request)
    }

    /// The descriptors of the call made once the stream is done.
    pub fn stream_done_descriptors(&self) -> Vec<&super::evaluate::Descriptor> {
        sent(&self.stream_done)
    }

    /// Whether any policy was not evaluated: the call is then not fully predicted.
    pub fn is_uncertain(&self) -> bool {
        let route_unknown =
            matches!(&self.routing, Routing::Route(_, _, unknown) if !unknown.is_empty());
        route_unknown
            || self
                .request
                .iter()
                .chain(&self.stream_done)
                .any(|e| matches!(e.outcome, Outcome::Unknown { .. }))
    }
}

fn sent<'a>(evaluated: &'a [Evaluated<'_>]) -> Vec<&'a super::evaluate::Descriptor> {
    evaluated
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::Sent(descriptor) => Some(descriptor),
            Outcome::NotSent { .. } | Outcome::Unknown { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
