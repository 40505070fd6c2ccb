use super::super::model::{ActionKind, Cluster, HitsAddend, VhRateLimits};
use super::*;

const BOOTSTRAP: &str = "\
node: {cluster: edge}
static_resources:
  listeners:
    - name: ingress
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                use_remote_address: true
                xff_num_trusted_hops: 1
                route_config:
                  name: local
                  virtual_hosts:
                    - name: all
                      domains: [\"*\"]
                      rate_limits:
                        - actions: [{remote_address: {}}]
                      routes:
                        - match: {prefix: /a}
                          route:
                            weighted_clusters: {clusters: [{name: x, weight: 1}, {name: y, weight: 1}]}
                            include_vh_rate_limits: true
                            rate_limits:
                              - stage: 1
                                actions:
                                  - header_value_match:
                                      descriptor_value: gold
                                      expect_match: false
                                      headers: [{name: X-Plan, string_match: {exact: gold}}]
                                  - masked_remote_address: {v4_prefix_mask_len: 24}
                                  - extension: {name: custom}
                                hits_addend: {format: \"%REQ(x-cost)%\", is_negative_hits: true}
                                apply_on_stream_done: true
                        - match: {path: /b}
                          route: {cluster_header: X-Cluster}
                          typed_per_filter_config:
                            envoy.filters.http.ratelimit:
                              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                              vh_rate_limits: INCLUDE
                              domain: other
                        - match: {prefix: /, grpc: {}}
                          direct_response: {status: 200}
                http_filters:
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: edge
                      stage: 1
                      timeout: 0.25s
                      failure_mode_deny: true
                  - name: envoy.filters.http.router
";

#[test]
fn a_bootstrap_is_read_with_its_places() {
    let doc = Document::parse("envoy.yaml", BOOTSTRAP).expect("yaml");
    let config = parse(&doc);
    assert_eq!(config.local_cluster, "edge");
    assert_eq!(config.managers.len(), 1);
    let manager = &config.managers[0];
    assert_eq!(manager.listener, "ingress");
    assert!(manager.use_remote_address);
    assert_eq!(manager.xff_num_trusted_hops, 1);
    let filter = &manager.filters[0];
    assert_eq!(filter.domain, "edge");
    assert_eq!(filter.domain_place.to_string(), "envoy.yaml:48");
    assert_eq!(filter.stage, 1);
    assert_eq!(filter.timeout_ms.as_ref().map(|t| t.0), Some(250));
    assert_eq!(filter.failure_mode_deny.as_ref().map(|f| f.0), Some(true));

    let vh = &manager.routes.as_ref().expect("routes").virtual_hosts[0];
    assert_eq!(vh.rate_limits.len(), 1);
    let a = &vh.routes[0];
    let action = a.action.as_ref().expect("a route");
    assert_eq!(
        action.cluster,
        Cluster::Weighted(vec!["x".into(), "y".into()])
    );
    assert!(action.include_vh_rate_limits);
    let policy = &action.rate_limits[0];
    assert_eq!(
        (
            policy.stage,
            policy.apply_on_stream_done,
            policy.negative_hits
        ),
        (1, true, true)
    );
    assert_eq!(
        policy.hits_addend,
        Some(HitsAddend::RequestHeader("x-cost".into()))
    );
    assert_eq!(policy.place.to_string(), "envoy.yaml:25");
    let kinds: Vec<&str> = policy.actions.iter().map(|a| a.kind.name()).collect();
    assert_eq!(
        kinds,
        ["header_value_match", "masked_remote_address", "extension"]
    );
    match &policy.actions[0].kind {
        ActionKind::HeaderValueMatch {
            descriptor_key,
            expect_match,
            headers,
            ..
        } => {
            assert_eq!(descriptor_key, "header_match", "the default key");
            assert!(!expect_match);
            assert_eq!(headers[0].name, "x-plan", "header names are lower-case");
        }
        other => panic!("{other:?}"),
    }
    let b = &vh.routes[1];
    assert_eq!(
        b.action.as_ref().map(|a| &a.cluster),
        Some(&Cluster::FromHeader("x-cluster".into()))
    );
    let (name, per_route) = &b.per_filter[0];
    assert_eq!(name, "envoy.filters.http.ratelimit");
    assert_eq!(per_route.vh_rate_limits, VhRateLimits::Include);
    let (domain, place) = per_route.domain.as_ref().expect("a domain");
    assert_eq!(
        (domain.as_str(), place.to_string().as_str()),
        ("other", "envoy.yaml:41")
    );
    assert!(vh.routes[2].action.is_none(), "a direct response");

    // Not evaluated, and said: the extension action and the grpc route condition.
    let unsupported: Vec<String> = config
        .unsupported
        .iter()
        .map(|u| format!("{}: {}", u.place, u.what))
        .collect();
    assert!(
        unsupported
            .iter()
            .any(|u| u.starts_with("envoy.yaml:32: rate limit action `extension`")),
        "{unsupported:#?}"
    );
    assert!(
        unsupported
            .iter()
            .any(|u| u.contains("route condition `grpc`")),
        "{unsupported:#?}"
    );
}

#[test]
fn a_config_dump_resolves_rds_by_name() {
    let dump = "\
configs:
  - \"@type\": type.googleapis.com/envoy.admin.v3.ListenersConfigDump
    dynamic_listeners:
      - name: l
        active_state:
          listener:
            name: l
            filter_chains:
              - filters:
                  - name: envoy.filters.network.http_connection_manager
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                      rds: {route_config_name: r1}
                      http_filters:
                        - name: envoy.filters.http.ratelimit
                          typed_config:
                            \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct
                            type_url: type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                            value: {domain: d}
                        - name: other
  - \"@type\": type.googleapis.com/envoy.admin.v3.RoutesConfigDump
    dynamic_route_configs:
      - route_config:
          name: r1
          virtual_hosts: [{name: v, domains: ['*'], routes: [{match: {prefix: /}, route: {cluster: c}}]}]
";
    let config = parse(&Document::parse("dump.yaml", dump).expect("yaml"));
    assert_eq!(config.managers.len(), 1);
    let manager = &config.managers[0];
    assert_eq!(manager.filters[0].domain, "d", "a TypedStruct's value");
    assert_eq!(manager.routes.as_ref().map(|r| r.name.as_str()), Some("r1"));

    let unresolved = dump.replace("route_config_name: r1", "route_config_name: r2");
    let config = parse(&Document::parse("dump.yaml", &unresolved).expect("yaml"));
    assert!(config.managers[0].routes.is_none());
    assert!(
        config
            .unsupported
            .iter()
            .any(|u| u.what.contains("RDS (`r2`)")),
        "{:?}",
        config.unsupported
    );
}

#[test]
fn a_route_configuration_alone_and_an_unknown_shape() {
    let routes = "name: rc\nvirtual_hosts: [{name: v, domains: ['*'], routes: []}]\n";
    let config = parse(&Document::parse("rc.yaml", routes).expect("yaml"));
    assert_eq!(config.managers.len(), 1);
    assert!(config.managers[0].filters.is_empty());
    let config = parse(&Document::parse("x.yaml", "foo: 1\n").expect("yaml"));
    assert!(config.managers.is_empty());
    assert_eq!(config.unsupported.len(), 1);
}

#[test]
fn durations() {
    let node = |text: &str| Document::parse("d", text).expect("yaml").root;
    assert_eq!(duration_ms(&node("1s")), Some(1000));
    assert_eq!(duration_ms(&node("0.02s")), Some(20));
    assert_eq!(
        duration_ms(&node("{seconds: 2, nanos: 500000000}")),
        Some(2500)
    );
    assert_eq!(duration_ms(&node("20ms")), None, "not protobuf's form");
}
