//! `gcounter-rls check-config PATH`: accepts envoyproxy/ratelimit's documented configs
//! unchanged, and rejects broken ones naming the file, the line and the problem.
//!
//! Each validation rule is tested with its exact message where it lives
//! (`src/config/compile/tests.rs`, `src/config/load.rs`); here only what the command adds:
//! the path and line on stderr, the exit code, several files and every error listed.

use gcounter_rls_integration as support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::process::describe;

fn check_config(path: &Path) -> Output {
    support::check_config::run(path, &[])
}

fn assert_accepted(path: &Path) -> String {
    support::check_config::accepted(path, "it")
}

/// Writes `yaml` to a file, checks it must fail, and that stderr names the file (with
/// `:line` when given) and contains every one of `needles`. Returns stderr.
fn assert_rejected(yaml: &str, line: Option<usize>, needles: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("limits.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(1),
        "check-config should reject (exit 1):\n{yaml}\n{}",
        describe(&output)
    );
    let file = path.display().to_string();
    let place = match line {
        Some(line) => format!("{file}:{line}:"),
        None => file,
    };
    assert!(
        stderr.contains(&place),
        "stderr should name {place:?}:\n{yaml}\n{}",
        describe(&output)
    );
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "stderr should mention {needle:?}:\n{yaml}\n{}",
            describe(&output)
        );
    }
    stderr
}

#[test]
fn the_example_config_is_valid() {
    let example = support::repo_path("config/example.yaml");
    assert!(
        example.is_file(),
        "{} is missing: the repository should ship a runnable example config",
        example.display()
    );
    let stdout = assert_accepted(&example);
    assert!(stdout.contains("OK"), "{stdout}");
}

/// The configuration examples of envoyproxy/ratelimit's README, one file each, sorted.
fn upstream_examples() -> Vec<PathBuf> {
    let dir = support::repo_path("config/upstream-examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
}

/// The `(domains, rules)` of check-config's `PATH: OK (D domain(s), R rule(s))` line.
fn counts(stdout: &str) -> (usize, usize) {
    let parse = |suffix: &str| -> usize {
        let end = stdout
            .find(suffix)
            .unwrap_or_else(|| panic!("no {suffix:?} in {stdout:?}"));
        let start = stdout[..end].rfind(['(', ' ']).map_or(0, |i| i + 1);
        stdout[start..end]
            .parse()
            .unwrap_or_else(|e| panic!("count before {suffix:?} in {stdout:?}: {e}"))
    };
    (parse(" domain(s)"), parse(" rule(s)"))
}

#[test]
fn every_readme_example_of_envoyproxy_ratelimit_is_valid() {
    let files = upstream_examples();
    // Examples 1 to 11; examples 4, 10 and 11 in two files each.
    assert_eq!(files.len(), 14, "{files:#?}");
    let mut rules = 0;
    for path in &files {
        let stdout = assert_accepted(path);
        assert!(stdout.contains("OK"), "{}: {stdout}", path.display());
        let (file_domains, file_rules) = counts(&stdout);
        assert_eq!(file_domains, 1, "{}: {stdout}", path.display());
        assert!(file_rules > 0, "{}: {stdout}", path.display());
        rules += file_rules;
    }
    // All of them together, as one directory of distinct domains.
    let stdout = assert_accepted(&support::repo_path("config/upstream-examples"));
    assert_eq!(counts(&stdout), (files.len(), rules), "{stdout}");
    // 2 + 2 + 2 + 1 + 1 + 2 + 2 + 2 + 2 + 1 rules, then 1 + 1 + 2 + 1.
    assert_eq!(rules, 22, "{stdout}");
}

/// `config/` as a whole is a config directory a user may point `--config` at: every shipped
/// example and upstream's, each domain declared once, and nothing in it that is not limits.
#[test]
fn the_shipped_config_directory_loads_as_one() {
    let stdout = assert_accepted(&support::repo_path("config"));
    assert!(stdout.contains("OK"), "{stdout}");
}

#[test]
fn unknown_unit_is_rejected() {
    assert_rejected(
        &support::one_rule("d", "k", "fortnight", 1, 1),
        Some(5),
        &["unknown unit `fortnight`", "descriptors[0].rate_limit.unit"],
    );
}

#[test]
fn unknown_field_is_rejected() {
    // A valid rule with one field too many, on its last line.
    let rule = support::one_rule("d", "k", "second", 1, 1);
    assert_rejected(
        &format!("{rule}      requests_per_minute: 5\n"),
        Some(8),
        &["unknown field `requests_per_minute`"],
    );
    assert_rejected(
        "domain: d
descriptors:
  - key: k
    shadowmode: true
    rate_limit: {unit: second, requests_per_unit: 1}
",
        Some(4),
        &["unknown field `shadowmode`"],
    );
}

#[test]
fn duplicate_domain_across_files_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    std::fs::write(&a, "domain: dup\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
        .expect("write a.yaml");
    std::fs::write(&b, "# the same domain again\ndomain: dup\ndescriptors:\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
        .expect("write b.yaml");
    let output = check_config(dir.path());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(
        stderr.contains(&format!("{}:2:", b.display())),
        "the second file and the line of its domain should be named: {}",
        describe(&output)
    );
    assert!(
        stderr.contains("duplicate domain `dup`"),
        "{}",
        describe(&output)
    );
    assert!(
        stderr.contains(&a.display().to_string()),
        "the first declaration should be named: {}",
        describe(&output)
    );
}

#[test]
fn yaml_syntax_errors_name_the_line() {
    let cases = [
        // A mapping key indented less than its siblings.
        ("domain: d\ndescriptors:\n  - key: k\n   value: x\n", 4),
        // An unclosed flow sequence.
        ("domain: d\ndescriptors: [\n", 2),
        // A tab where YAML wants spaces.
        ("domain: d\ndescriptors:\n  - key: k\n\tvalue: x\n", 3),
        // An unterminated quoted string.
        ("domain: d\ndescriptors:\n  - key: k\n    value: \"abc\n", 5),
    ];
    for (yaml, line) in cases {
        let stderr = assert_rejected(yaml, Some(line), &["invalid YAML"]);
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one error, one line: {stderr}"
        );
    }
}

#[test]
fn every_error_of_every_file_is_listed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let one = dir.path().join("one.yaml");
    let two = dir.path().join("two.yml");
    std::fs::write(
        &one,
        "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: ''\n",
    )
    .expect("write one.yaml");
    std::fs::write(
        &two,
        "domain: two\ndescriptors:\n  - key: a\n    bogus: 1\n",
    )
    .expect("write two.yml");
    let output = check_config(dir.path());
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for (file, line, needle) in [
        (&one, 4, "unknown unit `fortnight`"),
        (&one, 5, "`key` is empty"),
        (&two, 4, "unknown field `bogus`"),
    ] {
        let place = format!("{}:{line}:", file.display());
        let found = stderr
            .lines()
            .any(|l| l.starts_with(&place) && l.contains(needle));
        assert!(
            found,
            "expected a line {place} ... {needle}: {}",
            describe(&output)
        );
    }
}

#[test]
fn a_missing_path_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nope.yaml");
    let output = check_config(&missing);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&missing.display().to_string()),
        "{}",
        describe(&output)
    );
}

/// Type and shape errors do not stop the check at the first: each is listed with its line, the
/// type expected and the value found; a quoted number is refused, as upstream's decoder does.
#[test]
fn every_type_and_shape_error_of_a_file_is_listed() {
    let yaml = "\
domain: typed
descriptors:
  - key: a
    rate_limit:
      unit: minute
      requests_per_unit: sixty
  - key: b
    shadow_mode: maybe
    rate_limit: {unit: second, requests_per_unit: \"10\"}
  - key: c
    descriptors: {key: d}
";
    let stderr = assert_rejected(yaml, Some(6), &[]);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    for (line, needle) in [
        (
            6,
            "descriptors[0].rate_limit.requests_per_unit: expected a whole number from 0 to \
             4294967295, got the string \"sixty\"",
        ),
        (
            8,
            "descriptors[1].shadow_mode: expected true or false, got the string \"maybe\"",
        ),
        (
            9,
            "descriptors[1].rate_limit.requests_per_unit: expected a whole number from 0 to \
             4294967295, got the string \"10\"; write it without quotes",
        ),
        (
            11,
            "descriptors[2].descriptors: expected a list, got a mapping",
        ),
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("limits.yaml:{line}: {needle}"))),
            "no line {line} with {needle:?}:\n{stderr}"
        );
    }
}
