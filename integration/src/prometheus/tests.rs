use super::*;

#[test]
fn queries_are_percent_encoded() {
    assert_eq!(
        percent_encode(r#"rate(x{a="b c"}[1m]) > 0"#),
        "rate%28x%7Ba%3D%22b%20c%22%7D%5B1m%5D%29%20%3E%200"
    );
}
