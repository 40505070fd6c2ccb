use super::KNOWN_VARIABLES;
use std::collections::BTreeSet;

/// Every upper-case string literal of the code that reads upstream's variables (and of
/// the `serve` settings, which read its switches) is listed, unless it is a value.
#[test]
fn every_variable_the_code_names_is_listed() {
    const VALUES: &[&str] = &[
        "F",
        "FALSE",
        "FILE",
        "GRPC_XDS_SOTW",
        "SINGLE",
        "T",
        "TRUE",
        "WAIT",
        "WARN",
    ];
    let listed: BTreeSet<&str> = KNOWN_VARIABLES.iter().copied().collect();
    assert_eq!(listed.len(), KNOWN_VARIABLES.len(), "listed twice");
    for (file, source) in [
        ("upstream_env.rs", include_str!("../../upstream_env.rs")),
        ("serve/settings.rs", include_str!("../../serve/settings.rs")),
        ("cli/run.rs", include_str!("../../cli/run.rs")),
        ("cli/mod.rs", include_str!("../../cli/mod.rs")),
        ("trace/settings.rs", include_str!("../../trace/settings.rs")),
    ] {
        let code = source.split("#[cfg(test)]").next().unwrap_or(source);
        for literal in code.split('"').skip(1).step_by(2) {
            let variable = !literal.is_empty()
                && literal.starts_with(|c: char| c.is_ascii_uppercase())
                && literal
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if variable && !literal.starts_with("RLS_") && !VALUES.contains(&literal) {
                assert!(
                    listed.contains(literal),
                    "{file} names {literal}: add it to KNOWN_VARIABLES"
                );
            }
        }
    }
}
