//! The xDS config source: the real binary subscribed to the test's ADS server
//! (`support::xds::AdsServer`), limits pushed, ACKed and NACKed, the server dropped and
//! brought back, TLS and mTLS to it, a forced start with no server, upstream's variables.

use gcounter_rls_integration as support;

use std::time::Duration;

use envoy_types::pb::ratelimit::config::ratelimit::v3::{RateLimitDescriptor, RateLimitUnit};
use support::grpc::{self, RlsClient, limit_of};
use support::tls::{Ca, TlsDir};
use support::xds::{AdsServer, ServerTls, domain, limited};
use support::{Launch, Service};

/// A push on a loaded 2-core machine; the time it took is printed.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until `domain`'s `key=v` is limited to `want`: a push applied.
async fn await_limit(
    service: &Service,
    client: &RlsClient,
    domain: &str,
    key: &str,
    want: Option<u32>,
) -> Duration {
    service
        .await_limit(
            client,
            (domain, &[(key, "v")]),
            want,
            PUSH_TIMEOUT,
            "the push",
        )
        .await
}

fn server_arg(server: &AdsServer) -> String {
    server.addr.to_string()
}

/// Fast reconnects for the tests (upstream's defaults wait 3 s and 10 s).
const FAST_RECONNECT: [&str; 4] = [
    "--config-xds-connect-retry-interval",
    "200ms",
    "--config-xds-backoff-initial",
    "100ms",
];

fn start(server: &str, extra: &[&str]) -> Service {
    let args = [&["--config-xds-server", server][..], &FAST_RECONNECT, extra].concat();
    Service::start_without_config(&args, Launch::default())
}

#[tokio::test]
async fn pushes_apply_bad_pushes_are_nacked_and_removed_resources_remove_their_domain() {
    let ads = AdsServer::start(0);
    ads.push("1", &[domain("r-a", "a", &[("k", 3)])]);
    let service = start(&server_arg(&ads), &["--config-xds-node-id", "node-1"]);
    let first = ads.wait_ack("1");
    assert_eq!(first.type_url, support::xds::TYPE_URL);
    let subscription = &ads.requests()[0];
    assert_eq!(
        subscription.node.as_ref().map(|n| n.id.as_str()),
        Some("node-1")
    );
    assert_eq!(subscription.version_info, "");
    let client = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(client.clone(), "a", &[("k", "v")]).await, Some(3));

    // A new version: a changed limit and a new domain.
    ads.push(
        "2",
        &[
            domain("r-a", "a", &[("k", 5)]),
            domain("r-b", "b", &[("k", 7)]),
        ],
    );
    await_limit(&service, &client, "a", "k", Some(5)).await;
    await_limit(&service, &client, "b", "k", Some(7)).await;
    let ack = ads.wait_ack("2");
    assert!(!ack.response_nonce.is_empty());

    // A bad version: NACKed naming resource, domain, place and problem; nothing changes.
    let mut bad = domain("r-a", "a", &[("k", 1)]);
    let mut parent = limited("tenant", "", RateLimitUnit::Hour, 10);
    parent.descriptors = vec![RateLimitDescriptor {
        rate_limit: limited("x", "", RateLimitUnit::Unknown, 4).rate_limit,
        key: "path".into(),
        ..RateLimitDescriptor::default()
    }];
    bad.descriptors.push(parent);
    ads.push("3", &[bad, domain("r-b", "b", &[("k", 7)])]);
    let nack = ads.wait_nack();
    let detail = nack.error_detail.clone().unwrap_or_default();
    assert_eq!(
        detail.message,
        "xds resource \"r-a\" (domain \"a\"): descriptors[1].descriptors[0].rate_limit: \
         missing `unit` (second, minute, hour, day, week, month or year), or `unlimited: true`",
        "{nack:?}"
    );
    assert_eq!(detail.code, tonic::Code::InvalidArgument as i32);
    // The NACK carries the last accepted version and the bad push's nonce.
    assert_eq!(nack.version_info, "2");
    assert_ne!(nack.response_nonce, ack.response_nonce);
    assert_eq!(limit_of(client.clone(), "a", &[("k", "v")]).await, Some(5));
    assert_eq!(limit_of(client.clone(), "b", &[("k", "v")]).await, Some(7));
    assert_eq!(service.config_reloads("error"), 1.0);

    // Resource r-b removed: domain b is gone; a valid push after a NACK is taken.
    ads.push("4", &[domain("r-a", "a", &[("k", 9)])]);
    await_limit(&service, &client, "b", "k", None).await;
    assert_eq!(limit_of(client.clone(), "a", &[("k", "v")]).await, Some(9));
    ads.wait_ack("4");
    let dump = service.rlconfig();
    assert!(
        dump.contains("a.k: unit=MINUTE requests_per_unit=9"),
        "{dump}"
    );
    assert!(!dump.contains("b.k"), "{dump}");
}

#[tokio::test]
async fn a_dropped_server_keeps_the_limits_serving_and_the_client_resubscribes() {
    let ads = AdsServer::start(0);
    let port = ads.addr.port();
    ads.push("1", &[domain("r", "d", &[("k", 3)])]);
    let service = start(&server_arg(&ads), &[]);
    ads.wait_ack("1");
    let client = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(client.clone(), "d", &[("k", "v")]).await, Some(3));

    drop(ads);
    // Decisions go on with the last config while no server is there.
    let mut c = client.clone();
    for _ in 0..3 {
        let status = grpc::one_status(&mut c, grpc::hit("d", "k", "v")).await;
        assert_eq!(status.current_limit.map(|l| l.requests_per_unit), Some(3));
    }
    let health = service.admin_get("/healthz");
    assert_eq!(health.status, 200, "{}", health.body_text());

    // The server comes back (same address) with a new version: the client reconnects,
    // subscribes afresh, and the new limits apply.
    let ads = AdsServer::start(port);
    ads.push("2", &[domain("r", "d", &[("k", 6)])]);
    await_limit(&service, &client, "d", "k", Some(6)).await;
    ads.wait_ack("2");
    let resubscription = &ads.requests()[0];
    assert_eq!(resubscription.version_info, "");
    assert!(resubscription.node.is_some());
    assert!(service.log_tail(200).contains("xDS config stream ended"));
}

#[tokio::test]
async fn a_forced_start_serves_without_the_server_and_takes_the_config_when_it_appears() {
    let port = support::free_port();
    let address = format!("127.0.0.1:{port}");
    let service = start(&address, &["--force-start-without-initial-config"]);
    let client = grpc::rls_client(service.grpc_addr).await;
    // No config yet: every request is answered OK, without a limit.
    let response = grpc::should_rate_limit(&mut client.clone(), grpc::hit("d", "k", "v")).await;
    assert_eq!(grpc::overall(&response), grpc::Code::Ok);
    assert_eq!(limit_of(client.clone(), "d", &[("k", "v")]).await, None);

    let ads = AdsServer::start(port);
    ads.push("1", &[domain("r", "d", &[("k", 2)])]);
    await_limit(&service, &client, "d", "k", Some(2)).await;
    ads.wait_ack("1");
}

#[tokio::test]
async fn without_forced_start_nothing_is_served_before_the_first_config() {
    let ads = AdsServer::start(0);
    let server = server_arg(&ads);
    // Started in a thread: `start` returns once /healthz answers, which must wait for a push.
    let starting = std::thread::spawn(move || start(&server, &[]));
    ads.wait_request("subscription", PUSH_TIMEOUT, |r| r.node.is_some());
    assert!(!starting.is_finished(), "served before any config arrived");
    ads.push("1", &[domain("r", "d", &[("k", 4)])]);
    let service = starting.join().expect("service start");
    let client = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(client, "d", &[("k", "v")]).await, Some(4));
}

/// The xDS server over TLS, and over mTLS requiring our client certificate.
#[tokio::test]
async fn tls_and_mtls_to_the_server() {
    let server_ca = Ca::new("xds server CA");
    let client_ca = Ca::new("xds client CA");
    let dir = TlsDir::new();
    let ca_path = dir.path("xds-ca.pem");
    std::fs::write(&ca_path, server_ca.cert_pem()).expect("write CA");
    let client = client_ca.client(&["rls.internal"]);
    let (cert_path, key_path) = (dir.path("client.pem"), dir.path("client-key.pem"));
    std::fs::write(&cert_path, &client.cert_pem).expect("write cert");
    std::fs::write(&key_path, &client.key_pem).expect("write key");
    let ca = ca_path.to_str().expect("UTF-8 path");

    // TLS: the server's certificate names localhost; we connect to 127.0.0.1 and verify
    // the SAN given.
    let ads = AdsServer::start_with(0, Some(ServerTls::new(&server_ca.server(), None)));
    ads.push("1", &[domain("r", "tls", &[("k", 8)])]);
    let service = start(
        &server_arg(&ads),
        &[
            "--config-xds-tls",
            "--config-xds-ca",
            ca,
            "--config-xds-san",
            "localhost",
        ],
    );
    ads.wait_ack("1");
    let rls = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(rls, "tls", &[("k", "v")]).await, Some(8));
    drop(service);

    // mTLS: the server requires a certificate from the client CA; `https://` turns TLS on.
    let ads = AdsServer::start_with(
        0,
        Some(ServerTls::new(&server_ca.server(), Some(&client_ca))),
    );
    ads.push("1", &[domain("r", "mtls", &[("k", 9)])]);
    let url = format!("https://localhost:{}", ads.addr.port());
    let service = start(
        &url,
        &[
            "--config-xds-ca",
            ca,
            "--config-xds-client-cert",
            cert_path.to_str().expect("UTF-8 path"),
            "--config-xds-client-key",
            key_path.to_str().expect("UTF-8 path"),
        ],
    );
    ads.wait_ack("1");
    let rls = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(rls, "mtls", &[("k", "v")]).await, Some(9));
}

/// Upstream's variables (`CONFIG_TYPE=GRPC_XDS_SOTW` & co.) with no flags: node id and
/// metadata, additional headers, the server URL.
#[tokio::test]
async fn upstreams_variables_configure_the_xds_client() {
    let ads = AdsServer::start(0);
    ads.push("v1", &[domain("r", "up", &[("k", 11)])]);
    let url = server_arg(&ads);
    let service = Service::start_upstream(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", &url),
        ("CONFIG_GRPC_XDS_NODE_ID", "ratelimit-node"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=z1,team=edge"),
        ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-tenant:acme"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms"),
        ("USE_STATSD", "false"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
    ]);
    ads.wait_ack("v1");
    let subscription = &ads.requests()[0];
    let node = subscription.node.clone().unwrap_or_default();
    assert_eq!(node.id, "ratelimit-node");
    let metadata = node.metadata.unwrap_or_default().fields;
    let text = |k: &str| match metadata.get(k).and_then(|v| v.kind.clone()) {
        Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(s)) => s,
        other => panic!("metadata {k}: {other:?}"),
    };
    assert_eq!((text("zone"), text("team")), ("z1".into(), "edge".into()));
    let headers = ads.stream_headers();
    assert!(
        headers[0].contains(&("x-tenant".into(), "acme".into())),
        "{headers:?}"
    );
    let client = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(client, "up", &[("k", "v")]).await, Some(11));
}

/// End to end: a real Envoy (`envoy/per-client-ip.yaml` as it is) asks our service, whose
/// limits come over xDS: the pushed limit gives 429s, a new push changes it with nothing
/// restarted. An ACK is sent once the config is in place, so no polling is needed.
#[test]
fn envoy_gets_429s_from_limits_pushed_over_xds_and_a_new_push_changes_them() {
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
    use support::Envoy;
    use support::example::Client;

    let per_ip = |n: u32| RateLimitConfig {
        name: "per-client-ip".into(),
        domain: "per-client-ip".into(),
        descriptors: vec![limited("remote_address", "", RateLimitUnit::Minute, n)],
    };
    let ads = AdsServer::start(0);
    ads.push("1", &[per_ip(2)]);
    let service = start(&server_arg(&ads), &[]);
    ads.wait_ack("1");
    let envoy = Envoy::start("envoy/per-client-ip.yaml", service.grpc_addr.port(), &[]);
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(20));
    let client = Client::new(&envoy, vec![service.log_path.clone()]);
    client.admitted("/", &[], "2, 2;w=60", 1);
    client.admitted("/", &[], "2, 2;w=60", 0);
    client.limited("/", &[], "2, 2;w=60");

    // Raised to 4: the two hits already counted stay, two more pass.
    ads.push("2", &[per_ip(4)]);
    ads.wait_ack("2");
    client.admitted("/", &[], "4, 4;w=60", 1);
    client.admitted("/", &[], "4, 4;w=60", 0);
    client.limited("/", &[], "4, 4;w=60");
    assert_eq!(
        envoy.stat("cluster.upstream.ratelimit.over_limit"),
        Some(2),
        "Envoy's over_limit count{}",
        client.context()
    );
}
