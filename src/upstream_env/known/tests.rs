use super::super::{serve_argv, unread_with_arguments};
use super::{Treatment, VARIABLES, is_known};
use crate::environment::Environment;
use crate::upstream_env::GoKind;
use std::collections::BTreeSet;

/// Upstream's own list: every `envconfig` tag of its `settings.go`, and its statsd library's.
const UPSTREAM_SETTINGS: &str = include_str!("upstream_settings.txt");

/// The code that reads upstream's variables (without its tests).
fn reading_code() -> Vec<(&'static str, &'static str)> {
    [
        ("upstream_env.rs", include_str!("../../upstream_env.rs")),
        ("upstream_env/redis.rs", include_str!("../redis.rs")),
        ("upstream_env/xds.rs", include_str!("../xds.rs")),
        ("serve/settings.rs", include_str!("../../serve/settings.rs")),
        (
            "serve/settings/derived.rs",
            include_str!("../../serve/settings/derived.rs"),
        ),
        ("serve/sources.rs", include_str!("../../serve/sources.rs")),
        ("cli/run.rs", include_str!("../../cli/run.rs")),
        ("cli/mod.rs", include_str!("../../cli/mod.rs")),
        ("trace/settings.rs", include_str!("../../trace/settings.rs")),
    ]
    .into_iter()
    .map(|(file, source)| (file, source.split("#[cfg(test)]").next().unwrap_or(source)))
    .collect()
}

/// `(name, Go type)` of each line of upstream's list.
fn upstream_list() -> Vec<(&'static str, &'static str)> {
    UPSTREAM_SETTINGS
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next().expect("a name");
            let go = fields.next().expect("a Go type");
            (name, go)
        })
        .collect()
}

fn env(vars: &[(&str, &str)]) -> Environment {
    let base = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
    ];
    Environment::from_pairs(base.iter().chain(vars).copied())
}

/// A value upstream's loader accepts for `kind`.
fn valid(kind: GoKind) -> &'static str {
    match kind {
        GoKind::Text => "x",
        GoKind::Bool => "true",
        GoKind::Int => "20",
        GoKind::Float => "0.5",
        GoKind::Duration => "150us",
        GoKind::List => "a,b",
        GoKind::Map => "a:1",
    }
}

#[test]
fn the_list_has_no_duplicates() {
    let names: BTreeSet<&str> = VARIABLES.iter().map(|v| v.name).collect();
    assert_eq!(names.len(), VARIABLES.len(), "listed twice");
}

/// Upstream's whole list is walked: each variable is here, with upstream's Go type, and is
/// honoured (named by the code that reads it), refused (start-up stops naming it) or accepted
/// with exactly one warning naming it. A variable in none of the three fails the test.
#[test]
fn every_upstream_variable_is_honoured_refused_or_warned() {
    let code = reading_code();
    let mut problems = Vec::new();
    for (name, go) in upstream_list() {
        let Some(variable) = VARIABLES.iter().find(|v| v.name == name) else {
            problems.push(format!("{name}: not in upstream_env::VARIABLES"));
            continue;
        };
        if GoKind::of_go_type(go) != Some(variable.kind) {
            problems.push(format!(
                "{name}: upstream's type is {go}, listed {:?}",
                variable.kind
            ));
        }
        match variable.treatment {
            Treatment::Always | Treatment::NoArguments => {
                let quoted = format!("\"{name}\"");
                if !code.iter().any(|(_, source)| source.contains(&quoted)) {
                    problems.push(format!("{name}: listed as read, but no code names it"));
                }
            }
            Treatment::Refused(_) => {
                let value = if variable.kind == GoKind::Bool {
                    "true"
                } else {
                    "x"
                };
                match serve_argv(&env(&[(name, value)])) {
                    Err(error) if error.variable == name => {}
                    other => problems.push(format!("{name}={value}: not refused: {other:?}")),
                }
            }
            Treatment::NoEffect(_) => match serve_argv(&env(&[(name, valid(variable.kind))])) {
                Ok(argv) => {
                    let naming = argv.warnings.iter().filter(|w| w.contains(name)).count();
                    if naming != 1 {
                        problems.push(format!(
                            "{name}: {naming} warnings name it: {:?}",
                            argv.warnings
                        ));
                    }
                }
                Err(error) => problems.push(format!("{name}: refused: {error}")),
            },
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every value upstream's loader refuses (its Go type) stops start-up naming the variable,
/// whatever the variable means here.
#[test]
fn every_value_upstream_refuses_is_refused_naming_the_variable() {
    let mut problems = Vec::new();
    for variable in VARIABLES {
        if matches!(variable.kind, GoKind::Text | GoKind::List) {
            continue;
        }
        let bad = if variable.kind == GoKind::Map {
            "a=1"
        } else {
            "not-a-value"
        };
        match serve_argv(&env(&[(variable.name, bad)])) {
            Err(error) if error.variable == variable.name => {}
            other => problems.push(format!("{}={bad}: {other:?}", variable.name)),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_start_with_arguments_names_the_variables_it_does_not_read() {
    let quiet = Environment::from_pairs([("SHADOW_MODE", "true"), ("RLS_REDIS_URL", "x")]);
    assert_eq!(unread_with_arguments(&quiet), None);
    let warned = Environment::from_pairs([
        ("SHADOW_MODE", "true"),
        ("REDIS_URL", "redis:6379"),
        ("REDIS_POOL_SIZE", "20"),
    ]);
    let warning = unread_with_arguments(&warned).expect("a warning");
    assert!(
        warning.contains("REDIS_URL") && warning.contains("REDIS_POOL_SIZE"),
        "{warning}"
    );
    assert!(!warning.contains("SHADOW_MODE"), "{warning}");
}

/// Every upper-case string literal of the code that reads upstream's variables is listed,
/// unless it is a value.
#[test]
fn every_variable_the_code_names_is_listed() {
    const VALUES: &[&str] = &[
        "F",
        "FALSE",
        "FILE",
        "GRPC_XDS_SOTW",
        // A prefix: the SDK's variables.
        "OTEL_",
        "SINGLE",
        "T",
        "TRUE",
        "WAIT",
        "WARN",
    ];
    for (file, code) in reading_code() {
        for literal in code.split('"').skip(1).step_by(2) {
            let variable = !literal.is_empty()
                && literal.starts_with(|c: char| c.is_ascii_uppercase())
                && literal
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if variable && !literal.starts_with("RLS_") && !VALUES.contains(&literal) {
                assert!(
                    is_known(literal),
                    "{file} names {literal}: add it to upstream_env::VARIABLES"
                );
            }
        }
    }
}
