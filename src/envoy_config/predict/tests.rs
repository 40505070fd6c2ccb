use super::super::load_str;
use super::*;

/// Routes that pick their policies each in one of the filter's ways.
const BOOTSTRAP: &str = r#"
node: {cluster: edge-cluster}
static_resources:
  listeners:
    - name: ingress
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                route_config:
                  virtual_hosts:
                    - name: api
                      domains: ["api.example.com", "*.api.example.com"]
                      rate_limits:
                        - actions: [{generic_key: {descriptor_value: vh}}]
                      routes:
                        - match: {prefix: /own}
                          route:
                            cluster: backend
                            rate_limits:
                              - actions: [{destination_cluster: {}}, {source_cluster: {}}]
                              - stage: 2
                                actions: [{generic_key: {descriptor_value: other-stage}}]
                        - match: {prefix: /inherit}
                          route: {cluster: backend}
                        - match: {prefix: /include}
                          route:
                            cluster: backend
                            include_vh_rate_limits: true
                            rate_limits:
                              - actions: [{request_headers: {header_name: x-user, descriptor_key: user, skip_if_absent: true}}, {remote_address: {}}]
                        - match: {prefix: /per-route}
                          route:
                            cluster: backend
                            rate_limits:
                              - actions: [{generic_key: {descriptor_value: ignored}}]
                          typed_per_filter_config:
                            envoy.filters.http.ratelimit:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                              domain: special
                              rate_limits:
                                - actions: [{query_parameters: {query_parameter_name: page, descriptor_key: page}}]
                                  hits_addend: {number: 3}
                                - actions: [{masked_remote_address: {v4_prefix_mask_len: 16}}]
                                  hits_addend: {format: "%RESP(x-used)%"}
                                  apply_on_stream_done: true
                        - match: {prefix: /ignore}
                          route: {cluster: backend}
                          typed_per_filter_config:
                            envoy.filters.http.ratelimit:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                              vh_rate_limits: IGNORE
                        - match: {prefix: /static}
                          direct_response: {status: 200}
                    - name: fallback
                      domains: ["*"]
                      routes: [{match: {prefix: /}, route: {cluster: other}}]
                http_filters:
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: main
"#;

/// Entries of each descriptor.
type Entries = Vec<Vec<(String, String)>>;

/// The domain, the request-time and stream-done descriptors, and their `hits_addend`.
fn descriptors(
    path: &str,
    authority: &str,
    headers: &[&str],
) -> (String, Entries, Entries, Vec<Option<u64>>) {
    let config = load_str("envoy.yaml", BOOTSTRAP).expect("config");
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let request = HttpRequest::new(
        &format!("GET {path}"),
        &headers,
        Some(authority),
        "192.168.7.9".parse().unwrap(),
    )
    .expect("request");
    let response = [("x-used".to_owned(), "4".to_owned())];
    let predictions = predict(&config, &request, &response, None, None);
    assert_eq!(predictions.len(), 1);
    let p = &predictions[0];
    let entries = |ds: Vec<&super::super::evaluate::Descriptor>| {
        ds.iter()
            .map(|d| {
                d.entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.clone()))
                    .collect()
            })
            .collect()
    };
    let hits = p
        .request_descriptors()
        .iter()
        .chain(&p.stream_done_descriptors())
        .map(|d| d.hits_addend)
        .collect();
    (
        p.domain.clone(),
        entries(p.request_descriptors()),
        entries(p.stream_done_descriptors()),
        hits,
    )
}

fn e(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_route_with_policies_of_its_own_overrides_the_virtual_host() {
    let (domain, request, done, _) = descriptors("/own/x", "api.example.com", &[]);
    assert_eq!(domain, "main");
    assert_eq!(
        request,
        [e(&[
            ("destination_cluster", "backend"),
            ("source_cluster", "edge-cluster")
        ])],
        "stage 0 only; the virtual host's are not used"
    );
    assert!(done.is_empty());
}

#[test]
fn a_route_without_policies_takes_the_virtual_host_s() {
    let (_, request, _, _) = descriptors("/inherit", "v1.api.example.com", &[]);
    assert_eq!(
        request,
        [e(&[("generic_key", "vh")])],
        "a suffix wildcard domain"
    );
}

#[test]
fn include_vh_rate_limits_adds_them_after_the_route_s() {
    let (_, request, _, _) = descriptors("/include", "API.example.com", &["x-user: ann"]);
    assert_eq!(
        request,
        [
            e(&[("user", "ann"), ("remote_address", "192.168.7.9")]),
            e(&[("generic_key", "vh")])
        ]
    );
    // skip_if_absent: the entry is left out, the descriptor still sent.
    let (_, request, _, _) = descriptors("/include", "api.example.com", &[]);
    assert_eq!(request[0], e(&[("remote_address", "192.168.7.9")]));
}

#[test]
fn the_per_route_config_wins_with_its_domain_and_stream_done_call() {
    let (domain, request, done, hits) = descriptors("/per-route?page=7", "api.example.com", &[]);
    assert_eq!(domain, "special");
    assert_eq!(request, [e(&[("page", "7")])]);
    assert_eq!(done, [e(&[("masked_remote_address", "192.168.0.0/16")])]);
    assert_eq!(
        hits,
        [Some(3), Some(4)],
        "a number, then the response header"
    );
    // Without the query parameter, the first policy sends nothing.
    let (_, request, done, _) = descriptors("/per-route", "api.example.com", &[]);
    assert!(request.is_empty());
    assert_eq!(done.len(), 1);
}

#[test]
fn ignore_a_direct_response_and_another_virtual_host() {
    let (_, request, _, _) = descriptors("/ignore", "api.example.com", &[]);
    assert!(
        request.is_empty(),
        "vh_rate_limits: IGNORE, and the route has none"
    );
    let (_, request, _, _) = descriptors("/static/x", "api.example.com", &[]);
    assert!(
        request.is_empty(),
        "the filter skips routes without a cluster"
    );
    let (_, request, _, _) = descriptors("/own", "elsewhere", &[]);
    assert!(
        request.is_empty(),
        "the catch-all virtual host has no rate_limits"
    );
}

#[test]
fn a_listener_filter_selects_managers() {
    let config = load_str("envoy.yaml", BOOTSTRAP).expect("config");
    let request = HttpRequest::new("GET /", &[], None, "127.0.0.1".parse().unwrap()).unwrap();
    assert_eq!(
        predict(&config, &request, &[], Some("ingress"), None).len(),
        1
    );
    assert!(predict(&config, &request, &[], Some("other"), None).is_empty());
}
