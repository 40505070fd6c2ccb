use super::*;

fn request(headers: &[&str]) -> HttpRequest {
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    HttpRequest::new(
        "GET /a/b?x=1&y=%20two&x=3#frag",
        &headers,
        None,
        "10.0.0.9".parse().unwrap(),
    )
    .expect("valid")
}

#[test]
fn headers_pseudo_headers_and_the_query() {
    let r = request(&["X-Key: alice", "x-key: bob", "Host: example.com:8080"]);
    assert_eq!(r.header(":path"), Some("/a/b?x=1&y=%20two&x=3#frag"));
    assert_eq!(r.header(":method"), Some("GET"));
    assert_eq!(r.header(":authority"), Some("example.com:8080"));
    assert_eq!(r.header("x-key"), Some("alice"), "the first value");
    assert_eq!(r.header_joined("x-key").as_deref(), Some("alice,bob"));
    assert_eq!(r.path_without_query(), "/a/b");
    assert_eq!(r.query_first("x").as_deref(), Some("1"));
    assert_eq!(r.query_first("y").as_deref(), Some(" two"), "decoded");
    assert_eq!(r.query_first("z"), None);
}

#[test]
fn bad_requests_are_refused() {
    let peer = "127.0.0.1".parse().unwrap();
    assert!(HttpRequest::new("GET", &[], None, peer).is_err());
    assert!(HttpRequest::new("GET path", &[], None, peer).is_err());
    assert!(HttpRequest::new("GET /x", &["nocolon".into()], None, peer).is_err());
    assert!(HttpRequest::new("GET /x", &[":path: /y".into()], None, peer).is_err());
    let many: Vec<String> = (0..101).map(|i| format!("h{i}: v")).collect();
    assert!(HttpRequest::new("GET /x", &many, None, peer).is_err());
    let r = HttpRequest::new("/only-a-path", &[], Some("h"), peer).expect("GET by default");
    assert_eq!((r.method.as_str(), r.authority.as_str()), ("GET", "h"));
}

#[test]
fn the_client_address_follows_use_remote_address_and_trusted_hops() {
    let xff = request(&["x-forwarded-for: 1.1.1.1, 2.2.2.2"]);
    let none = request(&[]);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    // Without use_remote_address: the last XFF entry (past trusted hops), else the peer.
    assert_eq!(xff.client_address(false, 0), ip("2.2.2.2"));
    assert_eq!(xff.client_address(false, 1), ip("1.1.1.1"));
    assert_eq!(xff.client_address(false, 2), ip("10.0.0.9"));
    assert_eq!(none.client_address(false, 0), ip("10.0.0.9"));
    // With it: the peer, or with N trusted hops the Nth from the right.
    assert_eq!(xff.client_address(true, 0), ip("10.0.0.9"));
    assert_eq!(xff.client_address(true, 1), ip("2.2.2.2"));
    assert_eq!(xff.client_address(true, 2), ip("1.1.1.1"));
    let bad = request(&["x-forwarded-for: not-an-ip"]);
    assert_eq!(bad.client_address(false, 0), ip("10.0.0.9"));
}
