use std::path::PathBuf;

use super::super::super::load::{load_path, load_sources};
use super::*;

/// The repository's limits examples: `config/*.yaml` and upstream's README examples.
fn test_config_files() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut files = Vec::new();
    for dir in [root.clone(), root.join("upstream-examples")] {
        for entry in std::fs::read_dir(&dir).expect("config directory") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 20, "{files:?}");
    files
}

/// Every example of the repository, written and read again, is the same config: the same
/// rules (`/rlconfig`), and the same rule for the same descriptors.
#[test]
fn the_yaml_of_every_example_loads_as_the_same_config() {
    for path in test_config_files() {
        let original = load_path(&path, &Default::default()).expect("example loads");
        let yaml = original.dump_yaml();
        let sources: Vec<(String, String)> = yaml
            .split(&format!("\n{DOCUMENT_SEPARATOR}\n"))
            .enumerate()
            .map(|(i, doc)| (format!("dump#{i}"), format!("{doc}\n")))
            .collect();
        let again = match load_sources(&sources) {
            Ok(again) => again,
            Err(e) => panic!("{}: the dump does not load:\n{e}\n{yaml}", path.display()),
        };
        assert_eq!(again.dump(), original.dump(), "{}:\n{yaml}", path.display());
        assert_eq!(again.dump_yaml(), yaml, "{}: stable", path.display());
    }
}

#[test]
fn wildcards_keep_their_order_and_strings_are_quoted() {
    let yaml = "\
domain: \"d: x\"
descriptors:
  - key: k
    value: \"a*\"
    rate_limit: {unit: second, requests_per_unit: 1, name: first}
  - key: k
    value: \"ab*\"
    rate_limit: {unit: second, requests_per_unit: 2, name: second}
  - key: \"#k\"
    value: \"yes\"
    metadata: {tier: gold}
    rate_limits: [{unit: second, requests_per_unit: 3, penalty: 5s}, {unit: hour, requests_per_unit: 30}]
";
    let config = crate::config::load_str("w.yaml", yaml).expect("loads");
    let dumped = config.dump_yaml();
    let again = crate::config::load_str("again.yaml", &dumped).expect("dump loads");
    let domain = again.domain("d: x").expect("domain");
    let found = domain.find([("k", "abc")].into_iter()).expect("rule");
    assert_eq!(
        found.name.as_deref(),
        Some("first"),
        "the first wildcard still wins"
    );
    let yes = domain.find([("#k", "yes")].into_iter()).expect("rule");
    assert_eq!(yes.penalty_ms, 5_000);
    assert_eq!(yes.more_limits.len(), 1);
    assert!(yes.metadata.is_some());
}
