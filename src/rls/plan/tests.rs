use super::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

fn descriptor(values: &[&str]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: values
            .iter()
            .map(|v| Entry {
                key: "k".into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn identifiers_inline_and_on_the_heap_are_written_alike() {
    let long = "v".repeat(30);
    let cases: [(&[&str], u64, &str); 6] = [
        (&["10.0.0.1"], 0, "8:10.0.0.1"),
        (&["a", "bc"], 0, "1:a2:bc"),
        (&["a", "bc"], 0b10, "1:a*"),
        (&[""], 0, "0:"),
        (&["0123456789"; 2], 0, "10:012345678910:0123456789"),
        (&["ünï"], 0, "5:ünï"),
    ];
    for (values, shared, want) in cases {
        assert_eq!(identifier(&descriptor(values), shared), want, "{values:?}");
    }
    let on_heap = identifier(&descriptor(&[&long]), 0);
    assert_eq!(on_heap, format!("30:{long}"));
    assert!(on_heap.is_heap_allocated());
}

#[test]
fn identifiers_are_injective() {
    let pairs = [
        (vec!["a:b"], vec!["a", "b"]),
        (vec!["1:a"], vec!["a", ""]),
        (vec!["", ""], vec![""]),
        (vec!["ab", "c"], vec!["a", "bc"]),
    ];
    for (a, b) in pairs {
        assert_ne!(
            identifier(&descriptor(&a), 0),
            identifier(&descriptor(&b), 0),
            "{a:?} vs {b:?}"
        );
    }
    // A shared entry never reads as a value, whatever the value.
    assert_ne!(
        identifier(&descriptor(&["*"]), 0),
        identifier(&descriptor(&["x"]), 1)
    );
    assert_eq!(
        identifier(&descriptor(&["x", "y"]), 0b01),
        identifier(&descriptor(&["z", "y"]), 0b01)
    );
}

#[test]
fn cost_follows_hits_addend_rules() {
    let mut d = descriptor(&["x"]);
    assert_eq!(cost(&d, 0), 1);
    assert_eq!(cost(&d, 5), 5);
    d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
    assert_eq!(cost(&d, 5), 0);
    d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 7 });
    assert_eq!(cost(&d, 5), 7);
    d.is_negative_hits = true;
    assert_eq!(cost(&d, 5), 7, "the amount to refund");
}
