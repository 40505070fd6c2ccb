use super::*;

fn shown(text: &str) -> Vec<String> {
    problems("limits.yaml", text)
        .expect("readable")
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn every_problem_of_a_file_is_reported_with_its_line_type_and_value() {
    let text = "\
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: minute
      requests_per_unit: sixty
  - key: b
    shadow_mode: maybe
    rate_limit: {unit: second, requests_per_unit: \"10\", burst: 3}
  - key: c
    rate_limits: [{unit: hour, requests_per_unit: -1}]
    descriptors: {key: d}
  - value
";
    assert_eq!(
        shown(text),
        [
            "limits.yaml:6: descriptors[0].rate_limit.requests_per_unit: expected a whole number \
             from 0 to 4294967295, got the string \"sixty\"",
            "limits.yaml:8: descriptors[1].shadow_mode: expected true or false, got the string \
             \"maybe\"",
            "limits.yaml:9: descriptors[1].rate_limit.requests_per_unit: expected a whole number \
             from 0 to 4294967295, got the string \"10\"; write it without quotes (upstream \
             refuses a quoted value too)",
            "limits.yaml:9: descriptors[1].rate_limit.burst: unknown field `burst`, expected one \
             of `unit`, `requests_per_unit`, `unlimited`, `name`, `replaces`, \
             `unit_multiplier`, `penalty`, `guarantee`",
            "limits.yaml:11: descriptors[2].rate_limits[0].requests_per_unit: expected a whole \
             number from 0 to 4294967295, got -1",
            "limits.yaml:12: descriptors[2].descriptors: expected a list, got a mapping",
            "limits.yaml:13: descriptors[3]: expected a mapping, got the string \"value\"",
        ]
    );
}

#[test]
fn a_file_of_the_right_shape_has_no_problem() {
    let text = "\
domain: d
descriptors:
  - key: a
    value: 10.0.0.1
    shadow_mode: yes
    metadata: {team: edge}
    rate_limit: {unit: minute, requests_per_unit: 4294967295, name: 7, unit_multiplier: 2}
    descriptors:
      - key: b
        rate_limits: [{unit: hour, requests_per_unit: 0, replaces: [{name: x}]}]
  - key: empty
";
    assert_eq!(shown(text), Vec::<String>::new());
    assert_eq!(
        shown(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n"
        ),
        [
            "limits.yaml:4: descriptors[0].rate_limit.requests_per_unit: expected a whole number \
          from 0 to 4294967295, got 4294967296"
        ]
    );
}

#[test]
fn what_is_not_a_mapping_is_left_to_the_reader() {
    assert_eq!(problems("f", "domain: [\n"), None);
    assert_eq!(shown("[]\n"), Vec::<String>::new());
    assert_eq!(shown(""), Vec::<String>::new());
}
