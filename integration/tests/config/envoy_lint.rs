//! `gcounter-rls check-config LIMITS --envoy ENVOY`: the limits against the Envoy config that
//! calls them. The repository's examples pass with no finding; a pair with planted mistakes
//! (`lint/`) has each one found, with the Envoy file and line and the limits file and line.

use gcounter_rls_integration as support;

use std::path::Path;

use support::process::describe;

/// One finding: its first line (`error: ...`), and the places it names.
#[derive(Debug)]
struct Finding {
    message: String,
    envoy: Option<String>,
    limits: Option<String>,
}

/// `check-config limits --envoy envoy`: exit code, stdout's findings, and stdout.
fn lint(limits: &Path, envoy: &Path) -> (Option<i32>, Vec<Finding>, String) {
    let envoy_arg = envoy.display().to_string();
    let output = support::check_config::run(limits, &["--envoy", &envoy_arg]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut findings: Vec<Finding> = Vec::new();
    for line in stdout.lines() {
        if line.starts_with("error: ") || line.starts_with("warning: ") {
            findings.push(Finding {
                message: line.to_owned(),
                envoy: None,
                limits: None,
            });
        } else if let (Some(place), Some(last)) =
            (line.strip_prefix("  envoy:  "), findings.last_mut())
        {
            last.envoy = Some(place.to_owned());
        } else if let (Some(place), Some(last)) =
            (line.strip_prefix("  limits: "), findings.last_mut())
        {
            last.limits = Some(place.to_owned());
        }
    }
    assert!(
        output.stderr.is_empty(),
        "nothing on stderr: {}",
        describe(&output)
    );
    (output.status.code(), findings, stdout)
}

#[test]
fn the_repository_examples_have_no_finding() {
    let mut checked = 0;
    for entry in std::fs::read_dir(support::repo_path("envoy")).expect("envoy/") {
        let envoy = entry.expect("entry").path();
        let name = envoy
            .file_stem()
            .and_then(|n| n.to_str())
            .expect("a name")
            .to_owned();
        let limits = support::repo_path(format!("config/{name}.yaml"));
        let (code, findings, stdout) = lint(&limits, &envoy);
        assert_eq!(code, Some(0), "{name}:\n{stdout}");
        assert!(findings.is_empty(), "{name}: {findings:#?}\n{stdout}");
        assert!(
            stdout.ends_with(&format!(
                "{}: 0 error(s), 0 warning(s) against {}\n",
                envoy.display(),
                limits.display()
            )),
            "{name}:\n{stdout}"
        );
        checked += 1;
    }
    assert!(checked >= 10, "{checked} examples");
}

#[test]
fn each_planted_mistake_is_found_with_both_places() {
    let dir = support::repo_path("integration/tests/config/lint");
    let (limits, envoy) = (dir.join("limits.yaml"), dir.join("envoy.yaml"));
    let (code, findings, stdout) = lint(&limits, &envoy);
    assert_eq!(code, Some(1), "errors exit 1:\n{stdout}");
    let at = |file: &Path, line: usize| format!("{}:{line}", file.display());
    // (what the message says, the Envoy line, the limits line)
    let planted = [
        // A typo'd key: `apikey` for the limits' `api_key`.
        (
            "no descriptor has the key `apikey` at the top level; did you mean `api_key`",
            23,
            6,
        ),
        // A missing nested level: Envoy sends (tenant), the rule is on (tenant, path).
        ("a missing nested level", 24, 8),
        // A wrong domain: the second filter's `shpo`.
        ("domain `shpo` is not in the limits", 40, 4),
        // An unreachable rule: nothing sends `remote_address`.
        (
            "rule `per_client` of domain `shop` is reached by no descriptor",
            32,
            15,
        ),
    ];
    for (needle, envoy_line, limits_line) in planted {
        let finding = findings
            .iter()
            .find(|f| f.message.contains(needle))
            .unwrap_or_else(|| panic!("no finding says {needle:?}:\n{stdout}"));
        assert_eq!(
            (finding.envoy.clone(), finding.limits.clone()),
            (Some(at(&envoy, envoy_line)), Some(at(&limits, limits_line))),
            "{needle}:\n{stdout}"
        );
    }
    let errors = findings
        .iter()
        .filter(|f| f.message.starts_with("error: "))
        .count();
    assert_eq!(errors, 3, "{stdout}");
}
