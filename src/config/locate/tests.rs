use super::*;

const YAML: &str = "\
domain: d
descriptors:
  - key: a
    vaue: b
    rate_limit:
      unit: second
      requests_per_unit: -5
  - key: c
    rate_limit: {unit: second, replaces: [{name: x, extra: 1}]}
";

#[test]
fn finds_keys_values_and_maps() {
    assert_eq!(path_at(YAML, 1, 1).as_deref(), Some(""));
    assert_eq!(path_at(YAML, 3, 5).as_deref(), Some("descriptors[0]"));
    assert_eq!(path_at(YAML, 4, 5).as_deref(), Some("descriptors[0].vaue"));
    assert_eq!(
        path_at(YAML, 7, 26).as_deref(),
        Some("descriptors[0].rate_limit.requests_per_unit")
    );
    assert_eq!(
        path_at(YAML, 9, 53).as_deref(),
        Some("descriptors[1].rate_limit.replaces[0].extra")
    );
}

#[test]
fn between_nodes_takes_the_previous_one() {
    assert_eq!(
        path_at(YAML, 6, 20).as_deref(),
        Some("descriptors[0].rate_limit.unit")
    );
}

#[test]
fn not_yaml_has_no_path() {
    assert_eq!(path_at("a: [\n", 1, 4), None);
}
