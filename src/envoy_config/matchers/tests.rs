use super::*;

fn request(path: &str, headers: &[&str]) -> HttpRequest {
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    HttpRequest::new(
        &format!("GET {path}"),
        &headers,
        None,
        "127.0.0.1".parse().unwrap(),
    )
    .expect("valid")
}

fn header(name: &str, test: HeaderTest, invert: bool, missing_as_empty: bool) -> HeaderMatcher {
    HeaderMatcher {
        name: name.into(),
        test,
        invert,
        treat_missing_as_empty: missing_as_empty,
    }
}

#[test]
fn string_matchers() {
    let exact = StringMatcher::Exact("Gold".into(), true);
    assert!(exact.matches("gold") && !exact.matches("golden"));
    assert!(StringMatcher::Prefix("/api".into(), false).matches("/api/x"));
    assert!(!StringMatcher::Prefix("/API".into(), false).matches("/api/x"));
    assert!(StringMatcher::Suffix(".JS".into(), true).matches("app.js"));
    assert!(StringMatcher::Contains("mid".into(), false).matches("amidst"));
    let regex = StringMatcher::Regex(full_match_regex("[0-9]+").unwrap());
    assert!(
        regex.matches("123") && !regex.matches("12a"),
        "a full match"
    );
    assert!(full_match_regex("(").is_err());
}

#[test]
fn header_matchers_follow_envoy_on_missing_and_inverted_headers() {
    let with = request("/", &["x-plan: gold", "x-n: 5"]);
    let without = request("/", &[]);
    let gold = || HeaderTest::String(StringMatcher::Exact("gold".into(), false));
    assert!(header("x-plan", gold(), false, false).matches(&with));
    assert!(!header("x-plan", gold(), true, false).matches(&with));
    // A missing header never matches, inverted or not, unless it is taken as empty.
    assert!(!header("x-plan", gold(), false, false).matches(&without));
    assert!(!header("x-plan", gold(), true, false).matches(&without));
    assert!(header("x-plan", gold(), true, true).matches(&without));
    // Presence, and its inversion.
    assert!(header("x-plan", HeaderTest::Present(true), false, false).matches(&with));
    assert!(header("x-plan", HeaderTest::Present(true), true, false).matches(&without));
    assert!(header("x-plan", HeaderTest::Present(false), false, false).matches(&without));
    // Ranges are [start, end).
    assert!(header("x-n", HeaderTest::Range(1, 6), false, false).matches(&with));
    assert!(!header("x-n", HeaderTest::Range(1, 5), false, false).matches(&with));
}

#[test]
fn route_matches() {
    let route = |path: PathMatch| RouteMatch {
        path,
        case_sensitive: true,
        headers: Vec::new(),
        query_parameters: vec![QueryParameterMatcher {
            name: "v".into(),
            matcher: None,
        }],
        unsupported: Vec::new(),
    };
    let r = request("/api/users?v=2", &[]);
    assert_eq!(
        route(PathMatch::Prefix("/api".into())).matches(&r),
        Matched::Yes
    );
    assert_eq!(
        route(PathMatch::Exact("/api/users".into())).matches(&r),
        Matched::Yes
    );
    assert_eq!(
        route(PathMatch::Exact("/api".into())).matches(&r),
        Matched::No
    );
    let regex = full_match_regex("/api/[a-z]+").unwrap();
    assert_eq!(route(PathMatch::Regex(regex)).matches(&r), Matched::Yes);
    assert_eq!(
        route(PathMatch::SeparatedPrefix("/api".into())).matches(&r),
        Matched::Yes
    );
    let apix = request("/apix?v=1", &[]);
    assert_eq!(
        route(PathMatch::SeparatedPrefix("/api".into())).matches(&apix),
        Matched::No
    );
    assert_eq!(
        route(PathMatch::Prefix("/api".into())).matches(&request("/api", &[])),
        Matched::No,
        "no `v`"
    );
    let mut insensitive = route(PathMatch::Prefix("/API".into()));
    insensitive.case_sensitive = false;
    assert_eq!(insensitive.matches(&r), Matched::Yes);
    let mut unknown = route(PathMatch::Prefix("/".into()));
    unknown.unsupported.push("`grpc`".into());
    assert_eq!(unknown.matches(&r), Matched::Unknown(vec!["`grpc`".into()]));
}
