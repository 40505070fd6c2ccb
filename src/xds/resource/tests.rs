use super::*;
use crate::config::ReadLimits;
use gcounter_rls_integration::xds::limited;

fn any(config: &RateLimitConfig) -> Any {
    Any {
        type_url: TYPE_URL.into(),
        value: config.encode_to_vec(),
    }
}

fn compiled(resources: &[Any]) -> Result<LimitsConfig, Rejected> {
    compile(resources, &LoadOptions::default())
}

#[test]
fn maps_every_field_the_proto_carries() {
    let mut nested = limited("path", "/a", RateLimitUnit::Minute, 7);
    nested.shadow_mode = true;
    nested.quota_mode = true;
    nested.detailed_metric = true;
    nested.metadata = Some(Struct {
        fields: [(
            "tier".to_owned(),
            Value {
                kind: Some(Kind::StringValue("gold".into())),
            },
        )]
        .into(),
    });
    if let Some(p) = nested.rate_limit.as_mut() {
        p.name = "inner".into();
        p.replaces = vec![
            envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace {
                name: "outer".into(),
            },
        ];
    }
    let mut outer = limited("tenant", "", RateLimitUnit::Hour, 100);
    if let Some(p) = outer.rate_limit.as_mut() {
        p.name = "outer".into();
    }
    outer.descriptors = vec![nested];
    let free = RateLimitDescriptor {
        key: "free".into(),
        rate_limit: Some(RateLimitPolicy {
            unlimited: true,
            ..RateLimitPolicy::default()
        }),
        ..RateLimitDescriptor::default()
    };
    let config = RateLimitConfig {
        name: "r1".into(),
        domain: "d".into(),
        descriptors: vec![outer, free],
    };
    let loaded = match compiled(&[any(&config)]) {
        Ok(loaded) => loaded,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(loaded.rule_count(), 3);
    let domain = loaded.domain("d");
    let rule = domain
        .and_then(|d| d.find([("tenant", "x"), ("path", "/a")].into_iter()))
        .cloned();
    let Some(rule) = rule else {
        panic!("nested rule not found")
    };
    assert!(rule.shadow_mode && rule.quota_mode && rule.detailed_metric);
    assert_eq!(rule.duration_ms(), Some(60_000));
    assert_eq!(rule.name.as_deref(), Some("inner"));
    assert_eq!(&*rule.replaces, [std::sync::Arc::from("outer")]);
    assert_eq!(
        rule.metadata.as_ref().and_then(|m| m.get("tier")),
        Some(&serde_json::Value::String("gold".into()))
    );
    assert!(
        domain
            .and_then(|d| d.find([("free", "1")].into_iter()))
            .is_some_and(|r| r.is_unlimited())
    );
}

#[test]
fn a_bad_resource_is_refused_naming_resource_domain_place_and_problem() {
    let mut bad = limited("k", "", RateLimitUnit::Unknown, 5);
    bad.descriptors = vec![limited("inner", "", RateLimitUnit::Second, 1)];
    let config = RateLimitConfig {
        name: "r1".into(),
        domain: "dom".into(),
        descriptors: vec![limited("ok", "", RateLimitUnit::Second, 1), bad],
    };
    let Err(Rejected(message)) = compiled(&[any(&config)]) else {
        panic!("accepted")
    };
    assert!(
        message.starts_with(
            "xds resource \"r1\" (domain \"dom\"): descriptors[1].rate_limit: missing `unit`"
        ),
        "{message}"
    );
    let twice = compiled(&[any(&config), any(&config)]);
    assert!(twice.is_err());
    let dup = RateLimitConfig {
        name: "r2".into(),
        domain: "x".into(),
        descriptors: vec![],
    };
    let Err(Rejected(message)) = compiled(&[any(&dup), any(&dup)]) else {
        panic!("accepted a duplicate domain")
    };
    assert!(message.contains("duplicate domain `x`"), "{message}");
    let Err(Rejected(message)) = compiled(&[Any {
        type_url: TYPE_URL.into(),
        value: vec![0xff, 0xff],
    }]) else {
        panic!("accepted garbage")
    };
    assert!(
        message.starts_with("resources[0]: cannot decode"),
        "{message}"
    );
}

#[test]
fn depth_and_counts_are_bounded() {
    let mut deep = limited("leaf", "", RateLimitUnit::Second, 1);
    for level in 0..=MAX_DESCRIPTOR_DEPTH {
        deep = RateLimitDescriptor {
            key: format!("k{level}"),
            descriptors: vec![deep],
            ..RateLimitDescriptor::default()
        };
    }
    let config = RateLimitConfig {
        name: "deep".into(),
        domain: "d".into(),
        descriptors: vec![deep.clone()],
    };
    let Err(Rejected(message)) = compiled(&[any(&config)]) else {
        panic!("accepted")
    };
    assert!(message.contains("nested deeper than"), "{message}");
    let shallow = RateLimitConfig {
        descriptors: deep.descriptors,
        ..config
    };
    assert!(compiled(&[any(&shallow)]).is_ok());

    let few = LoadOptions::from(ReadLimits {
        max_files: 1,
        ..ReadLimits::default()
    });
    let Err(Rejected(message)) = compile(&[any(&shallow), any(&shallow)], &few) else {
        panic!("accepted")
    };
    assert!(message.contains("at most 1"), "{message}");
}
