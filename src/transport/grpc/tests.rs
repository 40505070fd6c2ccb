use super::*;
use std::time::Instant;

/// Answers every path at once (an empty OK), except `/hang`, which never answers.
fn routes() -> impl Service<
    GrpcRequest,
    Response = http::Response<GrpcBody>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    hyper::service::service_fn(|request: GrpcRequest| async move {
        if request.uri().path() == "/hang" {
            std::future::pending::<()>().await;
        }
        Ok::<_, Infallible>(http::Response::new(GrpcBody::from(
            tonic::body::Body::empty(),
        )))
    })
}

/// Serves `settings` on a local port until `stop`; returns the address and the server's
/// task (it ends once every connection is closed).
async fn start(
    settings: TransportSettings,
    stop: CancellationToken,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener,
        Err(error) => panic!("cannot bind a local port: {error}"),
    };
    let addr = listener.local_addr().expect("bound");
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        let (conn, _) = listener.accept().await.ok()?;
        Some((Ok::<_, Infallible>(conn), listener))
    });
    let server = GrpcServer::new(&settings);
    let task = tokio::spawn(async move {
        server
            .serve(incoming, routes(), stop.cancelled_owned())
            .await
    });
    (addr, task)
}

/// An HTTP/2 client connection; its driver task ends when the server closes it.
async fn connect(
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("handshake");
    (client, tokio::spawn(connection))
}

/// A request on `path`, its body ended; the response's future.
async fn send(
    client: &mut h2::client::SendRequest<bytes::Bytes>,
    path: &str,
) -> h2::client::ResponseFuture {
    let request = http::Request::post(format!("http://test{path}"))
        .header("content-type", "application/grpc")
        .body(())
        .expect("a request");
    let mut ready = client.clone().ready().await.expect("ready for a request");
    let (response, _) = ready.send_request(request, true).expect("sent");
    *client = ready;
    response
}

/// A server whose connections age out, and one client connection to it.
struct Aging {
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
    /// When the connection was opened.
    opened: Instant,
    client: h2::client::SendRequest<bytes::Bytes>,
    connection: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

/// Serves with a maximum connection age of `age` and a grace of `grace`, and connects.
async fn open_aging(age: Duration, grace: Option<Duration>) -> Aging {
    let settings = TransportSettings {
        max_connection_age: Some(age),
        max_connection_age_grace: grace,
        ..TransportSettings::default()
    };
    let stop = CancellationToken::new();
    let (addr, server) = start(settings, stop.clone()).await;
    let opened = Instant::now();
    let (client, connection) = connect(addr).await;
    Aging {
        stop,
        server,
        opened,
        client,
        connection,
    }
}

#[tokio::test]
async fn a_connection_past_its_maximum_age_is_sent_away() {
    let Aging {
        stop,
        server,
        opened,
        mut client,
        connection,
    } = open_aging(Duration::from_millis(300), None).await;
    let response = send(&mut client, "/ok").await.await.expect("answered");
    assert_eq!(response.status(), http::StatusCode::OK);
    assert!(response.headers().get(http::header::DATE).is_none());
    // GOAWAY with no stream open: the connection ends, after the age and not long after.
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(ended.is_ok(), "the connection outlived its age by 5 s");
    let lived = opened.elapsed();
    assert!(lived >= Duration::from_millis(300), "{lived:?}");
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stops")
        .expect("the server's task");
}

#[tokio::test]
async fn a_request_outliving_the_grace_is_cut_with_its_connection() {
    let Aging {
        stop,
        opened,
        mut client,
        connection,
        ..
    } = open_aging(Duration::from_millis(200), Some(Duration::from_millis(300))).await;
    let hanging = send(&mut client, "/hang").await;
    // The GOAWAY at 200 ms lets the open request go on; at 500 ms the connection closes.
    let answered = tokio::time::timeout(Duration::from_secs(5), hanging).await;
    let cut_after = opened.elapsed();
    assert!(
        matches!(answered, Ok(Err(_))),
        "the hanging request must fail with its connection, not {answered:?}"
    );
    assert!(cut_after >= Duration::from_millis(500), "{cut_after:?}");
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(ended.is_ok(), "the connection is closed");
    stop.cancel();
}

#[tokio::test]
async fn shutdown_lets_open_requests_finish_and_then_returns() {
    let stop = CancellationToken::new();
    let (addr, server) = start(TransportSettings::default(), stop.clone()).await;
    let (mut client, connection) = connect(addr).await;
    let hanging = send(&mut client, "/hang").await;
    let answered = send(&mut client, "/ok").await.await.expect("answered");
    assert_eq!(answered.status(), http::StatusCode::OK);
    stop.cancel();
    // The listener closes; the connection stays for its open request.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the listener still accepts after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !server.is_finished(),
        "the server waits for the open request"
    );
    // The client gives the request up: the connection closes and the server returns.
    drop((hanging, client));
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stops once its connections are closed")
        .expect("the server's task");
    let _ = connection.await;
}

/// Past the in-flight cap a request waits for a permit within its deadline: cut when the
/// deadline runs out, not whenever a permit comes back. The deadline is the client's here, so
/// the stream is reset with `CANCEL` (gRPC's HTTP/2 mapping), not answered.
#[tokio::test]
async fn a_request_waiting_past_the_cap_is_cut_at_its_deadline() {
    let settings = TransportSettings {
        max_inflight_requests: 1,
        request_timeout: Duration::from_secs(30),
        ..TransportSettings::default()
    };
    let stop = CancellationToken::new();
    let (addr, _server) = start(settings, stop.clone()).await;
    let (mut client, _connection) = connect(addr).await;
    // Holds the one permit.
    let _hanging = send(&mut client, "/hang").await;
    let request = http::Request::post("http://test/ok")
        .header("content-type", "application/grpc")
        .header("grpc-timeout", "200m")
        .body(())
        .expect("a request");
    let mut ready = client.clone().ready().await.expect("ready for a request");
    let (waiting, _) = ready.send_request(request, true).expect("sent");
    let started = Instant::now();
    let answered = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("cut within 5 s, not when the permit comes back");
    assert!(started.elapsed() >= Duration::from_millis(150));
    let reset = answered.expect_err("reset, not answered");
    assert_eq!(reset.reason(), Some(h2::Reason::CANCEL), "{reset}");
    stop.cancel();
}

/// The server's own deadline (no `grpc-timeout`) is answered: `CANCELLED` ("Timeout
/// expired"), as a trailers-only answer.
#[tokio::test]
async fn the_servers_deadline_is_answered_cancelled() {
    let settings = TransportSettings {
        request_timeout: Duration::from_millis(200),
        ..TransportSettings::default()
    };
    let stop = CancellationToken::new();
    let (addr, _server) = start(settings, stop.clone()).await;
    let (mut client, _connection) = connect(addr).await;
    let hanging = send(&mut client, "/hang").await;
    let answered = tokio::time::timeout(Duration::from_secs(5), hanging)
        .await
        .expect("answered within 5 s")
        .expect("a response");
    assert_eq!(
        answered.headers().get("grpc-status"),
        Some(&http::HeaderValue::from_static("1"))
    );
    stop.cancel();
}

/// A request that is no gRPC call is answered from its head, before the in-flight cap: it
/// never waits for a permit.
#[tokio::test]
async fn a_request_that_is_no_grpc_call_is_refused_before_every_layer() {
    let settings = TransportSettings {
        max_inflight_requests: 1,
        request_timeout: Duration::from_secs(30),
        ..TransportSettings::default()
    };
    let stop = CancellationToken::new();
    let (addr, _server) = start(settings, stop.clone()).await;
    let (mut client, _connection) = connect(addr).await;
    // Holds the one permit.
    let _hanging = send(&mut client, "/hang").await;
    for (method, content_type, status) in [
        (http::Method::GET, "application/grpc", 405),
        (http::Method::HEAD, "application/grpc", 405),
        (http::Method::POST, "text/plain", 415),
    ] {
        let request = http::Request::builder()
            .method(method.clone())
            .uri("http://test/ok")
            .header("content-type", content_type)
            .body(())
            .expect("a request");
        let mut ready = client.clone().ready().await.expect("ready for a request");
        let (response, _) = ready.send_request(request, true).expect("sent");
        let response = tokio::time::timeout(Duration::from_secs(5), response)
            .await
            .expect("answered at once, not after the permit")
            .expect("a response");
        assert_eq!(
            response.status().as_u16(),
            status,
            "{method} {content_type}"
        );
        assert!(response.body().is_end_stream(), "{method}: no body");
    }
    stop.cancel();
}
