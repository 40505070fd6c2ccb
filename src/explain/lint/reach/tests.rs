use super::*;

#[test]
fn masked_values_are_network_addresses_of_the_right_length() {
    assert!(is_masked("10.0.0.0/16", 16, 128));
    assert!(!is_masked("10.0.0.0/16", 24, 128), "another length");
    assert!(
        !is_masked("10.0.1.0/16", 16, 128),
        "not the network address"
    );
    assert!(is_masked("2001:db8::/32", 32, 32));
    assert!(!is_masked("10.0.0.0", 16, 128));
    assert!(!is_masked("x/16", 16, 128));
}

#[test]
fn wildcards_match_as_requests_do() {
    assert!(glob_matches("/api/*", "/api/users"));
    assert!(glob_matches("a*b*c", "a-x-b-y-c"));
    assert!(!glob_matches("a*b", "ab-c"));
    assert!(!glob_matches("exact", "exact"), "not a wildcard");
}
