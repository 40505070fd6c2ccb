use super::*;

#[test]
fn durations_in_range_parse_and_the_rest_is_refused_with_the_reason() {
    assert_eq!(parse("5m"), Ok(300_000));
    assert_eq!(parse("1h 30m"), Ok(5_400_000));
    assert!(parse("500ms").is_err_and(|e| e.contains("out of range")));
    assert!(parse("2days").is_err_and(|e| e.contains("out of range")));
    assert!(parse("soon").is_err_and(|e| e.contains("not a duration")));
}
