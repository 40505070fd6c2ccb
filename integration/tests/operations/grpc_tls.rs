//! TLS and mTLS on the gRPC listener of the real binary, with certificates made in the test:
//! a TLS client is served, a plaintext one is not; under mTLS a client without a certificate,
//! with one from another CA, or without the required SAN is refused; rotated files (the
//! server's and the client CA) are picked up without dropping the listener or open
//! connections; upstream's variables work alone; bad TLS settings stop start-up naming the
//! setting.

use gcounter_rls_integration as support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::grpc::{self, Code, RateLimitResponse, RlsClient, descriptor, request};
use support::metrics::sample;
use support::process::run_within;
use support::tls::{Ca, TlsDir, UpstreamMtls, client_config, tls_rls_client};
use support::{Launch, Service};

const LIMITS: &str = "
domain: tls
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 1000 }
";

async fn ask(client: &mut RlsClient) -> Result<RateLimitResponse, String> {
    client
        .should_rate_limit(request("tls", vec![descriptor(&[("k", "v")])]))
        .await
        .map(|r| r.into_inner())
        .map_err(|status| format!("{status:?}"))
}

/// Connects and asks once; the error of whichever step failed.
async fn call(
    addr: std::net::SocketAddr,
    config: std::sync::Arc<rustls::ClientConfig>,
) -> Result<RateLimitResponse, String> {
    let mut client = tls_rls_client(addr, config).await?;
    ask(&mut client).await
}

fn args(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

/// The service on `LIMITS`, its gRPC listener on the server files in `tls`, with `extra`
/// flags; keep the directory alive while the service runs.
fn start_tls(tls: &TlsDir, extra: &[impl AsRef<str>]) -> (tempfile::TempDir, Service) {
    let mut owned = tls.server_args();
    owned.extend(extra.iter().map(|arg| arg.as_ref().to_owned()));
    support::serve_limits(LIMITS, &args(&owned))
}

/// A TLS directory holding `server_ca`'s server certificate and `client_ca` as the CA of
/// the clients it trusts.
fn mtls_dir(server_ca: &Ca, client_ca: &Ca) -> TlsDir {
    let tls = TlsDir::new();
    tls.write_server(&server_ca.server());
    tls.write_client_ca(client_ca);
    tls
}

/// Client certificates required, signed by `tls`'s client CA and naming `envoy.internal`.
fn mtls_args(tls: &TlsDir) -> Vec<String> {
    vec![
        "--grpc-tls-client-ca".into(),
        tls.client_ca().to_string_lossy().into_owned(),
        "--grpc-tls-client-san".into(),
        "envoy.internal".into(),
    ]
}

/// The service under mTLS (see `mtls_dir` and `mtls_args`) with `extra` flags; its TLS
/// directory, and the directory to keep alive while it runs.
fn start_mtls(
    server_ca: &Ca,
    client_ca: &Ca,
    extra: &[&str],
) -> (TlsDir, tempfile::TempDir, Service) {
    let tls = mtls_dir(server_ca, client_ca);
    let mut flags = mtls_args(&tls);
    flags.extend(extra.iter().map(|&arg| arg.to_owned()));
    let (dir, service) = start_tls(&tls, &flags);
    (tls, dir, service)
}

fn handshake_failures(service: &Service) -> f64 {
    sample(
        &service.metrics(),
        "rls_tls_handshake_failures_total",
        &[("listener", "grpc")],
    )
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_tls_clients_and_refuses_plaintext() {
    let ca = Ca::new("server CA");
    let tls = TlsDir::new();
    tls.write_server(&ca.server());
    let (_dir, service) = start_tls(&tls, &[] as &[&str]);

    let response = call(service.grpc_addr, client_config(&ca, None))
        .await
        .unwrap_or_else(|e| panic!("TLS call failed: {e}\n{}", service.log_tail(30)));
    assert_eq!(response.overall_code, Code::Ok as i32);

    // A client that does not trust the server's CA refuses the server.
    let other = Ca::new("other CA");
    assert!(
        call(service.grpc_addr, client_config(&other, None))
            .await
            .is_err(),
        "a client trusting another CA accepted the server"
    );

    // A plaintext HTTP/2 client gets no answer: its preface is not a ClientHello.
    let plaintext =
        tonic::transport::Endpoint::from_shared(format!("http://{}", service.grpc_addr))
            .expect("uri")
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(3))
            .connect()
            .await;
    if let Ok(channel) = plaintext {
        let mut client = grpc::RateLimitServiceClient::new(channel);
        assert!(
            ask(&mut client).await.is_err(),
            "a plaintext client was served by a TLS listener"
        );
    }
    assert!(
        handshake_failures(&service) >= 1.0,
        "the plaintext connection is not counted as a failed handshake:\n{}",
        service.metrics()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_admits_only_clients_with_a_trusted_certificate_and_the_san() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let (_tls, _dir, service) = start_mtls(&server_ca, &client_ca, &[]);

    let good = client_ca.client(&["envoy.internal"]);
    let response = call(service.grpc_addr, client_config(&server_ca, Some(&good)))
        .await
        .unwrap_or_else(|e| panic!("mTLS call failed: {e}\n{}", service.log_tail(30)));
    assert_eq!(response.overall_code, Code::Ok as i32);

    let stranger_ca = Ca::new("stranger CA");
    let refused = [
        ("no client certificate", client_config(&server_ca, None)),
        (
            "a certificate from another CA",
            client_config(&server_ca, Some(&stranger_ca.client(&["envoy.internal"]))),
        ),
        (
            "a certificate without the SAN",
            client_config(&server_ca, Some(&client_ca.client(&["someone.else"]))),
        ),
    ];
    for (n, (what, config)) in refused.into_iter().enumerate() {
        let result = call(service.grpc_addr, config).await;
        assert!(
            result.is_err(),
            "a client with {what} was served: {result:?}"
        );
        // With TLS 1.3 the client may see its refusal before the server has counted it:
        // wait for the count, with a deadline.
        let want = (n + 1) as f64;
        support::eventually(
            &format!("handshake failures counted after {what}"),
            true,
            || handshake_failures(&service) >= want,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_are_picked_up_without_dropping_connections() {
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let tls = TlsDir::new();
    tls.write_server(&old_ca.server());
    let (_dir, service) = start_tls(&tls, &["--grpc-tls-reload-interval", "100ms"]);

    let mut open = tls_rls_client(service.grpc_addr, client_config(&old_ca, None))
        .await
        .expect("connect with the old certificate");
    ask(&mut open)
        .await
        .expect("served with the old certificate");

    tls.write_server(&new_ca.server());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match call(service.grpc_addr, client_config(&new_ca, None)).await {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => panic!(
                "the new certificate is not served 10 s after the rotation: {e}\n{}",
                service.log_tail(30)
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(
        call(service.grpc_addr, client_config(&old_ca, None))
            .await
            .is_err(),
        "new connections still get the old certificate"
    );
    // The connection made before the rotation is still served.
    ask(&mut open)
        .await
        .expect("an open connection survives the rotation");

    // A broken rotation (a key that does not match) is logged and keeps the running
    // certificate.
    support::replace_file(&tls.key(), &Ca::new("x").server().key_pem);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !service
        .log_tail(50)
        .contains("gRPC TLS files changed but cannot be used")
    {
        assert!(
            Instant::now() < deadline,
            "the bad rotation is not logged:\n{}",
            service.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    call(service.grpc_addr, client_config(&new_ca, None))
        .await
        .expect("a bad rotation keeps the running certificate");
}

/// The client CA file is re-read like the server's files: once it names a new CA, a client
/// signed by the new CA is served and one signed by the old CA is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_ca_admits_the_new_cas_clients_and_refuses_the_old_ones() {
    let server_ca = Ca::new("server CA");
    let old_ca = Ca::new("old client CA");
    let new_ca = Ca::new("new client CA");
    let (tls, _dir, service) = start_mtls(
        &server_ca,
        &old_ca,
        &["--grpc-tls-reload-interval", "100ms"],
    );
    let old_client = || client_config(&server_ca, Some(&old_ca.client(&["envoy.internal"])));
    let new_client = || client_config(&server_ca, Some(&new_ca.client(&["envoy.internal"])));
    call(service.grpc_addr, old_client())
        .await
        .unwrap_or_else(|e| panic!("the old CA's client before the rotation: {e}"));
    assert!(
        call(service.grpc_addr, new_client()).await.is_err(),
        "the new CA's client was served before the rotation"
    );

    tls.write_client_ca(&new_ca);
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = call(service.grpc_addr, new_client()).await {
        assert!(
            Instant::now() < deadline,
            "the new CA's client is refused 10 s after the rotation: {e}\n{}",
            service.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        call(service.grpc_addr, old_client()).await.is_err(),
        "the old CA's client is still served after the rotation"
    );
    assert!(
        service
            .log_tail(50)
            .contains("gRPC TLS certificates changed on disk"),
        "the rotation is not logged\n{}",
        service.log_tail(30)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_variables_alone_turn_on_mtls() {
    let mtls = UpstreamMtls::new();
    let (_dir, limits) = support::limits_file(LIMITS);
    let service = Service::start_with(&limits, &[], Launch::env(&mtls.env()));
    call(service.grpc_addr, mtls.client(Some(&[UpstreamMtls::SAN])))
        .await
        .unwrap_or_else(|e| panic!("mTLS call failed: {e}\n{}", service.log_tail(30)));
    assert!(
        call(service.grpc_addr, mtls.client(None)).await.is_err(),
        "a client without a certificate was served"
    );
    assert!(
        call(service.grpc_addr, mtls.client(Some(&["other"])))
            .await
            .is_err(),
        "a client without the SAN was served"
    );
}

/// `serve` with these arguments and environment must exit with `code` (2: an invalid setting,
/// 1: a file that cannot be used when the listener starts), its output containing each of
/// `expected`.
fn assert_start_fails(code: i32, args: &[&str], env: &[(&str, &str)], expected: &[&str]) {
    let (_dir, limits) = support::limits_file(LIMITS);
    let (output, text, ended) = run_within(
        Command::new(support::binary())
            .arg("serve")
            .arg("--config")
            .arg(&limits)
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(["--debug-addr", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied()),
        Duration::from_secs(15),
    );
    assert!(ended, "serve {args:?} with {env:?} did not stop at start");
    assert_eq!(
        output.status.code(),
        Some(code),
        "serve {args:?} with {env:?}: {text}"
    );
    for needle in expected {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
}

#[test]
fn bad_tls_settings_stop_start_up_naming_the_setting() {
    let tls = TlsDir::new();
    let ca = Ca::new("CA");
    let server = ca.server();
    tls.write_server(&server);
    let cert = tls.cert().to_string_lossy().into_owned();
    let key = tls.key().to_string_lossy().into_owned();

    assert_start_fails(
        1,
        &[
            "--grpc-tls-cert",
            "/nonexistent/cert.pem",
            "--grpc-tls-key",
            &key,
        ],
        &[],
        &["--grpc-tls-cert", "/nonexistent/cert.pem"],
    );
    assert_start_fails(
        2,
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &cert),
        ],
        &["GRPC_SERVER_TLS_KEY"],
    );
    assert_start_fails(
        2,
        &[],
        &[("GRPC_SERVER_USE_TLS", "yes")],
        &["GRPC_SERVER_USE_TLS"],
    );
    // The key file holds a certificate, not a key.
    assert_start_fails(
        1,
        &["--grpc-tls-cert", &cert, "--grpc-tls-key", &cert],
        &[],
        &["--grpc-tls-key"],
    );
}

#[test]
fn a_handshake_that_stalls_is_cut_at_the_preface_timeout() {
    use std::io::{Read, Write};
    let ca = Ca::new("CA");
    let tls = TlsDir::new();
    tls.write_server(&ca.server());
    let (_dir, service) = start_tls(&tls, &["--preface-timeout", "300ms"]);

    // More than the 24 bytes the raw deadline waits for: the start of a ClientHello record
    // announcing 512 bytes, then silence. Only the handshake deadline can end it.
    let mut stalled = std::net::TcpStream::connect(service.grpc_addr).expect("connect");
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.resize(40, 0);
    stalled.write_all(&hello).expect("write");
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = stalled.read(&mut buf);
    assert!(
        matches!(read, Ok(0))
            || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the stalled handshake was not closed: {read:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed only after {:?}",
        started.elapsed()
    );
    // The close and the count are two steps of the server's: the count can land just after.
    support::eventually("the stalled handshake counted", true, || {
        sample(
            &service.metrics(),
            "rls_connections_preface_timeouts_total",
            &[("listener", "grpc")],
        )
        .is_some_and(|timeouts| timeouts >= 1.0)
    });
}

/// The `ratelimit` cluster of `envoy/per-client-ip.yaml`, plus an mTLS transport socket.
const RATELIMIT_CLUSTER_END: &str = "            http2_protocol_options: {}
      load_assignment:
        cluster_name: ratelimit
";

#[test]
fn envoy_talks_to_the_service_over_mtls() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let tls = mtls_dir(&server_ca, &client_ca);
    let envoy_identity = client_ca.client(&["envoy.internal"]);
    support::replace_file(&tls.path("envoy-cert.pem"), &envoy_identity.cert_pem);
    support::replace_file(&tls.path("envoy-key.pem"), &envoy_identity.key_pem);
    support::replace_file(&tls.path("server-ca.pem"), &server_ca.cert_pem());

    let mut owned = tls.server_args();
    owned.extend(mtls_args(&tls));
    let service = Service::start(
        support::repo_path("config/per-client-ip.yaml"),
        &args(&owned),
    );
    let file = |name: &str| tls.path(name).to_string_lossy().into_owned();
    let with_tls = format!(
        "            http2_protocol_options: {{}}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: localhost
          common_tls_context:
            alpn_protocols: [h2]
            tls_certificates:
              - certificate_chain: {{ filename: {cert} }}
                private_key: {{ filename: {key} }}
            validation_context:
              trusted_ca: {{ filename: {ca} }}
              match_typed_subject_alt_names:
                - san_type: DNS
                  matcher: {{ exact: localhost }}
      load_assignment:
        cluster_name: ratelimit
",
        cert = file("envoy-cert.pem"),
        key = file("envoy-key.pem"),
        ca = file("server-ca.pem"),
    );
    let envoy = support::Envoy::start(
        "envoy/per-client-ip.yaml",
        service.grpc_addr.port(),
        &[(RATELIMIT_CLUSTER_END, &with_tls)],
    );
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(20));

    // 5 a minute per client address; Envoy fails open, so the 429 proves the service
    // answered through TLS.
    let codes: Vec<u16> = (0..6)
        .map(|_| {
            support::http_get(envoy.listen_addr, "/", &[])
                .unwrap_or_else(|e| panic!("GET through Envoy: {e}\n{}", envoy.log_tail(30)))
                .status
        })
        .collect();
    assert_eq!(
        codes,
        [200, 200, 200, 200, 200, 429],
        "Envoy:\n{}\nservice:\n{}",
        envoy.log_tail(30),
        service.log_tail(30)
    );
    assert!(
        envoy
            .stat("cluster.ratelimit.ssl.handshake")
            .is_some_and(|n| n >= 1),
        "no TLS handshake to the service in Envoy's stats:\n{}",
        envoy.stats_matching("cluster.ratelimit.ssl")
    );
    assert_eq!(handshake_failures(&service), 0.0);
}
