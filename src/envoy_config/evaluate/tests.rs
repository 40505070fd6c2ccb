use super::super::load_str;
use super::super::model::RateLimitPolicy;
use super::*;

/// The policies of a one-route config whose route carries `rate_limits`.
fn policies(rate_limits: &str) -> Vec<RateLimitPolicy> {
    let yaml = format!(
        "virtual_hosts:\n  - name: v\n    domains: ['*']\n    routes:\n      - match: {{prefix: /}}\n        route: {{cluster: c, rate_limits: {rate_limits}}}\n"
    );
    let config = load_str("routes.yaml", &yaml).expect("config");
    let routes = config.managers[0].routes.as_ref().expect("routes");
    let action = routes.virtual_hosts[0].routes[0]
        .action
        .as_ref()
        .expect("action");
    action.rate_limits.clone()
}

fn outcome(rate_limits: &str, headers: &[&str]) -> Outcome {
    let config = load_str(
        "routes.yaml",
        "virtual_hosts: [{name: v, domains: ['*'], routes: [{match: {prefix: /}, route: {cluster: c}, metadata: {filter_metadata: {rl: {tier: {name: gold}}}}}]}]\n",
    )
    .expect("config");
    let route = &config.managers[0].routes.as_ref().unwrap().virtual_hosts[0].routes[0];
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let request = HttpRequest::new("GET /p?q=v", &headers, None, "10.1.2.3".parse().unwrap())
        .expect("request");
    let policy = &policies(rate_limits)[0];
    let cx = Context {
        request: &request,
        client: "10.1.2.3".parse().unwrap(),
        local_cluster: "local",
        cluster: Some(&Cluster::Named("c".into())),
        route_metadata: route.metadata.as_ref(),
        response_headers: &[],
        on_stream_done: false,
    };
    evaluate(policy, &cx)
}

fn sent(rate_limits: &str, headers: &[&str]) -> (Vec<(String, String)>, Option<u64>) {
    match outcome(rate_limits, headers) {
        Outcome::Sent(d) => (
            d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
            d.hits_addend,
        ),
        other => panic!("{rate_limits}: {other:?}"),
    }
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn every_action_kind() {
    /// The policy, the request's headers, the entries sent.
    type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: &[Case<'_>] = &[
        (
            "[{actions: [{source_cluster: {}}]}]",
            &[],
            &[("source_cluster", "local")],
        ),
        (
            "[{actions: [{destination_cluster: {}}]}]",
            &[],
            &[("destination_cluster", "c")],
        ),
        (
            "[{actions: [{request_headers: {header_name: X-K, descriptor_key: k}}]}]",
            &["x-k: v"],
            &[("k", "v")],
        ),
        (
            "[{actions: [{query_parameters: {query_parameter_name: q, descriptor_key: qk}}]}]",
            &[],
            &[("qk", "v")],
        ),
        (
            "[{actions: [{remote_address: {}}]}]",
            &[],
            &[("remote_address", "10.1.2.3")],
        ),
        (
            "[{actions: [{masked_remote_address: {v4_prefix_mask_len: 8}}]}]",
            &[],
            &[("masked_remote_address", "10.0.0.0/8")],
        ),
        (
            "[{actions: [{generic_key: {descriptor_value: g, descriptor_key: gk}}]}]",
            &[],
            &[("gk", "g")],
        ),
        (
            "[{actions: [{header_value_match: {descriptor_value: m, headers: [{name: x-k, present_match: true}]}}]}]",
            &["x-k: 1"],
            &[("header_match", "m")],
        ),
        (
            "[{actions: [{query_parameter_value_match: {descriptor_value: qm, query_parameters: [{name: q, string_match: {exact: v}}]}}]}]",
            &[],
            &[("query_match", "qm")],
        ),
        (
            "[{actions: [{metadata: {descriptor_key: tier, source: ROUTE_ENTRY, metadata_key: {key: rl, path: [{key: tier}, {key: name}]}}}]}]",
            &[],
            &[("tier", "gold")],
        ),
    ];
    for (rate_limits, headers, want) in cases {
        assert_eq!(sent(rate_limits, headers).0, pairs(want), "{rate_limits}");
    }
}

#[test]
fn what_stops_a_descriptor_and_what_skips_an_entry() {
    let not_sent =
        |rl: &str, headers: &[&str]| matches!(outcome(rl, headers), Outcome::NotSent { .. });
    assert!(not_sent(
        "[{actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]}]",
        &[]
    ));
    assert!(not_sent(
        "[{actions: [{header_value_match: {descriptor_value: m, expect_match: false, headers: [{name: x-k, present_match: true}]}}]}]",
        &["x-k: 1"]
    ));
    assert!(not_sent(
        "[{actions: [{metadata: {descriptor_key: t, source: ROUTE_ENTRY, metadata_key: {key: rl, path: [{key: none}]}}}]}]",
        &[]
    ));
    // skip_if_absent: the entry is left out, the others are sent.
    let (entries, _) = sent(
        "[{actions: [{request_headers: {header_name: x-k, descriptor_key: k, skip_if_absent: true}}, {generic_key: {descriptor_value: g}}]}]",
        &[],
    );
    assert_eq!(entries, pairs(&[("generic_key", "g")]));
    // A default value for metadata.
    let (entries, _) = sent(
        "[{actions: [{metadata: {descriptor_key: t, default_value: d, source: ROUTE_ENTRY, metadata_key: {key: rl, path: [{key: none}]}}}]}]",
        &[],
    );
    assert_eq!(entries, pairs(&[("t", "d")]));
    // Dynamic metadata and extensions are not known here: said, not guessed.
    assert!(matches!(
        outcome(
            "[{actions: [{metadata: {descriptor_key: t, metadata_key: {key: f, path: [{key: k}]}}}]}]",
            &[]
        ),
        Outcome::Unknown { .. }
    ));
    assert!(matches!(
        outcome("[{actions: [{extension: {name: x}}]}]", &[]),
        Outcome::Unknown { .. }
    ));
}

#[test]
fn hits_addend_as_envoy_reads_it() {
    let rl = "[{actions: [{generic_key: {descriptor_value: g}}], hits_addend: {format: '%REQ(x-cost)%'}}]";
    assert_eq!(sent(rl, &["x-cost: 7"]).1, Some(7));
    assert_eq!(sent(rl, &["x-cost: 2.9"]).1, Some(2), "a fraction is cut");
    for bad in ["x-cost: -1", "x-cost: lots", "x-cost: 2000000000"] {
        assert!(
            matches!(outcome(rl, &[bad]), Outcome::NotSent { .. }),
            "{bad}"
        );
    }
    assert!(
        matches!(outcome(rl, &[]), Outcome::NotSent { .. }),
        "no header"
    );
    let number = "[{actions: [{generic_key: {descriptor_value: g}}], hits_addend: {number: 12}}]";
    assert_eq!(sent(number, &[]).1, Some(12));
    let response = "[{actions: [{generic_key: {descriptor_value: g}}], hits_addend: {format: '%RESP(x-used)%'}}]";
    assert!(
        matches!(outcome(response, &[]), Outcome::NotSent { .. }),
        "no response before the call"
    );
}

#[test]
fn masked_addresses_as_cidr_ranges() {
    let v6: IpAddr = "2001:abcd:ef01:2345:6789:abcd:ef01:234".parse().unwrap();
    assert_eq!(masked(v6, 32, 64), "2001:abcd:ef01:2345::/64");
    assert_eq!(
        masked(v6, 32, 128),
        "2001:abcd:ef01:2345:6789:abcd:ef01:234/128"
    );
    assert_eq!(
        masked("192.168.1.1".parse().unwrap(), 24, 128),
        "192.168.1.0/24"
    );
    assert_eq!(masked("192.168.1.1".parse().unwrap(), 0, 128), "0.0.0.0/0");
}
