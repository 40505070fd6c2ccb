use super::*;

#[test]
fn templates_parse_and_render_the_key() {
    let template: DescriptorTemplate = "tenant=t{key},path=/api".parse().unwrap();
    assert!(template.is_keyed());
    let request = RequestTemplate {
        domain: "d".into(),
        descriptors: vec![template],
        hits_addend: 3,
        key_space: 10,
    }
    .build_with_key(7);
    assert_eq!(request.hits_addend, 3);
    let entries = &request.descriptors[0].entries;
    assert_eq!(
        (entries[0].key.as_str(), entries[0].value.as_str()),
        ("tenant", "t7")
    );
    assert_eq!(
        (entries[1].key.as_str(), entries[1].value.as_str()),
        ("path", "/api")
    );
}

#[test]
fn bad_templates_are_rejected_with_the_entry() {
    let error = "a=1,nonsense".parse::<DescriptorTemplate>().unwrap_err();
    assert!(error.contains("nonsense"), "{error}");
    assert!("=v".parse::<DescriptorTemplate>().is_err());
}

#[test]
fn keys_stay_in_the_key_space() {
    let template = RequestTemplate::one_keyed_entry(3);
    let mut rng = fastrand::Rng::with_seed(1);
    for _ in 0..100 {
        let value: u64 = template.build(&mut rng).descriptors[0].entries[0]
            .value
            .parse()
            .unwrap();
        assert!(value < 3);
    }
}
