use super::*;

fn map(json: Json) -> Map<String, Json> {
    match json {
        Json::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn the_first_value_wins_and_mappings_merge() {
    let a = map(serde_json::json!({"tier": "gold", "limits": {"a": 1}}));
    let b = map(serde_json::json!({"tier": "silver", "limits": {"a": 2, "b": 3}, "x": true}));
    let request = RateLimitRequest {
        domain: "d".into(),
        hits_addend: 2,
        ..Default::default()
    };
    let out = dynamic_metadata(&request, [&a, &b].into_iter());
    let Some(Value {
        kind: Some(Kind::StructValue(merged)),
    }) = out.fields.get("metadata")
    else {
        panic!("no metadata: {out:?}");
    };
    let want = json(&serde_json::json!({"tier": "gold", "limits": {"a": 1, "b": 3}, "x": true}));
    assert_eq!(Some(Kind::StructValue(merged.clone())), want.kind);
    assert_eq!(out.fields.get("hitsAddend"), Some(&number(2.0)));
    assert_eq!(out.fields.get("domain"), Some(&string("d".into())));
    // The config's own mapping is not changed by a merge.
    assert_eq!(a.get("limits"), Some(&serde_json::json!({"a": 1})));
}
