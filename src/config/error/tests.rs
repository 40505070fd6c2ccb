use super::*;

#[test]
fn display_with_and_without_line_and_place() {
    let full = ConfigError::new("a.yaml", Some(4), "descriptors[0].key", "key is empty");
    assert_eq!(
        full.to_string(),
        "a.yaml:4: descriptors[0].key: key is empty"
    );
    let no_line = ConfigError::new("a.yaml", None, "domain", "missing");
    assert_eq!(no_line.to_string(), "a.yaml: domain: missing");
    let whole_file = ConfigError::new("dir", None, "", "no *.yaml files");
    assert_eq!(whole_file.to_string(), "dir: no *.yaml files");
}

#[test]
fn set_is_one_error_per_line() {
    let errors = ConfigErrors::new(vec![
        ConfigError::new("a.yaml", Some(1), "domain", "one"),
        ConfigError::new("b.yaml", None, "", "two"),
    ]);
    assert_eq!(errors.to_string(), "a.yaml:1: domain: one\nb.yaml: two");
    assert_eq!(errors.len(), 2);
}

#[test]
fn control_characters_cannot_break_lines() {
    let e = ConfigError::new("a.yaml", Some(2), "x", "bad `a\nb`");
    assert_eq!(e.to_string(), "a.yaml:2: x: bad `a\\nb`");
}
