use super::*;

#[test]
fn a_counter_query_is_a_domain_and_ordered_entries() {
    assert_eq!(
        parse_counter_query("domain=api&descriptor=remote_address%3D10.0.0.1,path=%2Fa%3Db"),
        Ok(CounterQuery {
            domain: "api".into(),
            entries: vec![
                ("remote_address".into(), "10.0.0.1".into()),
                ("path".into(), "/a=b".into()),
            ],
        })
    );
    assert_eq!(
        parse_counter_query("domain=api&descriptor=k=").map(|q| q.entries),
        Ok(vec![("k".into(), String::new())])
    );
}

#[test]
fn bad_counter_queries_say_why() {
    for (query, why) in [
        ("descriptor=k=v", "missing `domain`"),
        ("domain=d", "missing `descriptor`"),
        ("domain=d&descriptor=kv", "not `key=value`"),
        ("domain=d&descriptor==v", "empty key"),
        ("domain=d&domain=e&descriptor=k=v", "given twice"),
        ("domain=d&descriptor=k=v&x=1", "unknown parameter"),
    ] {
        let got = parse_counter_query(query);
        assert!(
            got.as_ref().is_err_and(|e| e.contains(why)),
            "{query}: {got:?}"
        );
    }
    let many = format!(
        "domain=d&descriptor={}",
        vec!["k=v"; MAX_ENTRIES + 1].join(",")
    );
    assert!(parse_counter_query(&many).is_err_and(|e| e.contains("more than")));
    // A malformed entry may be a secret value: the error names its position only.
    let got = parse_counter_query("domain=d&descriptor=k=v,sk-live-0123");
    assert!(
        got.as_ref()
            .is_err_and(|e| e.contains("entry 2") && !e.contains("sk-live")),
        "{got:?}"
    );
    let long = format!("domain={}&descriptor=k=v", "d".repeat(MAX_QUERY_BYTES));
    assert!(parse_counter_query(&long).is_err_and(|e| e.contains("longer than")));
}

#[test]
fn top_takes_a_bounded_n() {
    assert_eq!(parse_top_query(""), Ok(DEFAULT_TOP));
    assert_eq!(parse_top_query("n=64"), Ok(64));
    assert!(parse_top_query("n=65").is_err());
    assert!(parse_top_query("n=0").is_err());
    assert!(parse_top_query("by=x").is_err());
}
