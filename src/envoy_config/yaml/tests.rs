use super::*;

const TEXT: &str = "\
listeners:
  - name: a
    rateLimits:
      - actions: [{generic_key: {descriptor_value: x}}]
    flag: true
    wrapped: {value: 7}
";

#[test]
fn fields_are_found_in_either_spelling_with_their_lines() {
    let doc = Document::parse("envoy.yaml", TEXT).expect("yaml");
    let listener = &doc.root.get("listeners").expect("listeners").items()[0];
    assert_eq!(listener.str("name"), Some("a"));
    let limits = listener.get("rate_limits").expect("camelCase accepted");
    assert_eq!(limits.line, Some(3));
    assert_eq!(limits.items()[0].line, Some(4));
    assert_eq!(doc.place(&limits.items()[0]).to_string(), "envoy.yaml:4");
    assert_eq!(listener.bool("flag"), Some(true));
    assert_eq!(
        listener.u64("wrapped"),
        Some(7),
        "a protobuf wrapper's `value`"
    );
    assert_eq!(
        listener.unknown_fields(&["name", "rate_limits", "flag"]),
        ["wrapped"]
    );
    assert_eq!(camel_case("xff_num_trusted_hops"), "xffNumTrustedHops");
}

#[test]
fn scalars_are_kept_as_written() {
    let doc = Document::parse(
        "v.yaml",
        "a: 1.10\nb: y\nc: 0755\nd: \"quoted\"\ne: true\nf: [on, 2.50]\n",
    )
    .expect("yaml");
    let get = |k: &str| doc.root.str(k).map(str::to_owned);
    assert_eq!(get("a").as_deref(), Some("1.10"));
    assert_eq!(get("b").as_deref(), Some("y"));
    assert_eq!(get("c").as_deref(), Some("0755"));
    assert_eq!(get("d").as_deref(), Some("quoted"));
    assert_eq!(doc.root.bool("e"), Some(true));
    let f: Vec<&str> = doc
        .root
        .get("f")
        .unwrap()
        .items()
        .iter()
        .filter_map(Node::text)
        .collect();
    assert_eq!(f, ["on", "2.50"]);
}

#[test]
fn what_is_not_yaml_or_too_deep_is_refused() {
    assert!(Document::parse("x.yaml", "a: [").is_err());
    let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    let error = Document::parse("x.yaml", &nested(200)).expect_err("too deep");
    assert!(error.to_string().starts_with("x.yaml: not YAML"), "{error}");
    // As deep as accepted, on a test thread's stack (smaller than the main thread's).
    assert!(Document::parse("x.yaml", &nested(MAX_DEPTH - 1)).is_ok());
}
