use super::*;

#[test]
fn a_declared_family_counts_zero_and_an_unknown_one_fails() {
    let text = "# TYPE rls_requests counter\nrls_requests_total{outcome=\"ok\"} 3\n# EOF\n";
    assert_eq!(
        count(text, "rls_requests_total", &[("outcome", "over_limit")]),
        0.0
    );
    assert!(has_family(text, "rls_requests_total"));
    assert!(!has_family(text, "rls_request_total"));
    let renamed = std::panic::catch_unwind(|| count(text, "rls_request_total", &[]));
    assert!(
        renamed.is_err(),
        "a metric that does not exist must not read as 0"
    );
}

#[test]
fn finds_samples_by_name_and_labels() {
    let text = "# TYPE rls_requests counter\n\
                    rls_requests_total{outcome=\"ok\"} 3\n\
                    rls_requests_total{outcome=\"over_limit\"} 1\n\
                    rls_descriptor_decisions_total{domain=\"d\",rule=\"d.k_\\\"v\\\"\",outcome=\"within_limit\"} 2\n\
                    rls_unmatched_descriptors_total 5\n\
                    # EOF\n";
    assert_eq!(
        sample(text, "rls_requests_total", &[("outcome", "ok")]),
        Some(3.0)
    );
    assert_eq!(
        sample(
            text,
            "rls_descriptor_decisions_total",
            &[
                ("outcome", "within_limit"),
                ("rule", "d.k_\"v\""),
                ("domain", "d")
            ]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(text, "rls_unmatched_descriptors_total", &[]),
        Some(5.0)
    );
    assert_eq!(
        sample(text, "rls_requests_total", &[("outcome", "error")]),
        None
    );
    assert_eq!(sample(text, "rls_requests_total", &[]), None);
}
