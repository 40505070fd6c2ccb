use super::*;
use crate::envoy_config::load_str;

const LIMITS: &str = "\
domain: shop
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_key}
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2, name: tenant_path}
  - key: generic_key
    value: checkout
    rate_limit: {unit: second, requests_per_unit: 5, name: checkout}
  - key: masked_remote_address
    value: 10.0.0.0/16
    rate_limit: {unit: second, requests_per_unit: 5, name: office}
";

/// An Envoy config whose route sends `actions` (one policy per line) in domain `domain`.
fn envoy(domain: &str, policies: &[&str], filter_extra: &str) -> String {
    let policies: String = policies
        .iter()
        .map(|p| format!("                              - actions: {p}\n"))
        .collect();
    format!(
        "static_resources:
  listeners:
    - name: ingress
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                route_config:
                  virtual_hosts:
                    - name: shop
                      domains: ['*']
                      routes:
                        - match: {{prefix: /}}
                          route:
                            cluster: shop
                            rate_limits:
{policies}                http_filters:
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      domain: {domain}
                      timeout: 1s
{filter_extra}"
    )
}

fn findings(envoy_yaml: &str) -> Vec<Finding> {
    let limits = crate::config::load_str("limits.yaml", LIMITS).expect("limits");
    let envoy = load_str("envoy.yaml", envoy_yaml).expect("envoy");
    lint(&envoy, &limits)
}

const ALL: &[&str] = &[
    "[{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]",
    "[{request_headers: {header_name: x-tenant, descriptor_key: tenant}}, {request_headers: {header_name: ':path', descriptor_key: path}}]",
    "[{generic_key: {descriptor_value: checkout}}]",
    "[{masked_remote_address: {v4_prefix_mask_len: 16}}]",
];

#[test]
fn a_matching_pair_has_no_findings() {
    assert_eq!(findings(&envoy("shop", ALL, "")), []);
}

#[test]
fn each_planted_mistake_is_found_with_both_places() {
    let one = |policy: &str| {
        let mut policies = ALL.to_vec();
        policies.push(policy);
        let mut found = findings(&envoy("shop", &policies, ""));
        assert_eq!(found.len(), 1, "{policy}: {found:#?}");
        found.remove(0)
    };
    let typo = one("[{request_headers: {header_name: x-api-key, descriptor_key: apikey}}]");
    assert_eq!(typo.severity, Severity::Error);
    assert!(typo.message.contains("did you mean `api_key`"), "{typo}");
    assert_eq!(
        typo.envoy.map(|p| p.to_string()).as_deref(),
        Some("envoy.yaml:21")
    );
    assert_eq!(
        typo.limits.map(|p| p.to_string()).as_deref(),
        Some("limits.yaml:3")
    );

    let short = one("[{request_headers: {header_name: x-tenant, descriptor_key: tenant}}]");
    assert!(short.message.contains("missing nested level"), "{short}");
    assert_eq!(
        short.limits.map(|p| p.to_string()).as_deref(),
        Some("limits.yaml:5")
    );

    let value = one("[{generic_key: {descriptor_value: chekout}}]");
    assert!(
        value
            .message
            .contains("`chekout`, which matches none of `generic_key=checkout`"),
        "{value}"
    );

    let mask = one("[{masked_remote_address: {v4_prefix_mask_len: 24}}]");
    assert!(mask.message.contains("masked to /24"), "{mask}");
    assert_eq!(
        mask.limits.map(|p| p.to_string()).as_deref(),
        Some("limits.yaml:12")
    );

    let deep = one("[{generic_key: {descriptor_value: checkout}}, {remote_address: {}}]");
    assert!(
        deep.message.contains("goes deeper than the limits"),
        "{deep}"
    );
}

#[test]
fn a_wrong_domain_and_an_unreachable_rule() {
    let wrong = findings(&envoy("shpo", ALL, ""));
    assert_eq!(wrong.len(), 1, "{wrong:#?}");
    assert!(
        wrong[0]
            .message
            .contains("domain `shpo` is not in the limits"),
        "{}",
        wrong[0]
    );
    assert!(
        wrong[0].message.contains("did you mean `shop`"),
        "{}",
        wrong[0]
    );
    assert_eq!(
        wrong[0].envoy.as_ref().map(|p| p.to_string()).as_deref(),
        Some("envoy.yaml:24")
    );
    assert_eq!(
        wrong[0].limits.as_ref().map(|p| p.to_string()).as_deref(),
        Some("limits.yaml:1")
    );

    let unreachable = findings(&envoy("shop", &ALL[..3], ""));
    assert_eq!(unreachable.len(), 1, "{unreachable:#?}");
    assert_eq!(unreachable[0].severity, Severity::Warning);
    assert!(
        unreachable[0].message.contains("rule `office`"),
        "{}",
        unreachable[0]
    );
    assert_eq!(
        unreachable[0]
            .limits
            .as_ref()
            .map(|p| p.to_string())
            .as_deref(),
        Some("limits.yaml:12")
    );
}

#[test]
fn settings_worth_a_warning() {
    let failing_closed = envoy(
        "shop",
        ALL,
        "                      failure_mode_deny: true\n",
    );
    let found = findings(&failing_closed);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].message.starts_with("failure_mode_deny: true"),
        "{}",
        found[0]
    );
    let short = envoy("shop", ALL, "").replace("timeout: 1s", "timeout: 0.02s");
    let found = findings(&short);
    assert!(
        found[0].message.contains("`timeout` of 20 ms"),
        "{found:#?}"
    );
    let none = envoy("shop", ALL, "").replace("timeout: 1s", "stage: 0");
    let found = findings(&none);
    assert!(found[0].message.starts_with("no `timeout`"), "{found:#?}");
}

#[test]
fn unsupported_actions_and_unused_policies_are_said() {
    let mut policies = ALL.to_vec();
    policies.push("[{extension: {name: custom}}]");
    let found = findings(&envoy("shop", &policies, ""));
    assert!(
        found.iter().any(|f| f
            .message
            .contains("not checked: rate limit action `extension`")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.message.contains("descriptor not checked")),
        "{found:#?}"
    );
    // The filter's own rate_limits win over the route's, which are then never used.
    let own = "                      rate_limits: [{actions: [{generic_key: {descriptor_value: checkout}}]}]\n";
    let found = findings(&envoy("shop", ALL, own));
    assert!(
        found
            .iter()
            .any(|f| f.message.contains("never used: the filter's own")),
        "{found:#?}"
    );
}

#[test]
fn distances() {
    assert_eq!(edit_distance("api_key", "apikey"), 1);
    assert_eq!(edit_distance("path", "pth"), 1);
    assert_eq!(edit_distance("", "abc"), 3);
}

#[test]
fn rlqs_buckets_and_routes_without_a_filter() {
    let quota = |key: &str| {
        format!(
            "static_resources:
  listeners:
    - name: l
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                route_config: {{virtual_hosts: [{{name: v, domains: ['*'], routes: [{{match: {{prefix: /}}, route: {{cluster: c}}}}]}}]}}
                http_filters:
                  - name: envoy.filters.http.rate_limit_quota
                    typed_config:
                      domain: shop
                      bucket_matchers:
                        matcher_list:
                          matchers:
                            - on_match:
                                action:
                                  typed_config:
                                    bucket_id_builder:
                                      bucket_id_builder:
                                        {key}: {{custom_value: {{name: x}}}}
"
        )
    };
    let fine = findings(&quota("api_key"));
    assert!(
        fine.iter().all(|f| f.severity == Severity::Warning),
        "an RLQS bucket {{api_key}} reaches per_key: {fine:#?}"
    );
    let typo = findings(&quota("apikey"));
    assert!(
        typo.iter()
            .any(|f| f.severity == Severity::Error && f.message.contains("did you mean `api_key`")),
        "{typo:#?}"
    );
    // Routes with rate_limits and no filter: said, not checked.
    let alone = findings(
        "virtual_hosts: [{name: v, domains: ['*'], rate_limits: [{actions: [{remote_address: {}}]}], routes: []}]\n",
    );
    assert_eq!(alone.len(), 1, "{alone:#?}");
    assert!(
        alone[0].message.contains("no rate limit filter runs them"),
        "{}",
        alone[0]
    );
}
